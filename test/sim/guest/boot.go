/*
Copyright 2026 The Cozystack Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package guest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	sigsyaml "sigs.k8s.io/yaml"
)

// kubeletUnitLink marks the kubelet unit enabled, so it starts on every
// boot of a persistent disk.
const kubeletUnitLink = "/etc/systemd/system/multi-user.target.wants/kubelet.service"

// guest is one boot of a simulated node: its disk, its hostname and what
// the boot did.
type guest struct {
	sim            *Simulator
	fs             *filesystem
	hostname       string
	kubeletVersion string
	kubeletStarted bool
	warnings       []string
	sshKeys        map[string][]string
	// ipForward is /proc/sys/net/ipv4/ip_forward in this boot: a Kairos
	// core image leaves IPv4 forwarding off (its kernel settings are not
	// persisted, so every boot starts so) until a stage's sysctl turns it
	// on; a cloud-init image of image-builder's sets it in /etc/sysctl.d.
	ipForward bool
}

// bootDisk boots a disk with the user data: a Kairos image reads a
// #cloud-config's stages and cluster block, a cloud-init image what
// cloud-init reads. It returns the guest once the boot ran; otherwise the
// phase the boot ended in, or an error that is retried while the join may
// still succeed.
func (s *Simulator) bootDisk(ctx context.Context, image Image, data []byte, md instanceMetadata, fs *filesystem) (*guest, Phase, string, error) {
	g := &guest{sim: s, fs: fs, hostname: md.hostname, kubeletVersion: image.KubernetesVersion, sshKeys: map[string][]string{}, ipForward: image.CloudInit}
	if image.CloudInit {
		cfg, err := parseCloudInit(data, md)
		if errors.Is(err, errNotCloudInitConfig) {
			return nil, PhaseIgnored, err.Error(), nil
		}
		if err != nil {
			return nil, PhaseRefused, "", refuse("%v", err)
		}
		if err := g.cloudInitBoot(ctx, cfg, md); err != nil {
			return nil, PhaseRefused, "", err
		}
		return g, "", "", nil
	}
	cfg, err := parseCloudConfig(data)
	if errors.Is(err, errNotCloudConfig) {
		return nil, PhaseIgnored, err.Error(), nil
	}
	if err != nil {
		return nil, PhaseRefused, "", refuse("%v", err)
	}
	if err := g.boot(ctx, cfg); err != nil {
		return nil, PhaseRefused, "", err
	}
	return g, "", "", nil
}

// cloudInitBoot applies a #cloud-config in the order cloud-init's modules
// run: bootcmd on every boot; then, once per instance ID, write_files, the
// hostname, users, deferred write_files and runcmd. runcmd is one sh
// script without -e: a failing line does not stop the next, so a failed
// join leaves Cluster API's sentinel unwritten (it is chained with &&)
// while later commands still run.
func (g *guest) cloudInitBoot(ctx context.Context, cfg *cloudInitConfig, md instanceMetadata) error {
	// image-builder's images enable the kubelet unit; it runs once kubeadm
	// has given it credentials.
	g.fs.write(kubeletUnitLink, 0o644, "0:0", nil)
	var failed error
	run := func(module string, i int, c cloudInitCommand) {
		var err error
		if c.argv != nil {
			err = g.runSimpleCommand(ctx, simpleCommand{args: c.argv})
		} else {
			err = g.runCommand(ctx, c.shell)
		}
		if err != nil && failed == nil {
			failed = fmt.Errorf("cloud-init %s[%d]: %w", module, i, err)
		}
	}
	for i, c := range cfg.BootCmd {
		run("bootcmd", i, c)
	}
	semaphore := path.Join("/var/lib/cloud/instances", md.instanceID(), "sem", "config_scripts_user")
	if !g.fs.exists(semaphore) {
		for _, f := range cfg.WriteFiles {
			if !f.Defer {
				if err := g.writeFile(f); err != nil {
					return refuse("cloud-init %v", err)
				}
			}
		}
		if cfg.Hostname != "" {
			g.hostname = cfg.Hostname
		}
		for _, u := range cfg.Users {
			if u.Name != "" && len(u.SSHAuthorizedKeys) > 0 {
				g.sshKeys[u.Name] = append(g.sshKeys[u.Name], u.SSHAuthorizedKeys...)
			}
		}
		for _, f := range cfg.WriteFiles {
			if f.Defer {
				if err := g.writeFile(f); err != nil {
					return refuse("cloud-init %v", err)
				}
			}
		}
		for i, c := range cfg.RunCmd {
			run("runcmd", i, c)
		}
		g.fs.write(semaphore, 0o644, "root:root", nil)
	}
	if failed == nil {
		return nil
	}
	if g.fs.exists(KubeletKubeconfigPath) {
		// The enabled kubelet starts with the credentials on the disk.
		g.warnings = append(g.warnings, failed.Error())
		return nil
	}
	return failed
}

// boot runs the configuration's stages in Kairos's boot order, with the
// Kairos kubeadm provider's join in boot.before, where the provider puts
// its stages, when a cluster block is present.
func (g *guest) boot(ctx context.Context, cfg *cloudConfig) error {
	if cfg.Hostname != "" {
		g.hostname = cfg.Hostname
	}
	for _, base := range bootStages {
		for _, name := range []string{base + ".before", base, base + ".after"} {
			if name == "boot.before" && cfg.Cluster != nil {
				if err := g.providerJoin(ctx, cfg.Cluster); err != nil {
					return err
				}
			}
			for i, st := range cfg.Stages[name] {
				if err := g.runStage(ctx, st); err != nil {
					label := st.Name
					if label == "" {
						label = fmt.Sprintf("#%d", i)
					}
					return fmt.Errorf("stage %s %q: %w", name, label, err)
				}
			}
		}
	}
	return nil
}

func (g *guest) runStage(ctx context.Context, st stage) error {
	ok, err := evalCondition(g.fs, st.If)
	if err != nil || !ok {
		return err
	}
	if st.Hostname != "" {
		g.hostname = st.Hostname
	}
	for name, u := range st.Users {
		if u.Name != "" {
			name = u.Name
		}
		g.sshKeys[name] = append(g.sshKeys[name], u.SSHAuthorizedKeys...)
	}
	for _, f := range st.Files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("file path %q is not absolute", f.Path)
		}
		content, err := renderFile(f)
		if err != nil {
			return err
		}
		owner := f.OwnerString
		if owner == "" {
			owner = fmt.Sprintf("%d:%d", f.Owner, f.Group)
		}
		mode := f.Permissions
		if mode == 0 {
			mode = 0o644
		}
		g.fs.write(f.Path, mode, owner, content)
	}
	for _, c := range st.Commands {
		if err := g.runCommand(ctx, c); err != nil {
			return err
		}
	}
	// yip applies a step's sysctls after its commands (its executor's
	// plugin order, v1.25.1), so a join needs them from an earlier step;
	// only the one kubeadm's preflight reads is kept.
	if v, ok := st.Sysctl[ipForwardSysctl]; ok {
		g.ipForward = strings.TrimSpace(v) == "1"
	}
	if st.Systemctl != nil {
		for _, unit := range st.Systemctl.Enable {
			if isKubelet(unit) {
				g.fs.write(kubeletUnitLink, 0o644, "0:0", nil)
			}
		}
		for _, unit := range st.Systemctl.Start {
			if isKubelet(unit) {
				g.startKubelet()
			}
		}
	}
	return nil
}

func isKubelet(unit string) bool { return unit == "kubelet" || unit == "kubelet.service" }

// startKubelet starts the kubelet when it has credentials; without them a
// real kubelet would wait for a bootstrap kubeconfig.
func (g *guest) startKubelet() {
	if g.fs.exists(KubeletKubeconfigPath) {
		g.kubeletStarted = true
	}
}

// runCommand runs a command line with the simulated sh: the commands a
// Kairos kubeadm rendering and Cluster API's kubeadm bootstrap provider
// use, joined with &&. A command or shell construct the simulator does not
// model is reported, not skipped.
func (g *guest) runCommand(ctx context.Context, command string) error {
	commands, err := parseShell(command)
	if err != nil {
		return err
	}
	for _, c := range commands {
		if err := g.runSimpleCommand(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// runSimpleCommand runs one command and its output redirection.
func (g *guest) runSimpleCommand(ctx context.Context, c simpleCommand) error {
	var output []byte
	args := c.args
	switch {
	case len(args) == 0:
	case args[0] == "kubeadm" && len(args) > 1 && args[1] == "join":
		if err := g.kubeadmJoin(ctx, args[2:]); err != nil {
			return err
		}
	case args[0] == "rm":
		for _, p := range args[1:] {
			if !strings.HasPrefix(p, "-") {
				delete(g.fs.files, path.Clean(p))
			}
		}
	case args[0] == "mkdir":
		for _, p := range args[1:] {
			if !strings.HasPrefix(p, "-") {
				g.fs.mkdirAll(p)
			}
		}
	case args[0] == "touch":
		for _, p := range args[1:] {
			if _, ok := g.fs.files[path.Clean(p)]; !ok {
				g.fs.write(p, 0o644, "0:0", nil)
			}
		}
	case args[0] == "echo":
		words, newline := args[1:], "\n"
		if len(words) > 0 && words[0] == "-n" {
			words, newline = words[1:], ""
		}
		output = []byte(strings.Join(words, " ") + newline)
	case args[0] == "systemctl" && len(args) == 3 && isKubelet(args[2]):
		switch args[1] {
		case "enable":
			g.fs.write(kubeletUnitLink, 0o644, "0:0", nil)
		case "start", "restart":
			g.startKubelet()
		}
	default:
		return fmt.Errorf("the node simulator does not model the command %q", strings.Join(args, " "))
	}
	if c.redirect == "" {
		return nil
	}
	if !path.IsAbs(c.redirect) || !g.fs.dirs[path.Dir(path.Clean(c.redirect))] {
		return fmt.Errorf("sh: cannot create %s: Directory nonexistent", c.redirect)
	}
	f, exists := g.fs.files[path.Clean(c.redirect)]
	if !exists {
		f = fileEntry{mode: 0o644, owner: "0:0"}
	}
	if c.appendOutput {
		output = append(append([]byte(nil), f.content...), output...)
	}
	g.fs.write(c.redirect, f.mode, f.owner, output)
	return nil
}

// simpleCommand is one command of a command line: its words after quote
// removal and where its output goes.
type simpleCommand struct {
	args         []string
	redirect     string
	appendOutput bool
}

// parseShell splits a command line as sh does, for the constructs the
// simulator models: words with '...' and "..." quoting and backslash
// escapes, commands joined with &&, output redirected with > or >>, and
// comments. Pipes, lists with ; or ||, background jobs, substitutions and
// variables are reported rather than guessed at.
func parseShell(line string) ([]simpleCommand, error) {
	unsupported := func(construct string) error {
		return fmt.Errorf("the node simulator does not model the shell construct %q in %q", construct, line)
	}
	var commands []simpleCommand
	var cur simpleCommand
	var word strings.Builder
	inWord, redirectNext := false, false
	endWord := func() {
		if !inWord {
			return
		}
		if redirectNext {
			cur.redirect, redirectNext = word.String(), false
		} else {
			cur.args = append(cur.args, word.String())
		}
		word.Reset()
		inWord = false
	}
	endCommand := func() error {
		if redirectNext {
			return fmt.Errorf("sh: syntax error: a redirection has no file in %q", line)
		}
		if len(cur.args) == 0 && cur.redirect == "" {
			return fmt.Errorf("sh: syntax error: an empty command in %q", line)
		}
		commands = append(commands, cur)
		cur = simpleCommand{}
		return nil
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			endWord()
		case ch == '#' && !inWord:
			i = len(line)
		case ch == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("sh: syntax error: unterminated quoted string in %q", line)
			}
			word.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case ch == '"':
			inWord = true
			closed := false
			for i++; i < len(line); i++ {
				c := line[i]
				if c == '"' {
					closed = true
					break
				}
				if c == '$' || c == '`' {
					return nil, unsupported(string(c))
				}
				if c == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
					c = line[i]
				}
				word.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("sh: syntax error: unterminated quoted string in %q", line)
			}
		case ch == '\\':
			if i+1 < len(line) {
				i++
				word.WriteByte(line[i])
				inWord = true
			}
		case ch == '&' && i+1 < len(line) && line[i+1] == '&':
			endWord()
			if err := endCommand(); err != nil {
				return nil, err
			}
			i++
		case ch == '>':
			if inWord && isFileDescriptor(word.String()) {
				return nil, unsupported(word.String() + ">")
			}
			endWord()
			if redirectNext || cur.redirect != "" {
				return nil, unsupported(">")
			}
			redirectNext = true
			if i+1 < len(line) && line[i+1] == '>' {
				cur.appendOutput = true
				i++
			}
		case strings.IndexByte("&|;<()$`", ch) >= 0:
			return nil, unsupported(string(ch))
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	endWord()
	if len(cur.args) == 0 && cur.redirect == "" && !redirectNext {
		if len(commands) > 0 {
			return nil, fmt.Errorf("sh: syntax error: the command line ends with && in %q", line)
		}
		return nil, nil
	}
	if err := endCommand(); err != nil {
		return nil, err
	}
	return commands, nil
}

func isFileDescriptor(word string) bool {
	return word != "" && strings.Trim(word, "0123456789") == ""
}

// kubeadmJoin runs `kubeadm join --config <file>`.
func (g *guest) kubeadmJoin(ctx context.Context, args []string) error {
	configPath := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--config" && i+1 < len(args):
			configPath = args[i+1]
			i++
		case strings.HasPrefix(a, "--config="):
			configPath = strings.TrimPrefix(a, "--config=")
		case strings.HasPrefix(a, "-v=") || strings.HasPrefix(a, "--v="):
		case (a == "-v" || a == "--v") && i+1 < len(args):
			// Cluster API's kubeadm bootstrap provider writes `--v N`.
			i++
		default:
			return refuse("kubeadm join: the simulator models `kubeadm join --config <file>` only, not the argument %q", a)
		}
	}
	if configPath == "" {
		return refuse("kubeadm join: no --config given")
	}
	data, ok := g.fs.read(configPath)
	if !ok {
		return refuse("kubeadm join: the configuration file %s does not exist", configPath)
	}
	if f := g.fs.files[path.Clean(configPath)]; f.mode&0o077 != 0 {
		g.warnings = append(g.warnings, fmt.Sprintf("%s holds the bootstrap token and is readable by others (mode %04o)", configPath, f.mode))
	}
	c := &kubeadmv1beta4.JoinConfiguration{}
	if err := sigsyaml.UnmarshalStrict(data, c); err != nil {
		return refuse("kubeadm join: %s is not a valid JoinConfiguration: %v", configPath, err)
	}
	if c.Discovery.BootstrapToken == nil {
		return refuse("kubeadm join: %s has no bootstrap token discovery", configPath)
	}
	// kubeadm's preflight (v1.36) errors on IPv4 forwarding off: measured
	// on the Kairos disk built here.
	if !g.ipForward {
		return refuse("kubeadm join: [preflight] Some fatal errors occurred: [ERROR FileContent--proc-sys-net-ipv4-ip_forward]: /proc/sys/net/ipv4/ip_forward contents are not set to 1")
	}
	return g.runJoin(ctx, c, c.Discovery.BootstrapToken.APIServerEndpoint, nil)
}

// providerJoin is what the Kairos kubeadm provider does with a `cluster:`
// block: a worker joins with the JoinConfiguration from `config`, dialling
// control_plane_host (it ignores apiServerEndpoint). The provider (read at
// kairos-io/provider-kubeadm da12c04) parses `config`'s
// clusterConfiguration.kubernetesVersion first and exits without one it
// can parse; from v1.31 it reads kubeadm's v1beta4 types, as this does.
// Where it differs: the provider runs kubeadm through its own scripts and
// reconfigures the kubelet afterwards; this joins as kubeadm does.
func (g *guest) providerJoin(ctx context.Context, c *clusterBlock) error {
	if g.fs.exists(KubeletKubeconfigPath) {
		return nil
	}
	if len(c.ClusterToken) < 16 {
		return refuse("provider: cluster.cluster_token must be at least 16 characters")
	}
	if c.Role != "worker" {
		return refuse("provider: cluster.role is %q; a worker disk joins only as \"worker\"", c.Role)
	}
	if c.ControlPlaneHost == "" {
		return refuse("provider: cluster.control_plane_host is empty")
	}
	endpoint := c.ControlPlaneHost
	if _, _, err := net.SplitHostPort(endpoint); err != nil {
		endpoint = net.JoinHostPort(endpoint, "6443")
	}
	var config struct {
		ClusterConfiguration struct {
			KubernetesVersion string `json:"kubernetesVersion"`
		} `json:"clusterConfiguration"`
		JoinConfiguration *kubeadmv1beta4.JoinConfiguration `json:"joinConfiguration"`
	}
	if err := sigsyaml.Unmarshal([]byte(c.Config), &config); err != nil {
		return refuse("provider: cluster.config is not valid YAML: %v", err)
	}
	if _, err := version.ParseSemantic(config.ClusterConfiguration.KubernetesVersion); err != nil {
		return refuse("provider: failed to check if kubeadm version is greater than 131: failed to parse kubernetes version %q: %v", config.ClusterConfiguration.KubernetesVersion, err)
	}
	if config.JoinConfiguration == nil {
		return refuse("provider: cluster.config has no joinConfiguration")
	}
	// The provider's pre-kubeadm script loads overlay and br_netfilter and
	// applies the disk's sysctl.d files, and a disk built with the
	// provider ships net.ipv4.ip_forward=1 in /etc/sysctl.d/k8s.conf (its
	// Dockerfile and Earthfile).
	g.ipForward = true
	// The provider writes the document kubeadm reads.
	config.JoinConfiguration.APIVersion = kubeadmv1beta4.GroupVersion.String()
	config.JoinConfiguration.Kind = "JoinConfiguration"
	return g.runJoin(ctx, config.JoinConfiguration, endpoint, []byte(c.CACerts))
}

func (g *guest) runJoin(ctx context.Context, c *kubeadmv1beta4.JoinConfiguration, endpoint string, caCerts []byte) error {
	if g.fs.exists(KubeletKubeconfigPath) {
		return refuse("kubeadm join: %s already exists; this node has joined before", KubeletKubeconfigPath)
	}
	res, err := g.sim.join(ctx, joinRequest{config: c, endpoint: endpoint, hostname: g.hostname, kubeletVersion: g.kubeletVersion, caCerts: caCerts})
	if err != nil {
		return err
	}
	// What kubeadm leaves behind: the kubelet's kubeconfig and the CA. The
	// kubeconfig names the node's identity, no secret.
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: res.server, CertificateAuthority: ClusterCAPath}
	kubeconfig.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: "/var/lib/kubelet/pki/kubelet-client-current.pem"}
	kubeconfig.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}
	kubeconfig.CurrentContext = "default-context"
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return err
	}
	g.fs.write(KubeletKubeconfigPath, 0o600, "0:0", data)
	g.fs.write(ClusterCAPath, 0o644, "0:0", res.caData)
	g.fs.write(KubeletConfigPath, 0o644, "0:0", []byte("kind: KubeletConfiguration\n"))
	g.fs.kubelet = res
	g.warnings = append(g.warnings, res.warnings...)
	// kubeadm's kubelet-start phase (re)starts the kubelet.
	g.kubeletStarted = true
	return nil
}
