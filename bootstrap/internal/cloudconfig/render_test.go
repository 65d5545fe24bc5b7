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

package cloudconfig

import (
	"bytes"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// checkStructure asserts that a rendering holds exactly the keys, stages
// and values that in asks for: nothing a user string could have added.
func checkStructure(t *testing.T, in Input, out []byte) {
	t.Helper()
	p, err := parse(out)
	if err != nil {
		t.Fatalf("rendered output is not a valid cloud-config: %v\n%s", err, out)
	}
	provider := in.Mode == bootstrapv1.JoinModeClusterProvider

	wantTop := []string{"stages"}
	if provider {
		wantTop = []string{"cluster", "stages"}
	}
	if got := keys(p.raw); !reflect.DeepEqual(got, wantTop) {
		t.Fatalf("top-level keys = %v, want %v", got, wantTop)
	}

	wantInitramfs := []string{StageSetHostname}
	if in.SSHAuthorizedKey != "" {
		wantInitramfs = append(wantInitramfs, StageAuthorizeSSHKey)
	}
	if len(in.Files) > 0 {
		wantInitramfs = append(wantInitramfs, StageWriteFiles)
	}
	want := map[string][]string{"initramfs": wantInitramfs}
	if provider {
		want["network.after"] = []string{StageReportSuccess}
		want["reconcile"] = []string{StageReportSuccess}
	} else {
		want["network"] = []string{StageLoadModules, StageSetSysctls, StageWriteJoinConfig, StageJoin, StageReportSuccess}
	}
	if got := p.stageNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("stages = %v, want %v", got, want)
	}
	if got := p.step("initramfs", StageSetHostname)["hostname"]; got != in.Hostname {
		t.Errorf("hostname = %q, want %q", got, in.Hostname)
	}

	if provider {
		cluster := p.raw["cluster"].(map[string]any)
		if got := keys(cluster); !reflect.DeepEqual(got, []string{"cluster_token", "config", "control_plane_host", "role"}) {
			t.Errorf("cluster keys = %v", got)
		}
		if cluster["role"] != ClusterRoleWorker || cluster["control_plane_host"] != in.APIServerEndpoint || cluster["cluster_token"] != in.ClusterToken {
			t.Errorf("cluster block = %v", cluster)
		}
		options, err := p.providerOptions()
		if err != nil {
			t.Fatal(err)
		}
		if got := options.ClusterConfiguration.KubernetesVersion; got != in.KubernetesVersion {
			t.Errorf("cluster.config's clusterConfiguration.kubernetesVersion = %q, want the Machine's %q", got, in.KubernetesVersion)
		}
	} else {
		files, err := p.files("network", StageWriteJoinConfig)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 1 || files[0].Path != JoinConfigurationPath || files[0].Permissions != 0o600 {
			t.Errorf("join configuration file = %+v, want %s with mode 0600", files, JoinConfigurationPath)
		}
	}

	if in.SSHAuthorizedKey != "" {
		users := p.step("initramfs", StageAuthorizeSSHKey)["users"].(map[string]any)
		if got := keys(users); !reflect.DeepEqual(got, []string{SSHUser}) {
			t.Errorf("users = %v, want only %s", got, SSHUser)
		}
		keysAny := users[SSHUser].(map[string]any)["ssh_authorized_keys"].([]any)
		if len(keysAny) != 1 || keysAny[0] != in.SSHAuthorizedKey {
			t.Errorf("authorized keys = %v, want [%q]", keysAny, in.SSHAuthorizedKey)
		}
	}

	if len(in.Files) > 0 {
		files, err := p.files("initramfs", StageWriteFiles)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != len(in.Files) {
			t.Fatalf("rendered %d files, want %d", len(files), len(in.Files))
		}
		for i, f := range files {
			w := in.Files[i]
			if f.Path != w.Path || f.Owner != w.Owner || !bytes.Equal(f.Content, w.Content) {
				t.Errorf("file %d = %q owner %q content %q, want %q owner %q content %q", i, f.Path, f.Owner, f.Content, w.Path, w.Owner, w.Content)
			}
			for _, k := range f.Keys {
				switch k {
				case "path", "permissions", "owner", "group", "ownerstring", "encoding", "content":
				default:
					t.Errorf("file %d has unexpected key %q", i, k)
				}
			}
		}
	}

	doc, err := p.joinConfiguration()
	if err != nil {
		t.Fatalf("reading the rendered JoinConfiguration: %v", err)
	}
	join, err := decodeJoin(doc)
	if err != nil {
		t.Fatalf("JoinConfiguration does not decode strictly: %v\n%s", err, doc)
	}
	if join.NodeRegistration.Name != in.Hostname {
		t.Errorf("nodeRegistration.name = %q, want %q", join.NodeRegistration.Name, in.Hostname)
	}
	bt := join.Discovery.BootstrapToken
	if bt == nil || bt.Token != in.Token || bt.APIServerEndpoint != in.APIServerEndpoint || !reflect.DeepEqual(bt.CACertHashes, in.CACertHashes) || bt.UnsafeSkipCAVerification {
		t.Errorf("discovery = %+v", bt)
	}
	wantArgs := map[string]string{"provider-id": in.ProviderID}
	if len(in.NodeLabels) > 0 {
		pairs := make([]string, 0, len(in.NodeLabels))
		for k, v := range in.NodeLabels {
			pairs = append(pairs, k+"="+v)
		}
		sort.Strings(pairs)
		wantArgs["node-labels"] = strings.Join(pairs, ",")
	}
	for _, a := range in.KubeletExtraArgs {
		wantArgs[a.Name] = a.Value
	}
	gotArgs := map[string]string{}
	for _, a := range join.NodeRegistration.KubeletExtraArgs {
		gotArgs[a.Name] = a.Value
	}
	if !reflect.DeepEqual(gotArgs, wantArgs) {
		t.Errorf("kubeletExtraArgs = %v, want %v", gotArgs, wantArgs)
	}
	wantTaints := append([]corev1.Taint{{Key: UninitializedTaintKey, Effect: corev1.TaintEffectNoSchedule}}, in.NodeTaints...)
	if !reflect.DeepEqual(join.NodeRegistration.Taints, wantTaints) {
		t.Errorf("taints = %v, want %v", join.NodeRegistration.Taints, wantTaints)
	}
}

