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
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// errNotCloudInitConfig is user data a cloud-init image does not apply.
var errNotCloudInitConfig = errors.New("the user data is neither a #cloud-config nor a jinja template of one, so cloud-init applies no configuration from it")

// datasource is how KubeVirt presents cloud-init data to the guest.
type datasource string

const (
	datasourceNoCloud     datasource = "NoCloud"
	datasourceConfigDrive datasource = "ConfigDrive"
)

// instanceMetadata is the metadata KubeVirt writes next to the user data:
// NoCloud's meta-data has instance-id and local-hostname; ConfigDrive's
// meta_data.json has instance_id (<name>.<namespace>), uuid and hostname,
// and cloud-init's OpenStack reader copies hostname to local-hostname and
// uuid to the instance ID.
type instanceMetadata struct {
	datasource datasource
	hostname   string
	// uuid is the firmware UUID, NoCloud's instance-id and ConfigDrive's
	// uuid.
	uuid string
	// configDriveInstanceID is ConfigDrive's instance_id.
	configDriveInstanceID string
}

// metadataFor is the metadata KubeVirt gives the instance. KubeVirt uses
// the firmware UUID, or a random one when the instance has none; the
// simulator then uses the instance's UID, which is as unique.
func metadataFor(vmi *kubevirtv1.VirtualMachineInstance, ds datasource) instanceMetadata {
	uuid := string(vmi.UID)
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.UUID != "" {
		uuid = string(fw.UUID)
	}
	return instanceMetadata{
		datasource:            ds,
		hostname:              kubevirtHostname(vmi),
		uuid:                  uuid,
		configDriveInstanceID: vmi.Name + "." + vmi.Namespace,
	}
}

// kubevirtHostname is the hostname KubeVirt gives a guest: spec.hostname,
// else the instance name up to its first dot, cut to a DNS label.
func kubevirtHostname(vmi *kubevirtv1.VirtualMachineInstance) string {
	if vmi.Spec.Hostname != "" {
		return vmi.Spec.Hostname
	}
	name, _, _ := strings.Cut(vmi.Name, ".")
	if len(name) > validation.DNS1123LabelMaxLength {
		name = name[:validation.DNS1123LabelMaxLength]
	}
	return name
}

// instanceID is cloud-init's instance ID (v1.instance_id), which decides
// whether per-instance modules such as runcmd run again.
func (m instanceMetadata) instanceID() string { return m.uuid }

// jinjaVariables are the instance-data variables a jinja template can use,
// as cloud-init names them (hyphens in metadata keys become underscores).
func (m instanceMetadata) jinjaVariables() map[string]string {
	vars := map[string]string{
		"v1.instance_id":    m.instanceID(),
		"v1.local_hostname": m.hostname,
	}
	switch m.datasource {
	case datasourceNoCloud:
		vars["ds.meta_data.instance_id"] = m.uuid
		vars["ds.meta_data.local_hostname"] = m.hostname
	case datasourceConfigDrive:
		vars["ds.meta_data.instance_id"] = m.configDriveInstanceID
		vars["ds.meta_data.uuid"] = m.uuid
		vars["ds.meta_data.hostname"] = m.hostname
		vars["ds.meta_data.local_hostname"] = m.hostname
	}
	return vars
}

// jinjaHeader is the first line that makes cloud-init render the rest of
// the user data as a jinja template; Cluster API's kubeadm bootstrap
// provider starts every user data with it.
var jinjaHeader = regexp.MustCompile(`(?i)^##\s*template:\s*jinja\s*$`)

// jinjaExpression is the one form of jinja the simulator renders: a
// variable, optionally with whitespace control.
var jinjaExpression = regexp.MustCompile(`^-?\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*-?$`)

// renderJinja renders a template's variables from the instance data. A
// variable the instance data does not have is an error, where cloud-init
// would render a CI_MISSING_JINJA_VAR marker into the configuration, and
// statements and filters are reported rather than guessed at.
func renderJinja(template string, vars map[string]string) (string, error) {
	var b strings.Builder
	rest := template
	for {
		i := strings.Index(rest, "{")
		if i < 0 || i == len(rest)-1 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
		switch rest[1] {
		case '{':
			expr, after, ok := strings.Cut(rest[2:], "}}")
			if !ok {
				return "", fmt.Errorf("jinja: %q is not closed with }}", truncate(rest, 40))
			}
			m := jinjaExpression.FindStringSubmatch(expr)
			if m == nil {
				return "", fmt.Errorf("jinja: the simulator renders only instance-data variables, not the expression {{%s}}", expr)
			}
			value, known := vars[m[1]]
			if !known {
				return "", fmt.Errorf("jinja: the variable %s is not in the instance data KubeVirt's %s metadata gives (it has %s)", m[1], datasourceName(vars), strings.Join(sortedKeys(vars), ", "))
			}
			b.WriteString(value)
			rest = after
		case '#':
			_, after, ok := strings.Cut(rest[2:], "#}")
			if !ok {
				return "", fmt.Errorf("jinja: the comment %q is not closed with #}", truncate(rest, 40))
			}
			rest = after
		case '%':
			return "", fmt.Errorf("jinja: the simulator does not model jinja statements such as %q", truncate(rest, 40))
		default:
			b.WriteByte('{')
			rest = rest[1:]
		}
	}
}

