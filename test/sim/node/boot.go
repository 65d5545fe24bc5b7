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

package node

import (
	"context"
	"fmt"
	"net"
	"path"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	sigsyaml "sigs.k8s.io/yaml"
)

// kubeletUnitLink marks the kubelet unit enabled, so it starts on every
// boot of a persistent disk.
const kubeletUnitLink = "/etc/systemd/system/multi-user.target.wants/kubelet.service"

// guest is one boot of a simulated Kairos node: its disk, its hostname and
// what the boot did.
type guest struct {
	sim            *Simulator
	fs             *filesystem
	hostname       string
	kubeletVersion string
	kubeletStarted bool
	warnings       []string
	sshKeys        map[string][]string
}

// boot runs the configuration's stages in Kairos's boot order, with the
// Kairos kubeadm provider's join in network.after when a cluster block is
// present.
func (g *guest) boot(ctx context.Context, cfg *cloudConfig) error {
	if cfg.Hostname != "" {
		g.hostname = cfg.Hostname
	}
	for _, base := range bootStages {
		for _, name := range []string{base + ".before", base, base + ".after"} {
			if name == "network.after" && cfg.Cluster != nil {
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

// runCommand runs the shell commands a Kairos kubeadm rendering uses. A
// command the simulator does not model is reported, not skipped.
func (g *guest) runCommand(ctx context.Context, command string) error {
	for _, part := range strings.Split(command, "&&") {
		args := strings.Fields(part)
		if len(args) == 0 {
			continue
		}
		switch {
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
		case args[0] == "systemctl" && len(args) == 3 && isKubelet(args[2]):
			switch args[1] {
			case "enable":
				g.fs.write(kubeletUnitLink, 0o644, "0:0", nil)
			case "start", "restart":
				g.startKubelet()
			}
		default:
			return fmt.Errorf("the node simulator does not model the command %q", strings.TrimSpace(part))
		}
	}
	return nil
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
	return g.runJoin(ctx, c, c.Discovery.BootstrapToken.APIServerEndpoint, nil)
}

// providerJoin is what the Kairos kubeadm provider does with a `cluster:`
// block: a worker joins with the JoinConfiguration from `config`, dialling
// control_plane_host (it ignores apiServerEndpoint).
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
		JoinConfiguration *kubeadmv1beta4.JoinConfiguration `json:"joinConfiguration"`
	}
	if err := sigsyaml.Unmarshal([]byte(c.Config), &config); err != nil {
		return refuse("provider: cluster.config is not valid YAML: %v", err)
	}
	if config.JoinConfiguration == nil {
		return refuse("provider: cluster.config has no joinConfiguration")
	}
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
