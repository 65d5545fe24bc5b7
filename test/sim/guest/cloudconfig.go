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
	"bytes"
	"encoding/base64"
	"fmt"
	"path"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// cloudConfigHeader is what Kairos requires on the first line of user data
// before it reads it as configuration.
const cloudConfigHeader = "#cloud-config"

// Paths a Kairos kubeadm node reads or writes.
const (
	KubeletKubeconfigPath = "/etc/kubernetes/kubelet.conf"
	ClusterCAPath         = "/etc/kubernetes/pki/ca.crt"
	KubeletConfigPath     = "/var/lib/kubelet/config.yaml"
	SentinelPath          = "/run/cluster-api/bootstrap-success.complete"
)

// bootStages are the Kairos boot stages in the order the agent runs them
// on every boot; each runs its .before and .after variants around it.
// reconcile runs periodically afterwards; one pass is simulated.
var bootStages = []string{"rootfs", "initramfs", "boot", "fs", "network", "reconcile"}

// cloudConfig is the subset of a Kairos #cloud-config the simulator
// interprets: the provider `cluster:` block and yip stages. Keys it does
// not know are ignored, as Kairos ignores them.
type cloudConfig struct {
	Cluster  *clusterBlock      `yaml:"cluster"`
	Stages   map[string][]stage `yaml:"stages"`
	Hostname string             `yaml:"hostname"`
}

// clusterBlock is what a Kairos kubeadm provider (kairos-io/provider-kubeadm)
// reads.
type clusterBlock struct {
	ClusterToken     string `yaml:"cluster_token"`
	ControlPlaneHost string `yaml:"control_plane_host"`
	Role             string `yaml:"role"`
	Config           string `yaml:"config"`
	CACerts          string `yaml:"ca_certs"`
}

type stage struct {
	Name      string            `yaml:"name"`
	If        string            `yaml:"if"`
	Hostname  string            `yaml:"hostname"`
	Users     map[string]user   `yaml:"users"`
	Files     []file            `yaml:"files"`
	Commands  []string          `yaml:"commands"`
	Systemctl *systemctl        `yaml:"systemctl"`
	Sysctl    map[string]string `yaml:"sysctl"`
	Modules   []string          `yaml:"modules"`
}

// ipForwardSysctl is the kernel setting kubeadm join's preflight checks.
const ipForwardSysctl = "net.ipv4.ip_forward"

type user struct {
	Name              string   `yaml:"name"`
	Groups            []string `yaml:"groups"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys"`
}

type file struct {
	Path        string `yaml:"path"`
	Permissions uint32 `yaml:"permissions"`
	Owner       int    `yaml:"owner"`
	Group       int    `yaml:"group"`
	OwnerString string `yaml:"ownerstring"`
	Encoding    string `yaml:"encoding"`
	Content     string `yaml:"content"`
}

type systemctl struct {
	Enable  []string `yaml:"enable"`
	Disable []string `yaml:"disable"`
	Start   []string `yaml:"start"`
	Mask    []string `yaml:"mask"`
}

// parseCloudConfig reads user data the way Kairos does: only a document
// whose first line is #cloud-config is configuration.
func parseCloudConfig(data []byte) (*cloudConfig, error) {
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if strings.TrimSpace(string(first)) != cloudConfigHeader {
		return nil, errNotCloudConfig
	}
	cfg := &cloudConfig{}
	if err := yaml.Unmarshal(data, cfg); err != nil {
		return nil, fmt.Errorf("the #cloud-config is not valid YAML: %w", err)
	}
	return cfg, nil
}

// filesystem is the guest's disk as far as the boot touches it. A container
// disk starts empty on every boot; a persistent disk keeps it.
type filesystem struct {
	files map[string]fileEntry
	dirs  map[string]bool
	// kubelet is what kubeadm configured the kubelet with
	// (/var/lib/kubelet/kubeadm-flags.env and config.yaml on a real disk).
	kubelet *joinResult
}

type fileEntry struct {
	mode    uint32
	owner   string
	content []byte
}

// baseDirectories exist on every booted Linux root, so a shell can
// redirect into them before anything created them.
var baseDirectories = []string{"/etc", "/home", "/opt", "/root", "/run", "/tmp", "/usr", "/var/lib", "/var/log"}

func newFilesystem() *filesystem {
	fs := &filesystem{files: map[string]fileEntry{}, dirs: map[string]bool{"/": true}}
	for _, d := range baseDirectories {
		fs.mkdirAll(d)
	}
	return fs
}

func (fs *filesystem) clone() *filesystem {
	out := newFilesystem()
	for k, v := range fs.files {
		out.files[k] = v
	}
	for k := range fs.dirs {
		out.dirs[k] = true
	}
	out.kubelet = fs.kubelet
	return out
}

func (fs *filesystem) write(p string, mode uint32, owner string, content []byte) {
	fs.files[path.Clean(p)] = fileEntry{mode: mode, owner: owner, content: append([]byte(nil), content...)}
	fs.mkdirAll(path.Dir(p))
}

func (fs *filesystem) mkdirAll(p string) {
	for p = path.Clean(p); p != "/" && p != "."; p = path.Dir(p) {
		fs.dirs[p] = true
	}
}

func (fs *filesystem) exists(p string) bool {
	_, ok := fs.files[path.Clean(p)]
	return ok
}

func (fs *filesystem) read(p string) ([]byte, bool) {
	f, ok := fs.files[path.Clean(p)]
	return f.content, ok
}

// renderFile turns a yip file entry into bytes: yip expands Go templates
// in content, then decodes base64 when asked.
func renderFile(f file) ([]byte, error) {
	content := f.Content
	if strings.Contains(content, "{{") {
		t, err := template.New(f.Path).Option("missingkey=error").Parse(content)
		if err != nil {
			return nil, fmt.Errorf("file %s: its content is not a valid template for yip: %w", f.Path, err)
		}
		var b strings.Builder
		if err := t.Execute(&b, map[string]any{}); err != nil {
			return nil, fmt.Errorf("file %s: yip cannot expand its content: %w", f.Path, err)
		}
		content = b.String()
	}
	switch f.Encoding {
	case "":
		return []byte(content), nil
	case "b64", "base64":
		out, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, fmt.Errorf("file %s: content is not valid base64: %w", f.Path, err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("file %s: yip does not know the encoding %q", f.Path, f.Encoding)
	}
}

// evalCondition evaluates a stage's `if`, which yip runs with sh. Only file
// tests are understood; anything else is reported rather than guessed.
func evalCondition(fs *filesystem, cond string) (bool, error) {
	cond = strings.TrimSpace(cond)
	if cond == "" {
		return true, nil
	}
	fields := strings.Fields(cond)
	if len(fields) < 4 || fields[0] != "[" || fields[len(fields)-1] != "]" {
		return false, fmt.Errorf("the simulator cannot evaluate the condition %q", cond)
	}
	inner := fields[1 : len(fields)-1]
	negate := false
	if inner[0] == "!" {
		negate, inner = true, inner[1:]
	}
	if len(inner) != 2 {
		return false, fmt.Errorf("the simulator cannot evaluate the condition %q", cond)
	}
	var result bool
	switch inner[0] {
	case "-f", "-e", "-s":
		result = fs.exists(inner[1])
	case "-d":
		result = fs.dirs[path.Clean(inner[1])]
	default:
		return false, fmt.Errorf("the simulator cannot evaluate the condition %q", cond)
	}
	return result != negate, nil
}