func datasourceName(vars map[string]string) string {
	if _, ok := vars["ds.meta_data.hostname"]; ok {
		return string(datasourceConfigDrive)
	}
	return string(datasourceNoCloud)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// cloudInitConfig is the subset of a #cloud-config a cloud-init image
// applies in the simulator: the modules a kubeadm join uses. Other keys
// (ntp, disk_setup, mounts, Kairos's stages and cluster) are ignored, as
// they do not change what the join does.
type cloudInitConfig struct {
	Hostname   string             `yaml:"hostname"`
	BootCmd    []cloudInitCommand `yaml:"bootcmd"`
	WriteFiles []cloudInitFile    `yaml:"write_files"`
	Users      []cloudInitUser    `yaml:"users"`
	RunCmd     []cloudInitCommand `yaml:"runcmd"`
}

// cloudInitCommand is a bootcmd or runcmd entry: a string runs with sh, a
// list is one command's arguments, unquoted.
type cloudInitCommand struct {
	shell string
	argv  []string
}

func (c *cloudInitCommand) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Decode(&c.shell)
	case yaml.SequenceNode:
		if err := n.Decode(&c.argv); err != nil {
			return fmt.Errorf("line %d: a command given as a list must list strings: %w", n.Line, err)
		}
		return nil
	default:
		return fmt.Errorf("line %d: a command must be a string or a list of strings", n.Line)
	}
}

// cloudInitFile is a write_files entry.
type cloudInitFile struct {
	Path        string          `yaml:"path"`
	Content     string          `yaml:"content"`
	Encoding    string          `yaml:"encoding"`
	Owner       string          `yaml:"owner"`
	Permissions filePermissions `yaml:"permissions"`
	Append      bool            `yaml:"append"`
	Defer       bool            `yaml:"defer"`
}

// filePermissions is write_files' permissions: a string is octal ('0640',
// as Cluster API writes it), a number is taken as YAML 1.1 reads it (0640
// unquoted is octal there too).
type filePermissions struct {
	set   bool
	text  string
	isStr bool
}

func (p *filePermissions) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: permissions must be a string or a number", n.Line)
	}
	p.set, p.text, p.isStr = true, n.Value, n.Tag == "!!str"
	return nil
}

// mode decodes the permissions as cloud-init does; undecodable
// permissions fall back to 0644 with a warning, as cloud-init logs one.
func (p filePermissions) mode() (uint32, bool) {
	const defaultMode = 0o644
	if !p.set {
		return defaultMode, true
	}
	text := strings.TrimSpace(p.text)
	var v uint64
	var err error
	if p.isStr {
		// Python's int(text, 8) accepts an optional 0o prefix.
		v, err = strconv.ParseUint(strings.TrimPrefix(strings.ToLower(text), "0o"), 8, 32)
	} else {
		// A leading 0 is octal and 0x hexadecimal, as in YAML 1.1.
		v, err = strconv.ParseUint(text, 0, 32)
	}
	if err != nil || v > 0o7777 {
		return defaultMode, false
	}
	return uint32(v), true
}

// cloudInitUser is a users entry; only what the simulator reports is read.
type cloudInitUser struct {
	Name              string   `yaml:"name"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys"`
}

func (u *cloudInitUser) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		// "default" is the image's default user, which has no keys here.
		return nil
	case yaml.MappingNode:
		type plain cloudInitUser
		return n.Decode((*plain)(u))
	default:
		return fmt.Errorf("line %d: a user must be a name or a mapping", n.Line)
	}
}

