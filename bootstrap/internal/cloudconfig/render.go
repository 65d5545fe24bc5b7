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

// Package cloudconfig renders the Kairos #cloud-config that joins one
// worker to its cluster with kubeadm. It is pure: the same Input always
// gives the same bytes, and nothing is read from or written to anywhere.
//
// Every document is built as data and serialized by a YAML encoder, never
// by string concatenation, so user strings (labels, paths, file contents)
// can never break or extend the document's structure.
package cloudconfig

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// Paths on the node that the rendered configuration writes or checks.
const (
	// Header is the first line of every rendered document.
	Header = "#cloud-config"
	// JoinConfigurationPath is where Stages mode writes the
	// JoinConfiguration (mode 0600, on tmpfs, removed after the join).
	JoinConfigurationPath = "/run/kubeadm/kubeadm-join-config.yaml"
	// SentinelPath is written after a successful join (Cluster API's
	// bootstrap success sentinel).
	SentinelPath = "/run/cluster-api/bootstrap-success.complete"
	// KubeletKubeconfigPath exists once the node has joined; its presence
	// keeps a rebooted node from joining a second time.
	KubeletKubeconfigPath = "/etc/kubernetes/kubelet.conf"
	// SSHUser is the sudo-capable user an SSH key is authorized for.
	SSHUser = "kairos"
	// SudoersPath grants SSHUser passwordless sudo.
	SudoersPath = "/etc/sudoers.d/kairos-cluster-api"
	// UninitializedTaintKey is Cluster API's taint for joining workers.
	UninitializedTaintKey = "node.cluster.x-k8s.io/uninitialized"
)

// What a Kubernetes node needs from the kernel and a Kairos core image does
// not set (Kairos's kubeadm provider sets them itself): the container
// runtime's overlay file system, bridged traffic through iptables, and IPv4
// forwarding, which kubeadm's preflight checks.
var (
	nodeKernelModules = []string{"overlay", "br_netfilter"}
	nodeSysctls       = map[string]string{
		"net.ipv4.ip_forward":                 "1",
		"net.bridge.bridge-nf-call-iptables":  "1",
		"net.bridge.bridge-nf-call-ip6tables": "1",
	}
)

// Stage names, stable so that tests and operators can find them.
const (
	StageSetHostname       = "Set the hostname to the machine name"
	StageAuthorizeSSHKey   = "Authorize the SSH key for the kairos user"
	StageWriteFiles        = "Write the extra files"
	StageLoadModules       = "Load the kernel modules the node needs"
	StageSetSysctls        = "Set the sysctls the node needs"
	StageWriteJoinConfig   = "Write the kubeadm join configuration"
	StageJoin              = "Join the cluster with kubeadm"
	StageReportSuccess     = "Report bootstrap success"
	ClusterRoleWorker      = "worker"
	minClusterTokenLength  = 16
	defaultFilePermissions = 0o644
)

// Input is everything one render needs. The controller fills it from the
// KairosConfig, the Machine and the Cluster.
type Input struct {
	// Mode selects the join rendering; empty means Stages.
	Mode bootstrapv1.JoinMode
	// Hostname is the VM name (Machine.spec.infrastructureRef.name).
	Hostname string
	// ProviderID is passed to the kubelet, e.g. kubevirt://<vm name>.
	ProviderID string
	// APIServerEndpoint is host:port of the workload API server.
	APIServerEndpoint string
	// CACertHashes pin the cluster CA ("sha256:<hex>"); at least one.
	CACertHashes []string
	// Token is the bootstrap token, "<id>.<secret>".
	Token string
	// ClusterToken is the correlation value ClusterProvider mode puts in
	// cluster.cluster_token (at least 16 characters, never key material).
	ClusterToken string
	// KubernetesVersion is the Machine's version; ClusterProvider mode puts
	// it in the provider's clusterConfiguration, where Kairos's kubeadm
	// provider reads it to choose kubeadm's configuration API.
	KubernetesVersion string
	// SSHAuthorizedKey is an optional public key for SSHUser.
	SSHAuthorizedKey string
	// NodeLabels are registered by the kubelet.
	NodeLabels map[string]string
	// NodeTaints are registered after the uninitialized taint.
	NodeTaints []corev1.Taint
	// KubeletExtraArgs are extra kubelet flags, in order.
	KubeletExtraArgs []Arg
	// Files are written before the join, in order.
	Files []File
	// Timeouts bound kubeadm join's phases; zero keeps kubeadm's default.
	Timeouts Timeouts
}