func TestRenderStructure(t *testing.T) {
	for name, in := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			out, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			checkStructure(t, in, out)
		})
	}
}

// TestStagesJoinPreparesTheKernel checks that a Stages join loads overlay
// and br_netfilter and turns on forwarding and bridged iptables, on every
// boot and before kubeadm runs: a Kairos core image sets none of them (the
// Debian test disk shipped them, which hid their absence), and kubeadm's
// preflight fails without IPv4 forwarding.
func TestStagesJoinPreparesTheKernel(t *testing.T) {
	out, err := Render(minimalInput())
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(out)
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]int{}
	for i, name := range p.stageNames()["network"] {
		index[name] = i
	}
	for _, name := range []string{StageLoadModules, StageSetSysctls, StageJoin} {
		if _, ok := index[name]; !ok {
			t.Fatalf("no step %q in the network stage:\n%s", name, out)
		}
	}
	if index[StageLoadModules] >= index[StageSetSysctls] || index[StageSetSysctls] >= index[StageJoin] {
		t.Errorf("network steps in order %v; the modules must load before the sysctls are set, both before the join", p.stageNames()["network"])
	}
	for _, name := range []string{StageLoadModules, StageSetSysctls} {
		if cond, ok := p.step("network", name)["if"]; ok {
			t.Errorf("step %q runs only if %v; it must run on every boot", name, cond)
		}
	}
	modules, _ := p.step("network", StageLoadModules)["modules"].([]any)
	if got := fmt.Sprint(modules); got != "[overlay br_netfilter]" {
		t.Errorf("modules = %s, want [overlay br_netfilter]", got)
	}
	sysctls, _ := p.step("network", StageSetSysctls)["sysctl"].(map[string]any)
	want := map[string]any{
		"net.ipv4.ip_forward":                 "1",
		"net.bridge.bridge-nf-call-iptables":  "1",
		"net.bridge.bridge-nf-call-ip6tables": "1",
	}
	if !reflect.DeepEqual(sysctls, want) {
		t.Errorf("sysctl = %v, want %v", sysctls, want)
	}
}