// parseCloudInit reads user data as cloud-init does: a jinja header makes
// the rest a template rendered from the instance data, and what is (then)
// a #cloud-config is configuration. User data of a type cloud-init runs
// but the simulator does not model (scripts, includes, MIME archives) is
// refused; anything else is not configuration to cloud-init.
func parseCloudInit(data []byte, md instanceMetadata) (*cloudInitConfig, error) {
	text := string(data)
	first, rest, _ := strings.Cut(text, "\n")
	if jinjaHeader.MatchString(strings.TrimSpace(first)) {
		rendered, err := renderJinja(rest, md.jinjaVariables())
		if err != nil {
			return nil, fmt.Errorf("cloud-init: %w", err)
		}
		text = rendered
	}
	head := strings.ToLower(strings.TrimLeft(text, " \t\r\n"))
	switch {
	case strings.HasPrefix(head, "#cloud-config-archive"), strings.HasPrefix(head, "#!"),
		strings.HasPrefix(head, "#include"), strings.HasPrefix(head, "#cloud-boothook"),
		strings.HasPrefix(head, "#part-handler"), strings.HasPrefix(head, "content-type:"),
		strings.HasPrefix(head, "mime-version:"), strings.HasPrefix(head, "\x1f\x8b"):
		firstLine, _, _ := strings.Cut(strings.TrimLeft(text, " \t\r\n"), "\n")
		return nil, fmt.Errorf("cloud-init: the simulator models #cloud-config user data only, not %q", truncate(firstLine, 40))
	case !strings.HasPrefix(head, "#cloud-config"):
		return nil, errNotCloudInitConfig
	}
	cfg := &cloudInitConfig{}
	if err := yaml.Unmarshal([]byte(text), cfg); err != nil {
		return nil, fmt.Errorf("cloud-init: the #cloud-config is not valid YAML: %w", err)
	}
	return cfg, nil
}

// content decodes a write_files entry as cloud-init does: base64 first,
// then gzip, for the encodings cloud-init knows; an unknown encoding is
// written as text with a warning, as cloud-init logs one.
func (f cloudInitFile) content() ([]byte, string, error) {
	var decodeBase64, gunzip bool
	warning := ""
	switch strings.ToLower(strings.TrimSpace(f.Encoding)) {
	case "gz", "gzip":
		gunzip = true
	case "gz+base64", "gzip+base64", "gz+b64", "gzip+b64":
		decodeBase64, gunzip = true, true
	case "b64", "base64":
		decodeBase64 = true
	case "", "text/plain":
	default:
		warning = fmt.Sprintf("write_files: %s: unknown encoding %q, written as text/plain", f.Path, f.Encoding)
	}
	out := []byte(f.Content)
	if decodeBase64 {
		// Python's b64decode discards characters outside the alphabet,
		// such as the line breaks of a YAML block.
		clean := strings.Map(func(r rune) rune {
			if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
				return -1
			}
			return r
		}, f.Content)
		decoded, err := base64.StdEncoding.DecodeString(clean)
		if err != nil {
			return nil, "", fmt.Errorf("write_files: %s: content is not valid base64 for encoding %q: %w", f.Path, f.Encoding, err)
		}
		out = decoded
	}
	if gunzip {
		r, err := gzip.NewReader(bytes.NewReader(out))
		if err != nil {
			return nil, "", fmt.Errorf("write_files: %s: content is not gzip data for encoding %q: %w", f.Path, f.Encoding, err)
		}
		decoded, err := io.ReadAll(io.LimitReader(r, 64<<20))
		if err != nil {
			return nil, "", fmt.Errorf("write_files: %s: content is not valid gzip data: %w", f.Path, err)
		}
		out = decoded
	}
	return out, warning, nil
}

// writeFile applies one write_files entry to the disk.
func (g *guest) writeFile(f cloudInitFile) error {
	if f.Path == "" {
		g.warnings = append(g.warnings, "write_files: an entry has no path and is skipped")
		return nil
	}
	if !path.IsAbs(f.Path) {
		return fmt.Errorf("write_files: path %q is not absolute", f.Path)
	}
	content, warning, err := f.content()
	if err != nil {
		return err
	}
	if warning != "" {
		g.warnings = append(g.warnings, warning)
	}
	mode, ok := f.Permissions.mode()
	if !ok {
		g.warnings = append(g.warnings, fmt.Sprintf("write_files: %s: undecodable permissions %q, written with 0644", f.Path, f.Permissions.text))
	}
	owner := f.Owner
	if owner == "" {
		owner = "root:root"
	}
	if f.Append {
		if old, exists := g.fs.read(f.Path); exists {
			content = append(append([]byte(nil), old...), content...)
		}
	}
	g.fs.write(f.Path, mode, owner, content)
	return nil
}