// Arg is one kubelet flag.
type Arg struct {
	Name  string
	Value string
}

// File is one file with its resolved content.
type File struct {
	Path string
	// Owner is "user" or "user:group"; empty means root.
	Owner string
	// Permissions is the file mode; zero means 0644.
	Permissions uint32
	Content     []byte
}

// Timeouts bound kubeadm join's phases.
type Timeouts struct {
	Discovery          time.Duration
	TLSBootstrap       time.Duration
	KubeletHealthCheck time.Duration
	KubernetesAPICall  time.Duration
}

// Render returns the #cloud-config document for in.
func Render(in Input) ([]byte, error) {
	if errs := validate(in); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	join := joinConfiguration(in)
	doc := document{Stages: map[string][]stage{}}
	doc.Stages["initramfs"] = initramfsStages(in)

	switch mode(in) {
	case bootstrapv1.JoinModeClusterProvider:
		config, err := kubeadmYAML(providerConfig{
			ClusterConfiguration: providerClusterConfiguration{KubernetesVersion: in.KubernetesVersion},
			JoinConfiguration:    join,
		})
		if err != nil {
			return nil, fmt.Errorf("serializing the provider join configuration: %w", err)
		}
		doc.Cluster = &clusterBlock{
			ClusterToken:     in.ClusterToken,
			ControlPlaneHost: in.APIServerEndpoint,
			Role:             ClusterRoleWorker,
			Config:           string(config),
		}
		// The provider joins in its own boot.before stage, which may wait
		// for the network; the order of stages from different sources is
		// not defined, so success is also reported by the periodic
		// reconcile stage.
		doc.Stages["network.after"] = []stage{reportSuccessStage()}
		doc.Stages["reconcile"] = []stage{reportSuccessStage()}
	default:
		join.TypeMeta = metav1.TypeMeta{APIVersion: kubeadmv1beta4.GroupVersion.String(), Kind: "JoinConfiguration"}
		config, err := kubeadmYAML(join)
		if err != nil {
			return nil, fmt.Errorf("serializing the JoinConfiguration: %w", err)
		}
		notJoined := fmt.Sprintf("[ ! -f %s ]", KubeletKubeconfigPath)
		doc.Stages["network"] = []stage{
			// On every boot, before the join: a joined node's kubelet and
			// pods need them as much as kubeadm does. Two steps because yip
			// applies a step's sysctls before its modules, and the bridge
			// sysctls exist only once br_netfilter is loaded.
			{Name: StageLoadModules, Modules: nodeKernelModules},
			{Name: StageSetSysctls, Sysctl: nodeSysctls},
			{
				Name:  StageWriteJoinConfig,
				If:    notJoined,
				Files: []file{newFile(JoinConfigurationPath, "", 0o600, config)},
			},
			{
				Name: StageJoin,
				If:   notJoined,
				Commands: []string{
					"kubeadm join --config " + JoinConfigurationPath,
					"rm -f " + JoinConfigurationPath,
				},
			},
			reportSuccessStage(),
		}
	}

	var b strings.Builder
	b.Grow(4096)
	b.WriteString(Header)
	b.WriteByte('\n')
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("serializing the cloud-config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("serializing the cloud-config: %w", err)
	}
	return []byte(b.String()), nil
}

// JoinConfiguration returns the kubeadm v1beta4 JoinConfiguration document
// that in renders, with apiVersion and kind, as `kubeadm config validate`
// and `kubeadm join --config` read it.
func JoinConfiguration(in Input) ([]byte, error) {
	if errs := validate(in); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	join := joinConfiguration(in)
	join.TypeMeta = metav1.TypeMeta{APIVersion: kubeadmv1beta4.GroupVersion.String(), Kind: "JoinConfiguration"}
	return kubeadmYAML(join)
}

