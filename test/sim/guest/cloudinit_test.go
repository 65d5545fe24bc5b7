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
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
)

var (
	noCloud     = instanceMetadata{datasource: datasourceNoCloud, hostname: "worker-0", uuid: "5f1e0c8e-0000-4000-8000-000000000001", configDriveInstanceID: "worker-0.tenant"}
	configDrive = instanceMetadata{datasource: datasourceConfigDrive, hostname: "worker-0", uuid: "5f1e0c8e-0000-4000-8000-000000000001", configDriveInstanceID: "worker-0.tenant"}
	cloudInitOS = Image{KubernetesVersion: "v1.36.3", OSImage: "Ubuntu 24.04.3 LTS", CloudInit: true}
	kairosOS    = Image{KubernetesVersion: "v1.36.3", OSImage: "Kairos v3.5.3"}
)

// cabpkJoin is a worker JoinConfiguration as a KubeadmConfig gives it to
// Cluster API's kubeadm bootstrap provider (CABPK), with the node name
// left to cloud-init's jinja as CAPK's templates do.
func cabpkJoin(endpoint, token, pin string) *kubeadmv1.JoinConfiguration {
	return &kubeadmv1.JoinConfiguration{
		NodeRegistration: kubeadmv1.NodeRegistrationOptions{
			Name: "{{ ds.meta_data.local_hostname }}",
			KubeletExtraArgs: []kubeadmv1.Arg{
				{Name: "provider-id", Value: ptr.To("kubevirt://{{ ds.meta_data.local_hostname }}")},
				{Name: "node-labels", Value: ptr.To("pool=kubeadm-peer")},
			},
		},
		Discovery: kubeadmv1.Discovery{BootstrapToken: kubeadmv1.BootstrapTokenDiscovery{
			Token: token, APIServerEndpoint: endpoint, CACertHashes: []string{pin},
		}},
	}
}