func TestRenderKeepsHostileStringsInside(t *testing.T) {
	in := minimalInput()
	in.Hostname = "vm: {stages: {}}"
	in.NodeLabels = map[string]string{"a": "b # injected: true", "&anchor": "*alias"}
	in.NodeTaints = []corev1.Taint{{Key: "k: v - x", Value: "\"'", Effect: corev1.TaintEffectNoSchedule}}
	in.KubeletExtraArgs = []Arg{{Name: "? x", Value: "}}{{ .Values }} #cloud-config"}}
	in.SSHAuthorizedKey = "ssh-ed25519 AAAA ]} users: {root: {}}"
	in.Files = []File{
		{Path: "/etc/a - path: /etc/shadow", Content: []byte("---\nstages:\n  boot: []\n...\n")},
		{Path: "/etc/b", Content: []byte("{{ .Values.os }} {{- /* c */ -}} }}")},
		{Path: "/etc/c", Content: []byte("\x00\x01 not text \xff")},
	}
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	checkStructure(t, in, out)
}

func TestRenderRejectsControlCharacters(t *testing.T) {
	for name, mutate := range map[string]func(*Input){
		"newline in the hostname":      func(in *Input) { in.Hostname = "vm\nstages: {}" },
		"newline in a label value":     func(in *Input) { in.NodeLabels = map[string]string{"a": "b\n  injected: true"} },
		"DEL in a kubelet flag value":  func(in *Input) { in.KubeletExtraArgs = []Arg{{Name: "v", Value: "\x7f"}} },
		"newline in the SSH key":       func(in *Input) { in.SSHAuthorizedKey = "ssh-ed25519 AAAA\nusers: {}" },
		"invalid UTF-8 in a file path": func(in *Input) { in.Files = []File{{Path: "/etc/\xff"}} },
		"C1 control in a taint value":  func(in *Input) { in.NodeTaints = []corev1.Taint{{Key: "k", Value: "\u0085", Effect: "NoSchedule"}} },
	} {
		t.Run(name, func(t *testing.T) {
			in := minimalInput()
			mutate(&in)
			if _, err := Render(in); err == nil {
				t.Error("Render accepted it")
			}
		})
	}
}

func TestRenderRejectsIncompleteInput(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Input)
		field  string
	}{
		{"missing hostname", func(in *Input) { in.Hostname = "" }, "input.hostname"},
		{"missing providerID", func(in *Input) { in.ProviderID = "" }, "input.providerID"},
		{"endpoint without port", func(in *Input) { in.APIServerEndpoint = "10.0.0.1" }, "input.apiServerEndpoint"},
		{"no CA pin, never unsafeSkipCAVerification", func(in *Input) { in.CACertHashes = nil }, "input.caCertHashes"},
		{"malformed token", func(in *Input) { in.Token = "not-a-token" }, "input.token"},
		{"cluster token too short for the provider", func(in *Input) {
			in.Mode = bootstrapv1.JoinModeClusterProvider
			in.ClusterToken = "short"
		}, "input.clusterToken"},
		{"ClusterProvider without the Machine's version, which the provider needs", func(in *Input) {
			in.Mode = bootstrapv1.JoinModeClusterProvider
			in.ClusterToken = "0123456789abcdef"
		}, "input.kubernetesVersion"},
		{"a version the provider cannot parse", func(in *Input) {
			in.Mode = bootstrapv1.JoinModeClusterProvider
			in.ClusterToken = "0123456789abcdef"
			in.KubernetesVersion = "v1.35"
		}, "input.kubernetesVersion"},
		{"unknown mode", func(in *Input) { in.Mode = "Both" }, "input.mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := minimalInput()
			tt.mutate(&in)
			if _, err := Render(in); err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Render error = %v, want one naming %s", err, tt.field)
			}
			if _, err := JoinConfiguration(in); err == nil {
				t.Error("JoinConfiguration accepted the input")
			}
		})
	}
}

func TestRenderNeverLeaksTheTokenInErrors(t *testing.T) {
	in := minimalInput()
	in.Token = "abcdef.0123456789abcdeX"
	_, err := Render(in)
	if err == nil || strings.Contains(err.Error(), in.Token) {
		t.Errorf("error %v must reject the token without quoting it", err)
	}
}

func TestEscapeTemplate(t *testing.T) {
	tests := map[string]string{
		"plain":          "plain",
		"{{":             `{{ "{{" }}`,
		"a {{ b }} c":    `a {{ "{{" }} b }} c`,
		"{{{{":           `{{ "{{" }}{{ "{{" }}`,
		"}} only":        "}} only",
		"{ { separate }": "{ { separate }",
	}
	for in, want := range tests {
		if got := EscapeTemplate(in); got != want {
			t.Errorf("EscapeTemplate(%q) = %q, want %q", in, got, want)
		}
	}
}