// kubeadmYAML serializes a kubeadm API object as indented JSON, which is
// YAML too: kubeadm and the Kairos provider read it as such. Going through
// encoding/json keeps the kubeadm types' field names and omissions and
// costs a fraction of a YAML encoder's time.
func kubeadmYAML(v any) ([]byte, error) {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(raw, '\n'), nil
}

func mode(in Input) bootstrapv1.JoinMode {
	if in.Mode == "" {
		return bootstrapv1.JoinModeStages
	}
	return in.Mode
}

// validate checks what the renderer itself relies on. Field-level rules
// for user input live in the admission webhook.
func validate(in Input) field.ErrorList {
	var errs field.ErrorList
	root := field.NewPath("input")
	switch mode(in) {
	case bootstrapv1.JoinModeStages:
	case bootstrapv1.JoinModeClusterProvider:
		if len(in.ClusterToken) < minClusterTokenLength {
			errs = append(errs, field.Invalid(root.Child("clusterToken"), len(in.ClusterToken), "must be at least 16 characters"))
		}
		// Parsed as the provider parses it (a semantic version, "v"
		// optional): with anything else it stops before joining.
		if _, err := version.ParseSemantic(in.KubernetesVersion); err != nil {
			errs = append(errs, field.Invalid(root.Child("kubernetesVersion"), in.KubernetesVersion, "must be a semantic version such as v1.35.6: Kairos's kubeadm provider reads it to choose kubeadm's configuration API"))
		}
	default:
		errs = append(errs, field.NotSupported(root.Child("mode"), in.Mode, []bootstrapv1.JoinMode{bootstrapv1.JoinModeStages, bootstrapv1.JoinModeClusterProvider}))
	}
	if in.Hostname == "" {
		errs = append(errs, field.Required(root.Child("hostname"), "the VM name is needed for the hostname"))
	}
	if in.ProviderID == "" {
		errs = append(errs, field.Required(root.Child("providerID"), ""))
	}
	if _, port, err := net.SplitHostPort(in.APIServerEndpoint); err != nil || port == "" {
		errs = append(errs, field.Invalid(root.Child("apiServerEndpoint"), in.APIServerEndpoint, "must be host:port"))
	}
	if len(in.CACertHashes) == 0 {
		errs = append(errs, field.Required(root.Child("caCertHashes"), "the cluster CA must be pinned"))
	}
	errs = append(errs, validateText(in, root)...)
	if _, err := kubeadmv1beta4.NewBootstrapTokenString(in.Token); err != nil {
		errs = append(errs, field.Invalid(root.Child("token"), "<redacted>", "must be a bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}"))
	}
	return errs
}

// validateText refuses strings that are not UTF-8 or hold control
// characters: an encoder would replace them, or YAML readers refuse them,
// so the node would not get what the API holds. File content is exempt:
// it is carried base64-encoded when it is not plain text.
func validateText(in Input, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, s string) {
		if !IsText(s) {
			errs = append(errs, field.Invalid(p, s, "must be UTF-8 text without control characters"))
		}
	}
	check(root.Child("hostname"), in.Hostname)
	check(root.Child("providerID"), in.ProviderID)
	check(root.Child("sshAuthorizedKey"), in.SSHAuthorizedKey)
	check(root.Child("clusterToken"), in.ClusterToken)
	for k, v := range in.NodeLabels {
		check(root.Child("nodeLabels").Key(k), k)
		check(root.Child("nodeLabels").Key(k), v)
	}
	for i, t := range in.NodeTaints {
		check(root.Child("nodeTaints").Index(i).Child("key"), t.Key)
		check(root.Child("nodeTaints").Index(i).Child("value"), t.Value)
		check(root.Child("nodeTaints").Index(i).Child("effect"), string(t.Effect))
	}
	for i, a := range in.KubeletExtraArgs {
		check(root.Child("kubeletExtraArgs").Index(i).Child("name"), a.Name)
		check(root.Child("kubeletExtraArgs").Index(i).Child("value"), a.Value)
	}
	for i, f := range in.Files {
		check(root.Child("files").Index(i).Child("path"), f.Path)
		check(root.Child("files").Index(i).Child("owner"), f.Owner)
	}
	return errs
}

