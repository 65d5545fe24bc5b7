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
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
)

func TestParseCloudConfigReadsOnlyCloudConfigs(t *testing.T) {
	cases := []struct {
		name, data string
		err        string
	}{
		{name: "cloud-config", data: "#cloud-config\nstages: {}\n"},
		{name: "header with trailing space", data: "#cloud-config  \nhostname: a\n"},
		{name: "Talos machine config is not read", data: "version: v1alpha1\nmachine: {}\n", err: "not a #cloud-config"},
		{name: "shell script is not read", data: "#!/bin/sh\necho hi\n", err: "not a #cloud-config"},
		{name: "invalid YAML", data: "#cloud-config\nstages: [\n", err: "not valid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := parseCloudConfig([]byte(tc.data))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}

func TestEvalCondition(t *testing.T) {
	fs := newFilesystem()
	fs.write("/etc/kubernetes/kubelet.conf", 0o600, "0:0", []byte("x"))
	cases := []struct {
		cond string
		want bool
		err  bool
	}{
		{cond: "", want: true},
		{cond: "[ -f /etc/kubernetes/kubelet.conf ]", want: true},
		{cond: "[ ! -f /etc/kubernetes/kubelet.conf ]", want: false},
		{cond: "[ -f /run/missing ]", want: false},
		{cond: "[ ! -e /run/missing ]", want: true},
		{cond: "[ -d /etc/kubernetes ]", want: true},
		{cond: "test -f /etc/kubernetes/kubelet.conf", err: true},
		{cond: "[ -x /usr/bin/kubeadm ]", err: true},
	}
	for _, tc := range cases {
		t.Run(tc.cond, func(t *testing.T) {
			g := NewWithT(t)
			got, err := evalCondition(fs, tc.cond)
			if tc.err {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestRenderFileAsYipWrites(t *testing.T) {
	cases := []struct {
		name string
		f    file
		want string
		err  string
	}{
		{name: "plain", f: file{Path: "/a", Content: "hello\n"}, want: "hello\n"},
		{name: "escaped template delimiters come out unchanged", f: file{Path: "/a", Content: `x {{ "{{" }} .Values }}`}, want: "x {{ .Values }}"},
		{name: "base64", f: file{Path: "/a", Encoding: "b64", Content: "aGVsbG8="}, want: "hello"},
		{name: "bad base64", f: file{Path: "/a", Encoding: "b64", Content: "***"}, err: "not valid base64"},
		{name: "unknown encoding", f: file{Path: "/a", Encoding: "gzip", Content: "x"}, err: "does not know the encoding"},
		{name: "unescaped template", f: file{Path: "/a", Content: "{{ .Missing }}"}, err: "cannot expand"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := renderFile(tc.f)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(tc.want))
		})
	}
}

// TestKubeletNodeLabelRule is the kubelet's rule for --node-labels.
func TestKubeletNodeLabelRule(t *testing.T) {
	cases := []struct {
		labels string
		err    string
	}{
		{labels: "pool=workers"},
		{labels: "node.cozystack.io/pool=kairos,example.com/team=a"},
		{labels: "topology.kubernetes.io/zone=a,kubernetes.io/arch=amd64"},
		{labels: "node.kubernetes.io/exclude-from-external-load-balancers=true"},
		{labels: "kubelet.kubernetes.io/x=y,sub.node.kubernetes.io/z=1"},
		{labels: "node-role.kubernetes.io/worker=", err: "unknown 'kubernetes.io' or 'k8s.io' labels"},
		{labels: "k8s.io/anything=x", err: "unknown 'kubernetes.io' or 'k8s.io' labels"},
		{labels: "noequals", err: "is not key=value"},
		{labels: "bad key=x", err: "is invalid"},
		{labels: "pool=bad value", err: "invalid value"},
	}
	for _, tc := range cases {
		t.Run(tc.labels, func(t *testing.T) {
			g := NewWithT(t)
			_, err := parseNodeLabels(tc.labels)
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			g.Expect(IsRefusal(err)).To(BeTrue())
		})
	}
}

func TestVersionSkew(t *testing.T) {
	cc := func(v string) string { return "kind: ClusterConfiguration\nkubernetesVersion: " + v + "\n" }
	cases := []struct {
		name, cluster, kubelet, err string
	}{
		{name: "same version", cluster: cc("v1.36.3"), kubelet: "v1.36.3"},
		{name: "older patch", cluster: cc("v1.36.3"), kubelet: "v1.36.0"},
		{name: "three minors older", cluster: cc("v1.36.3"), kubelet: "v1.33.9"},
		{name: "newer minor", cluster: cc("v1.36.3"), kubelet: "v1.37.0", err: "higher than the control plane"},
		{name: "four minors older", cluster: cc("v1.36.3"), kubelet: "v1.32.0", err: "more than three minor versions older"},
		{name: "no ClusterConfiguration", cluster: "", kubelet: "v1.36.3", err: "no ClusterConfiguration"},
		{name: "unparsable kubelet", cluster: cc("v1.36.3"), kubelet: "latest", err: "cannot be parsed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := checkVersionSkew(tc.cluster, tc.kubelet)
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}

func TestCheckJoinConfiguration(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ab", 32)
	valid := func() *kubeadmv1beta4.JoinConfiguration {
		return &kubeadmv1beta4.JoinConfiguration{
			TypeMeta: metav1.TypeMeta{APIVersion: kubeadmv1beta4.GroupVersion.String(), Kind: "JoinConfiguration"},
			NodeRegistration: kubeadmv1beta4.NodeRegistrationOptions{
				Name:             "vm-0",
				Taints:           []corev1.Taint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}},
				KubeletExtraArgs: []kubeadmv1beta4.Arg{{Name: "provider-id", Value: "kubevirt://vm-0"}, {Name: "max-pods", Value: "50"}},
			},
			Discovery: kubeadmv1beta4.Discovery{BootstrapToken: &kubeadmv1beta4.BootstrapTokenDiscovery{
				Token: "abcdef.0123456789abcdef", APIServerEndpoint: "10.0.0.1:6443", CACertHashes: []string{pin},
			}},
		}
	}
	cases := []struct {
		name   string
		change func(*kubeadmv1beta4.JoinConfiguration)
		err    string
		warn   string
	}{
		{name: "valid worker join"},
		{name: "name from the hostname", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.NodeRegistration.Name = "" }},
		{name: "wrong kind", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.Kind = "InitConfiguration" }, err: "not kubeadm.k8s.io/v1beta4 JoinConfiguration"},
		{name: "control plane join", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.ControlPlane = &kubeadmv1beta4.JoinControlPlane{} }, err: "control-plane node"},
		{name: "file discovery", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.Discovery.BootstrapToken = nil }, err: "not by bootstrap token"},
		{name: "malformed token", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.Discovery.BootstrapToken.Token = "abc" }, err: "not of the form"},
		{name: "endpoint without port", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.Discovery.BootstrapToken.APIServerEndpoint = "10.0.0.1" }, err: "not host:port"},
		{name: "no CA pin", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.Discovery.BootstrapToken.CACertHashes = nil }, err: "without caCertHashes"},
		{name: "malformed CA pin", change: func(c *kubeadmv1beta4.JoinConfiguration) {
			c.Discovery.BootstrapToken.CACertHashes = []string{"md5:00"}
		}, err: "not of the form sha256"},
		{name: "unsafe skip is accepted with a warning", change: func(c *kubeadmv1beta4.JoinConfiguration) {
			c.Discovery.BootstrapToken.CACertHashes, c.Discovery.BootstrapToken.UnsafeSkipCAVerification = nil, true
		}, warn: "skips CA verification"},
		{name: "invalid node name", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.NodeRegistration.Name = "VM_0" }, err: "node name"},
		{name: "unknown taint effect", change: func(c *kubeadmv1beta4.JoinConfiguration) { c.NodeRegistration.Taints[0].Effect = "Evict" }, err: "unknown effect"},
		{name: "bad max-pods", change: func(c *kubeadmv1beta4.JoinConfiguration) {
			c.NodeRegistration.KubeletExtraArgs[1].Value = "many"
		}, err: "max-pods"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := valid()
			if tc.change != nil {
				tc.change(c)
			}
			res, err := checkJoinConfiguration(c, "VM-0")
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				g.Expect(IsRefusal(err)).To(BeTrue())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.nodeName).To(Equal("vm-0"))
			g.Expect(res.providerID).To(Equal("kubevirt://vm-0"))
			if tc.warn != "" {
				g.Expect(res.warnings).To(ContainElement(ContainSubstring(tc.warn)))
			} else {
				g.Expect(res.warnings).To(BeEmpty())
			}
		})
	}
}