// cabpkUserData renders worker user data with CABPK's own exported
// renderer (bootstrap/kubeadm/pkg/cloudinit) and JoinConfiguration
// marshaller, called with what its KubeadmConfig reconciler passes for a
// worker (which also adds the uninitialized taint first).
func cabpkUserData(tb testing.TB, join *kubeadmv1.JoinConfiguration, input cloudinit.BaseUserData) []byte {
	tb.Helper()
	join = join.DeepCopy()
	join.NodeRegistration.Taints = ptr.To(append(ptr.Deref(join.NodeRegistration.Taints, nil),
		corev1.Taint{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}))
	version := semver.MustParse("1.36.3")
	joinData, err := kubeadmtypes.MarshalJoinConfigurationForVersion(join, version)
	if err != nil {
		tb.Fatal(err)
	}
	input.KubernetesVersion = version
	data, err := cloudinit.NewNode(&cloudinit.NodeInput{BaseUserData: input, JoinConfiguration: joinData})
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func gzipped(tb testing.TB, s string) []byte {
	tb.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func TestRenderJinjaFromKubeVirtInstanceData(t *testing.T) {
	cases := []struct {
		name, template string
		md             instanceMetadata
		want, err      string
	}{
		{name: "NoCloud local hostname", template: "name: {{ ds.meta_data.local_hostname }}", md: noCloud, want: "name: worker-0"},
		{name: "v1 local hostname", template: "{{v1.local_hostname}}", md: noCloud, want: "worker-0"},
		{name: "whitespace control", template: "a {{- v1.local_hostname -}} b", md: noCloud, want: "a worker-0 b"},
		{name: "NoCloud instance id is the firmware UUID", template: "{{ ds.meta_data.instance_id }}", md: noCloud, want: noCloud.uuid},
		{name: "v1 instance id", template: "{{ v1.instance_id }}", md: configDrive, want: configDrive.uuid},
		{name: "ConfigDrive hostname", template: "{{ ds.meta_data.hostname }}", md: configDrive, want: "worker-0"},
		{name: "ConfigDrive local hostname is copied from hostname", template: "{{ ds.meta_data.local_hostname }}", md: configDrive, want: "worker-0"},
		{name: "ConfigDrive instance_id is name.namespace", template: "{{ ds.meta_data.instance_id }}", md: configDrive, want: "worker-0.tenant"},
		{name: "comment is dropped", template: "x{# note #}y", md: noCloud, want: "xy"},
		{name: "lone braces are text", template: "{ a: {b} }", md: noCloud, want: "{ a: {b} }"},
		{name: "NoCloud has no hostname key", template: "{{ ds.meta_data.hostname }}", md: noCloud, err: "ds.meta_data.hostname is not in the instance data KubeVirt's NoCloud metadata gives"},
		{name: "unknown variable", template: "{{ v1.region }}", md: configDrive, err: "v1.region is not in the instance data KubeVirt's ConfigDrive metadata gives"},
		{name: "filter", template: "{{ v1.local_hostname | upper }}", md: noCloud, err: "renders only instance-data variables"},
		{name: "subscript", template: "{{ ds.meta_data['local-hostname'] }}", md: noCloud, err: "renders only instance-data variables"},
		{name: "statement", template: "{% if v1.local_hostname %}x{% endif %}", md: noCloud, err: "does not model jinja statements"},
		{name: "unclosed expression", template: "{{ v1.local_hostname", md: noCloud, err: "not closed with }}"},
		{name: "unclosed comment", template: "{# x", md: noCloud, err: "not closed with #}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := renderJinja(tc.template, tc.md.jinjaVariables())
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestParseCloudInitReadsWhatCloudInitReads(t *testing.T) {
	cases := []struct {
		name, data string
		check      func(Gomega, *cloudInitConfig)
		notConfig  bool
		err        string
	}{
		{
			name: "plain cloud-config is not templated",
			data: "#cloud-config\nrunsmd: []\nwrite_files:\n- path: /a\n  content: '{{ v1.nothing }}'\n",
			check: func(g Gomega, c *cloudInitConfig) {
				g.Expect(c.WriteFiles).To(ConsistOf(HaveField("Content", "{{ v1.nothing }}")))
			},
		},
		{
			name: "jinja header renders before YAML is read",
			data: "## template: jinja\n#cloud-config\nhostname: '{{ ds.meta_data.local_hostname }}'\nruncmd:\n- echo {{ v1.local_hostname }}\n- [touch, /run/a b]\n",
			check: func(g Gomega, c *cloudInitConfig) {
				g.Expect(c.Hostname).To(Equal("worker-0"))
				g.Expect(c.RunCmd).To(HaveLen(2))
				g.Expect(c.RunCmd[0].shell).To(Equal("echo worker-0"))
				g.Expect(c.RunCmd[1].argv).To(Equal([]string{"touch", "/run/a b"}))
			},
		},
		{name: "jinja header is case-insensitive", data: "##Template: JINJA\n#cloud-config\n{}\n"},
		{
			name: "Kairos stages mean nothing to cloud-init",
			data: "#cloud-config\nstages:\n  network:\n  - commands: ['kubeadm join --config /x']\ncluster:\n  role: worker\n",
			check: func(g Gomega, c *cloudInitConfig) {
				g.Expect(c.RunCmd).To(BeEmpty())
				g.Expect(c.BootCmd).To(BeEmpty())
				g.Expect(c.WriteFiles).To(BeEmpty())
			},
		},
		{name: "users: default and a mapping", data: "#cloud-config\nusers:\n- default\n- name: capk\n  ssh_authorized_keys: [ssh-ed25519 AAAA]\n", check: func(g Gomega, c *cloudInitConfig) {
			g.Expect(c.Users).To(ContainElement(cloudInitUser{Name: "capk", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA"}}))
		}},
		{name: "unknown jinja variable is refused", data: "## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.hostname }}\n", err: "ds.meta_data.hostname is not in the instance data"},
		{name: "Talos machine config is not cloud-init configuration", data: "version: v1alpha1\nmachine: {}\n", notConfig: true},
		{name: "jinja of something else is not configuration", data: "## template: jinja\nhostname: {{ v1.local_hostname }}\n", notConfig: true},
		{name: "shell script is not modelled", data: "#!/bin/sh\nkubeadm join\n", err: "models #cloud-config user data only"},
		{name: "cloud-config-archive is not modelled", data: "#cloud-config-archive\n- type: text/cloud-config\n", err: "models #cloud-config user data only"},
		{name: "MIME multipart is not modelled", data: "Content-Type: multipart/mixed; boundary=x\n", err: "models #cloud-config user data only"},
		{name: "invalid YAML", data: "#cloud-config\nruncmd: [\n", err: "not valid YAML"},
		{name: "runcmd entry that is a mapping", data: "#cloud-config\nruncmd:\n- {a: b}\n", err: "a command must be a string or a list of strings"},
		{name: "runcmd argv of non-strings", data: "#cloud-config\nruncmd:\n- [touch, [a]]\n", err: "must list strings"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cfg, err := parseCloudInit([]byte(tc.data), noCloud)
			switch {
			case tc.notConfig:
				g.Expect(err).To(MatchError(errNotCloudInitConfig))
			case tc.err != "":
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			default:
				g.Expect(err).NotTo(HaveOccurred())
				if tc.check != nil {
					tc.check(g, cfg)
				}
			}
		})
	}
}

func TestWriteFilesAsCloudInitWrites(t *testing.T) {
	payload := "apiVersion: v1\nkind: Config\n"
	b64 := base64.StdEncoding.EncodeToString([]byte(payload))
	gzB64 := base64.StdEncoding.EncodeToString(gzipped(t, payload))
	// A YAML block breaks long base64 over lines, which cloud-init drops.
	wrapped := gzB64[:10] + "\n" + gzB64[10:]
	cases := []struct {
		name, entry string
		existing    string
		want        string
		mode        uint32
		owner       string
		warning     string
		err         string
	}{
		{name: "plain text with CABPK's quoted octal permissions", entry: "path: /etc/a\nowner: root:root\npermissions: '0640'\ncontent: |\n  " + "hello\n", want: "hello\n", mode: 0o640, owner: "root:root"},
		{name: "owner defaults to root:root and mode to 0644", entry: "path: /etc/a\ncontent: x", want: "x", mode: 0o644, owner: "root:root"},
		{name: "unquoted leading-zero permissions are octal", entry: "path: /etc/a\npermissions: 0600\ncontent: x", want: "x", mode: 0o600, owner: "root:root"},
		{name: "decimal permissions", entry: "path: /etc/a\npermissions: 420\ncontent: x", want: "x", mode: 0o644, owner: "root:root"},
		{name: "undecodable permissions fall back with a warning", entry: "path: /etc/a\npermissions: rw-r\ncontent: x", want: "x", mode: 0o644, owner: "root:root", warning: "undecodable permissions"},
		{name: "base64", entry: "path: /etc/a\nencoding: base64\ncontent: " + b64, want: payload, mode: 0o644, owner: "root:root"},
		{name: "b64", entry: "path: /etc/a\nencoding: b64\ncontent: " + b64, want: payload, mode: 0o644, owner: "root:root"},
		{name: "gzip+base64 over lines", entry: "path: /etc/a\nencoding: \"gzip+base64\"\ncontent: |\n  " + strings.ReplaceAll(wrapped, "\n", "\n  ") + "\n", want: payload, mode: 0o644, owner: "root:root"},
		{name: "gz+b64", entry: "path: /etc/a\nencoding: gz+b64\ncontent: " + gzB64, want: payload, mode: 0o644, owner: "root:root"},
		{name: "gzip of a YAML binary", entry: "path: /etc/a\nencoding: gzip\ncontent: !!binary " + gzB64, want: payload, mode: 0o644, owner: "root:root"},
		{name: "unknown encoding is text with a warning", entry: "path: /etc/a\nencoding: rot13\ncontent: x", want: "x", mode: 0o644, owner: "root:root", warning: "unknown encoding"},
		{name: "append adds to the file", entry: "path: /etc/a\nappend: true\ncontent: two\n", existing: "one\n", want: "one\ntwo", mode: 0o644, owner: "root:root"},
		{name: "without append the file is replaced", entry: "path: /etc/a\ncontent: two\n", existing: "one\n", want: "two", mode: 0o644, owner: "root:root"},
		{name: "invalid base64", entry: "path: /etc/a\nencoding: base64\ncontent: '***'", err: "/etc/a: content is not valid base64"},
		{name: "gzip that is not gzip", entry: "path: /etc/a\nencoding: gzip+base64\ncontent: " + b64, err: "/etc/a: content is not gzip data"},
		{name: "relative path", entry: "path: etc/a\ncontent: x", err: `path "etc/a" is not absolute`},
		{name: "missing path is skipped with a warning", entry: "content: x", warning: "has no path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cfg, err := parseCloudInit([]byte("#cloud-config\nwrite_files:\n- "+strings.ReplaceAll(tc.entry, "\n", "\n  ")+"\n"), noCloud)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.WriteFiles).To(HaveLen(1))
			vm := &guest{fs: newFilesystem(), sshKeys: map[string][]string{}}
			if tc.existing != "" {
				vm.fs.write("/etc/a", 0o600, "root:root", []byte(tc.existing))
			}
			err = vm.writeFile(cfg.WriteFiles[0])
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.warning != "" {
				g.Expect(vm.warnings).To(ContainElement(ContainSubstring(tc.warning)))
			} else {
				g.Expect(vm.warnings).To(BeEmpty())
			}
			if tc.want == "" {
				g.Expect(vm.fs.files).To(BeEmpty())
				return
			}
			f := vm.fs.files["/etc/a"]
			g.Expect(string(f.content)).To(Equal(tc.want))
			g.Expect(f.mode).To(Equal(tc.mode))
			g.Expect(f.owner).To(Equal(tc.owner))
		})
	}
}

func TestShellInterpreterSplitsAsSh(t *testing.T) {
	cases := []struct {
		line string
		want []simpleCommand
		err  string
	}{
		{line: "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete", want: []simpleCommand{
			{args: []string{"kubeadm", "join", "--config", "/run/kubeadm/kubeadm-join-config.yaml"}},
			{args: []string{"echo", "success"}, redirect: "/run/cluster-api/bootstrap-success.complete"},
		}},
		{line: "mkdir -p /a&&touch /a/b", want: []simpleCommand{{args: []string{"mkdir", "-p", "/a"}}, {args: []string{"touch", "/a/b"}}}},
		{line: `echo 'a  b' "c \"d\" \$e" f\ g >>/log`, want: []simpleCommand{{args: []string{"echo", "a  b", `c "d" $e`, "f g"}, redirect: "/log", appendOutput: true}}},
		{line: `echo "" x`, want: []simpleCommand{{args: []string{"echo", "", "x"}}}},
		{line: "touch /a # a comment", want: []simpleCommand{{args: []string{"touch", "/a"}}}},
		{line: "   ", want: nil},
		{line: "a | b", err: `shell construct "|"`},
		{line: "a; b", err: `shell construct ";"`},
		{line: "a || b", err: `shell construct "|"`},
		{line: "a &", err: `shell construct "&"`},
		{line: "echo $HOME", err: `shell construct "$"`},
		{line: `echo "$(hostname)"`, err: `shell construct "$"`},
		{line: "echo `hostname`", err: "shell construct \"`\""},
		{line: "cat < /a", err: `shell construct "<"`},
		{line: "a 2>/dev/null", err: `shell construct "2>"`},
		{line: "echo > /a > /b", err: `shell construct ">"`},
		{line: "echo 'open", err: "unterminated quoted string"},
		{line: `echo "open`, err: "unterminated quoted string"},
		{line: "echo >", err: "a redirection has no file"},
		{line: "&& a", err: "an empty command"},
		{line: "a &&", err: "ends with &&"},
	}
	for _, tc := range cases {
		t.Run(tc.line, func(t *testing.T) {
			g := NewWithT(t)
			got, err := parseShell(tc.line)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestImageDecidesWhatUserDataMeans: a Kairos disk reads only Kairos
// configuration and a cloud-init disk only what cloud-init reads. No
// cluster is registered, so a join that is attempted stops at discovery.
func TestImageDecidesWhatUserDataMeans(t *testing.T) {
	const endpoint = "192.0.2.10:6443"
	pin := "sha256:" + strings.Repeat("ab", 32)
	cabpk := cabpkUserData(t, cabpkJoin(endpoint, "abcdef.0123456789abcdef", pin), cloudinit.BaseUserData{})
	join := joinConfiguration("worker-0", "abcdef.0123456789abcdef", pin)
	join.Discovery.BootstrapToken.APIServerEndpoint = endpoint
	kairosStages := stagesConfig(t, "worker-0", join)
	cases := []struct {
		name    string
		image   Image
		data    []byte
		phase   Phase
		reason  string
		err     string
		joined  bool
		noFiles bool
	}{
		{name: "Kairos disk does not read CABPK's jinja cloud-config", image: kairosOS, data: cabpk, phase: PhaseIgnored, reason: "not a #cloud-config, so Kairos does not read it"},
		{name: "Kairos disk joins with its stages", image: kairosOS, data: kairosStages, err: "discovery: no API server answers at " + endpoint},
		{name: "cloud-init disk joins with CABPK's user data", image: cloudInitOS, data: cabpk, err: "cloud-init runcmd[0]: discovery: no API server answers at " + endpoint},
		{name: "cloud-init disk ignores Kairos stages: no join", image: cloudInitOS, data: kairosStages, noFiles: true},
		{name: "cloud-init disk ignores a Talos config", image: cloudInitOS, data: []byte("version: v1alpha1\n"), phase: PhaseIgnored, reason: "cloud-init applies no configuration"},
		{name: "cloud-init disk refuses an unknown jinja variable", image: cloudInitOS, data: []byte("## template: jinja\n#cloud-config\nhostname: {{ v1.region }}\n"), phase: PhaseRefused, err: "v1.region is not in the instance data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := New(Options{})
			vm, phase, reason, err := s.bootDisk(context.Background(), tc.image, tc.data, noCloud, newFilesystem())
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				g.Expect(vm).To(BeNil())
				if tc.phase != "" {
					g.Expect(phase).To(Equal(tc.phase))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.phase != "" {
				g.Expect(vm).To(BeNil())
				g.Expect(phase).To(Equal(tc.phase))
				g.Expect(reason).To(ContainSubstring(tc.reason))
				return
			}
			g.Expect(vm).NotTo(BeNil())
			g.Expect(vm.fs.kubelet).To(BeNil(), "no join ran")
			if tc.noFiles {
				g.Expect(vm.fs.exists("/run/kubeadm/kubeadm-join-config.yaml")).To(BeFalse())
				g.Expect(vm.fs.exists(SentinelPath)).To(BeFalse())
			}
		})
	}
}

// TestCloudInitRunsCommandsAsCloudInitDoes: bootcmd every boot, runcmd in
// order once per instance ID, a failing runcmd line does not stop the
// next, and CABPK's sentinel is written only when its join line succeeds.
func TestCloudInitRunsCommandsAsCloudInitDoes(t *testing.T) {
	g := NewWithT(t)
	data := []byte(`## template: jinja
#cloud-config
bootcmd:
- "echo boot >> /run/boots"
write_files:
- path: /etc/kubeadm-flags
  content: "--node-name={{ v1.local_hostname }}"
- path: /etc/deferred
  defer: true
  append: true
  content: "late"
runcmd:
- "mkdir -p /run/cluster-api"
- kubeadm join --config /run/kubeadm/missing.yaml --v 5 && echo success > /run/cluster-api/bootstrap-success.complete
- [touch, /run/after join]
`)
	cfg, err := parseCloudInit(data, noCloud)
	g.Expect(err).NotTo(HaveOccurred())
	vm := &guest{sim: New(Options{}), fs: newFilesystem(), hostname: noCloud.hostname, sshKeys: map[string][]string{}, ipForward: true}
	err = vm.cloudInitBoot(context.Background(), cfg, noCloud)
	g.Expect(err).To(MatchError(ContainSubstring("cloud-init runcmd[1]: kubeadm join: the configuration file /run/kubeadm/missing.yaml does not exist")))
	g.Expect(IsRefusal(err)).To(BeTrue())
	g.Expect(vm.fs.exists(SentinelPath)).To(BeFalse())
	g.Expect(vm.fs.exists("/run/after join")).To(BeTrue(), "later runcmd lines still run")
	g.Expect(string(vm.fs.files["/etc/kubeadm-flags"].content)).To(Equal("--node-name=worker-0"))
	g.Expect(string(vm.fs.files["/etc/deferred"].content)).To(Equal("late"))
	g.Expect(vm.fs.exists(kubeletUnitLink)).To(BeTrue(), "image-builder enables the kubelet unit")

	// The next boot of the same instance: bootcmd runs again, the
	// per-instance modules do not.
	delete(vm.fs.files, "/run/after join")
	g.Expect(vm.cloudInitBoot(context.Background(), cfg, noCloud)).To(Succeed())
	g.Expect(string(vm.fs.files["/run/boots"].content)).To(Equal(strings.Repeat("boot\n", 2)))
	g.Expect(vm.fs.exists("/run/after join")).To(BeFalse())
	g.Expect(string(vm.fs.files["/etc/deferred"].content)).To(Equal("late"))

	// A new instance ID runs them again.
	other := noCloud
	other.uuid = "5f1e0c8e-0000-4000-8000-000000000002"
	g.Expect(vm.cloudInitBoot(context.Background(), cfg, other)).To(HaveOccurred())
	g.Expect(vm.fs.exists("/run/after join")).To(BeTrue())
	g.Expect(string(vm.fs.files["/etc/deferred"].content)).To(Equal("latelate"))
}

func TestCloudInitRecordsUsersKeysAndHostname(t *testing.T) {
	g := NewWithT(t)
	data := cabpkUserData(t, cabpkJoin("192.0.2.10:6443", "abcdef.0123456789abcdef", "sha256:"+strings.Repeat("ab", 32)), cloudinit.BaseUserData{
		Users:               []kubeadmv1.User{{Name: "capk", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3Nza capk@example"}}},
		PreKubeadmCommands:  []string{`echo "pre kubeadm" > /run/pre`},
		PostKubeadmCommands: []string{"touch /run/post"},
		AdditionalFiles: []kubeadmv1.File{
			{Path: "/etc/containerd/conf.d/extra.toml", Owner: "root:root", Permissions: "0600", Encoding: kubeadmv1.GzipBase64, Content: base64.StdEncoding.EncodeToString(gzipped(t, "[plugins]\n"))},
			{Path: "/etc/hosts", Append: ptr.To(true), Content: "192.0.2.10 api"},
		},
		KubeadmVerbosity: "--v 5",
	})
	cfg, err := parseCloudInit(data, noCloud)
	g.Expect(err).NotTo(HaveOccurred())
	vm := &guest{sim: New(Options{}), fs: newFilesystem(), hostname: noCloud.hostname, sshKeys: map[string][]string{}, ipForward: true}
	vm.fs.write("/etc/hosts", 0o644, "root:root", []byte("127.0.0.1 localhost\n"))
	// No cluster answers: the join line fails at discovery and is retried.
	err = vm.cloudInitBoot(context.Background(), cfg, noCloud)
	g.Expect(err).To(MatchError(ContainSubstring("runcmd[1]: discovery: no API server answers at 192.0.2.10:6443")))
	g.Expect(IsRefusal(err)).To(BeFalse())
	g.Expect(vm.sshKeys).To(Equal(map[string][]string{"capk": {"ssh-ed25519 AAAAC3Nza capk@example"}}))
	g.Expect(string(vm.fs.files["/run/pre"].content)).To(Equal("pre kubeadm\n"))
	g.Expect(vm.fs.exists("/run/post")).To(BeTrue())
	g.Expect(string(vm.fs.files["/etc/containerd/conf.d/extra.toml"].content)).To(Equal("[plugins]\n"))
	g.Expect(vm.fs.files["/etc/containerd/conf.d/extra.toml"].mode).To(Equal(uint32(0o600)))
	g.Expect(string(vm.fs.files["/etc/hosts"].content)).To(HavePrefix("127.0.0.1 localhost\n192.0.2.10 api"))
	joinFile := vm.fs.files["/run/kubeadm/kubeadm-join-config.yaml"]
	g.Expect(joinFile.mode).To(Equal(uint32(0o640)))
	g.Expect(string(joinFile.content)).To(ContainSubstring("name: 'worker-0'"))
	g.Expect(string(joinFile.content)).To(ContainSubstring("value: kubevirt://worker-0"))
	g.Expect(vm.fs.exists("/run/cluster-api/placeholder")).To(BeTrue())
	// CABPK writes the token file group-readable; the reviewer's warning
	// says so, as it would for a Kairos rendering.
	g.Expect(vm.warnings).To(ConsistOf(ContainSubstring("kubeadm-join-config.yaml holds the bootstrap token and is readable by others (mode 0640)")))
}

// FuzzCloudInitParser feeds arbitrary user data through the cloud-init
// parser, jinja renderer and module runner (no cluster is registered, so
// joins stop before any network use): nothing may panic.
func FuzzCloudInitParser(f *testing.F) {
	f.Add(cabpkUserData(f, cabpkJoin("192.0.2.10:6443", "abcdef.0123456789abcdef", "sha256:"+strings.Repeat("ab", 32)), cloudinit.BaseUserData{
		PreKubeadmCommands: []string{"mkdir -p /etc/x"},
		AdditionalFiles:    []kubeadmv1.File{{Path: "/etc/x/y", Encoding: kubeadmv1.Base64, Content: "eA=="}},
	}))
	f.Add([]byte("## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.local_hostname }}\nruncmd: [[touch, /a]]\n"))
	f.Add([]byte("## template: jinja\n#cloud-config\n{% if x %}{# c #}{{ v1.nope }}\n"))
	f.Add([]byte("#cloud-config\nwrite_files:\n- {path: /a, encoding: gz+b64, permissions: 0o755, append: true, content: H4sI}\nbootcmd: ['echo \"a\" >> /b && rm -f /b']\n"))
	f.Add([]byte("#cloud-config\nusers: [default, {name: a, ssh_authorized_keys: [k]}]\nruncmd: ['kubeadm join --config /missing --v 2']\n"))
	f.Add([]byte("#!/bin/sh\n"))
	f.Fuzz(func(_ *testing.T, data []byte) {
		for _, md := range []instanceMetadata{noCloud, configDrive} {
			cfg, err := parseCloudInit(data, md)
			if err != nil {
				continue
			}
			vm := &guest{sim: New(Options{}), fs: newFilesystem(), hostname: md.hostname, sshKeys: map[string][]string{}, ipForward: true}
			_ = vm.cloudInitBoot(context.Background(), cfg, md)
		}
	})
}