// IsText reports whether s is UTF-8 without control characters or
// Unicode non-characters U+FFFE and U+FFFF, which YAML does not allow.
func IsText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == 0xfffe || r == 0xffff {
			return false
		}
	}
	return true
}

func joinConfiguration(in Input) *kubeadmv1beta4.JoinConfiguration {
	args := []kubeadmv1beta4.Arg{{Name: "provider-id", Value: in.ProviderID}}
	if len(in.NodeLabels) > 0 {
		keys := make([]string, 0, len(in.NodeLabels))
		for k := range in.NodeLabels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pairs := make([]string, 0, len(keys))
		for _, k := range keys {
			pairs = append(pairs, k+"="+in.NodeLabels[k])
		}
		args = append(args, kubeadmv1beta4.Arg{Name: "node-labels", Value: strings.Join(pairs, ",")})
	}
	for _, a := range in.KubeletExtraArgs {
		args = append(args, kubeadmv1beta4.Arg{Name: a.Name, Value: a.Value})
	}
	taints := make([]corev1.Taint, 0, 1+len(in.NodeTaints))
	taints = append(taints, corev1.Taint{Key: UninitializedTaintKey, Effect: corev1.TaintEffectNoSchedule})
	for _, t := range in.NodeTaints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	join := &kubeadmv1beta4.JoinConfiguration{
		NodeRegistration: kubeadmv1beta4.NodeRegistrationOptions{
			Name:             in.Hostname,
			Taints:           taints,
			KubeletExtraArgs: args,
		},
		Discovery: kubeadmv1beta4.Discovery{
			BootstrapToken: &kubeadmv1beta4.BootstrapTokenDiscovery{
				Token:             in.Token,
				APIServerEndpoint: in.APIServerEndpoint,
				CACertHashes:      append([]string(nil), in.CACertHashes...),
			},
		},
	}
	if t := in.Timeouts; t != (Timeouts{}) {
		join.Timeouts = &kubeadmv1beta4.Timeouts{
			Discovery:          duration(t.Discovery),
			TLSBootstrap:       duration(t.TLSBootstrap),
			KubeletHealthCheck: duration(t.KubeletHealthCheck),
			KubernetesAPICall:  duration(t.KubernetesAPICall),
		}
	}
	return join
}

func duration(d time.Duration) *metav1.Duration {
	if d <= 0 {
		return nil
	}
	return &metav1.Duration{Duration: d}
}

func initramfsStages(in Input) []stage {
	stages := []stage{{Name: StageSetHostname, Hostname: in.Hostname}}
	if in.SSHAuthorizedKey != "" {
		stages = append(stages, stage{
			Name: StageAuthorizeSSHKey,
			Users: map[string]user{SSHUser: {
				Name:              SSHUser,
				Groups:            []string{"admin"},
				SSHAuthorizedKeys: []string{in.SSHAuthorizedKey},
			}},
			Files: []file{newFile(SudoersPath, "", 0o440, []byte(SSHUser+" ALL=(ALL) NOPASSWD: ALL\n"))},
		})
	}
	if len(in.Files) > 0 {
		files := make([]file, 0, len(in.Files))
		for _, f := range in.Files {
			perm := f.Permissions
			if perm == 0 {
				perm = defaultFilePermissions
			}
			files = append(files, newFile(f.Path, f.Owner, perm, f.Content))
		}
		stages = append(stages, stage{Name: StageWriteFiles, Files: files})
	}
	return stages
}

func reportSuccessStage() stage {
	return stage{
		Name:      StageReportSuccess,
		If:        fmt.Sprintf("[ -f %s ]", KubeletKubeconfigPath),
		Systemctl: &systemctl{Enable: []string{"kubelet"}, Start: []string{"kubelet"}},
		Commands:  []string{fmt.Sprintf("mkdir -p %s && touch %s", dir(SentinelPath), SentinelPath)},
	}
}

func dir(path string) string { return path[:strings.LastIndexByte(path, '/')] }