// TestBootRunsStagesInKairosOrder checks the interpreter without a join:
// stages run in boot order, `if` guards are honoured, and a command the
// simulator does not model is reported rather than skipped.
func TestBootRunsStagesInKairosOrder(t *testing.T) {
	g := NewWithT(t)
	cfg, err := parseCloudConfig([]byte(`#cloud-config
stages:
  network:
  - name: second
    if: '[ -f /run/first ]'
    commands: ["touch /run/second"]
  initramfs:
  - name: first
    hostname: renamed
    files:
    - path: /run/first
      permissions: 384
      content: "1"
  boot:
  - name: skipped
    if: '[ -f /run/never ]'
    commands: ["reboot"]
`))
	g.Expect(err).NotTo(HaveOccurred())
	vm := &guest{fs: newFilesystem(), hostname: "vm", sshKeys: map[string][]string{}}
	g.Expect(vm.boot(context.Background(), cfg)).To(Succeed())
	g.Expect(vm.hostname).To(Equal("renamed"))
	g.Expect(vm.fs.exists("/run/second")).To(BeTrue())
	g.Expect(vm.fs.files["/run/first"].mode).To(Equal(uint32(0o600)))

	cfg, err = parseCloudConfig([]byte("#cloud-config\nstages:\n  boot:\n  - name: curl\n    commands: [\"curl http://example.com\"]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	vm = &guest{fs: newFilesystem(), sshKeys: map[string][]string{}}
	g.Expect(vm.boot(context.Background(), cfg)).To(MatchError(ContainSubstring("does not model the command")))
}

// FuzzBootInterpreter feeds arbitrary user data through the parser and the
// stage interpreter (with joins refused before any network use): nothing
// may panic.
func FuzzBootInterpreter(f *testing.F) {
	f.Add([]byte("#cloud-config\nstages:\n  network:\n  - if: '[ ! -f /a ]'\n    files: [{path: /a, content: x}]\n    commands: ['mkdir -p /b && touch /b/c']\n"))
	f.Add([]byte("#cloud-config\ncluster:\n  cluster_token: short\n  role: worker\n"))
	f.Add([]byte("#cloud-config\nstages:\n  boot:\n  - commands: ['kubeadm join --config /missing']\n"))
	f.Add([]byte("#cloud-config\nstages:\n  boot:\n  - files: [{path: /x, encoding: b64, content: '{{ \"{{\" }}'}]\n"))
	f.Add([]byte("not a cloud config"))
	f.Fuzz(func(_ *testing.T, data []byte) {
		cfg, err := parseCloudConfig(data)
		if err != nil {
			return
		}
		if cfg.Cluster != nil {
			// The provider join would dial out; the interpreter's own checks
			// run before that and are what is fuzzed here.
			cfg.Cluster.Role = "fuzz"
		}
		vm := &guest{sim: New(Options{}), fs: newFilesystem(), hostname: "fuzz", sshKeys: map[string][]string{}}
		_ = vm.boot(context.Background(), cfg)
	})
}