// newFile builds a yip file entry. yip expands Go templates in file
// content, so template delimiters are escaped to come out unchanged;
// content that is not printable UTF-8 is carried base64-encoded.
func newFile(path, owner string, perm uint32, content []byte) file {
	f := file{Path: path, Permissions: fileMode(perm)}
	if owner != "" {
		f.OwnerString = owner
	}
	escaped := EscapeTemplate(string(content))
	if plainText(escaped) {
		f.Content = escaped
	} else {
		f.Content = base64.StdEncoding.EncodeToString([]byte(escaped))
		f.Encoding = "b64"
	}
	return f
}

// EscapeTemplate makes s come out of yip's Go-template expansion
// unchanged: each "{{" becomes an action that prints "{{".
func EscapeTemplate(s string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return strings.ReplaceAll(s, "{{", `{{ "{{" }}`)
}

// plainText reports whether s can be carried as a plain YAML string that
// reads back unchanged. Anything else (binary data, control characters,
// and the shapes the YAML encoder's literal blocks do not round-trip:
// tabs and a leading line break) is carried base64-encoded instead.
func plainText(s string) bool {
	if strings.HasPrefix(s, "\n") || strings.ContainsRune(s, '\t') || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != '\n' && (!unicode.IsPrint(r) && r != ' ') {
			return false
		}
	}
	return true
}

// document is the rendered #cloud-config: Kairos reads `cluster`, yip runs
// `stages`.
type document struct {
	Cluster *clusterBlock      `yaml:"cluster,omitempty"`
	Stages  map[string][]stage `yaml:"stages"`
}

type clusterBlock struct {
	ClusterToken     string `yaml:"cluster_token"`
	ControlPlaneHost string `yaml:"control_plane_host"`
	Role             string `yaml:"role"`
	Config           string `yaml:"config"`
}

type providerConfig struct {
	ClusterConfiguration providerClusterConfiguration      `json:"clusterConfiguration"`
	JoinConfiguration    *kubeadmv1beta4.JoinConfiguration `json:"joinConfiguration"`
}

// providerClusterConfiguration is the one field of kubeadm's
// ClusterConfiguration a worker's join gives Kairos's kubeadm provider:
// the provider parses kubernetesVersion to choose between kubeadm's
// v1beta3 and v1beta4 types and stops without a version it can parse.
type providerClusterConfiguration struct {
	KubernetesVersion string `json:"kubernetesVersion"`
}

// stage mirrors the subset of yip's stage schema that is rendered.
type stage struct {
	Name      string            `yaml:"name"`
	If        string            `yaml:"if,omitempty"`
	Hostname  string            `yaml:"hostname,omitempty"`
	Users     map[string]user   `yaml:"users,omitempty"`
	Files     []file            `yaml:"files,omitempty"`
	Modules   []string          `yaml:"modules,omitempty"`
	Sysctl    map[string]string `yaml:"sysctl,omitempty"`
	Systemctl *systemctl        `yaml:"systemctl,omitempty"`
	Commands  []string          `yaml:"commands,omitempty"`
}

type user struct {
	Name              string   `yaml:"name"`
	Groups            []string `yaml:"groups,omitempty"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys,omitempty"`
}

type file struct {
	Path        string   `yaml:"path"`
	Permissions fileMode `yaml:"permissions"`
	Owner       int      `yaml:"owner"`
	Group       int      `yaml:"group"`
	OwnerString string   `yaml:"ownerstring,omitempty"`
	Encoding    string   `yaml:"encoding,omitempty"`
	Content     string   `yaml:"content"`
}

type systemctl struct {
	Enable []string `yaml:"enable,omitempty"`
	Start  []string `yaml:"start,omitempty"`
}

// fileMode is written in decimal, which every YAML reader parses the same
// way (a leading-zero octal literal is octal in YAML 1.1 and decimal in
// 1.2), with the octal form as a comment for people.
type fileMode uint32

func (m fileMode) MarshalYAML() (any, error) {
	return &yaml.Node{
		Kind:        yaml.ScalarNode,
		Tag:         "!!int",
		Value:       strconv.FormatUint(uint64(m), 10),
		LineComment: fmt.Sprintf("0%o", uint32(m)),
	}, nil
}
