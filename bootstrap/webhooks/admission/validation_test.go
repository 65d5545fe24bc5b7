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

package admission

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	wcvalidation "github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
)

func TestValidateSpec(t *testing.T) {
	key, privateKey := sshkeystest.KeyPair()
	otherKey, _ := sshkeystest.KeyPair()
	tests := []struct {
		name string
		spec bootstrapv1.KairosConfigSpec
		// wantField is the path of the expected error; empty means valid.
		wantField string
	}{
		{name: "an empty spec is valid", spec: bootstrapv1.KairosConfigSpec{}},
		{name: "both join modes are accepted", spec: bootstrapv1.KairosConfigSpec{JoinMode: bootstrapv1.JoinModeClusterProvider}},
		{name: "an unknown join mode is rejected", spec: bootstrapv1.KairosConfigSpec{JoinMode: "Both"}, wantField: "spec.joinMode"},

		{name: "sshKeys: zero keys configure no SSH login", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{}}},
		{name: "sshKeys: one public key is accepted", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{key}}},
		{name: "sshKeys: more than one key is rejected", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{key, otherKey}}, wantField: "spec.sshKeys"},
		{name: "sshKeys: a private key is rejected", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{privateKey}}, wantField: "spec.sshKeys[0]"},
		{name: "sshKeys: two keys in one string are rejected", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{key + "\n" + otherKey}}, wantField: "spec.sshKeys[0]"},
		{name: "sshKeys: authorized_keys options are rejected", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{`command="/bin/sh" ` + key}}, wantField: "spec.sshKeys[0]"},
		{name: "sshKeys: a GitHub key reference is rejected", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{"github:someone"}}, wantField: "spec.sshKeys[0]"},
		{name: "sshKeys: garbage is rejected", spec: bootstrapv1.KairosConfigSpec{SSHKeys: []string{"ssh-ed25519 not-base64"}}, wantField: "spec.sshKeys[0]"},

		{name: "nodeLabels: ordinary labels are accepted", spec: bootstrapv1.KairosConfigSpec{NodeLabels: map[string]string{"example.com/tier": "batch", "node.kubernetes.io/pool": "a", "topology.kubernetes.io/zone": "z1"}}},
		{name: "nodeLabels: a label the kubelet may not set is rejected", spec: bootstrapv1.KairosConfigSpec{NodeLabels: map[string]string{"node-role.kubernetes.io/worker": ""}}, wantField: "spec.nodeLabels[node-role.kubernetes.io/worker]"},
		{name: "nodeLabels: a k8s.io label is rejected", spec: bootstrapv1.KairosConfigSpec{NodeLabels: map[string]string{"example.k8s.io/x": "y"}}, wantField: "spec.nodeLabels[example.k8s.io/x]"},
		{name: "nodeLabels: a malformed value is rejected", spec: bootstrapv1.KairosConfigSpec{NodeLabels: map[string]string{"a": "b\nc: d"}}, wantField: "spec.nodeLabels"},

		{name: "nodeTaints: a valid taint is accepted", spec: bootstrapv1.KairosConfigSpec{NodeTaints: []bootstrapv1.NodeTaint{{Key: "example.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}},
		{name: "nodeTaints: the uninitialized taint is the provider's", spec: bootstrapv1.KairosConfigSpec{NodeTaints: []bootstrapv1.NodeTaint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}}, wantField: "spec.nodeTaints[0].key"},
		{name: "nodeTaints: an unknown effect is rejected", spec: bootstrapv1.KairosConfigSpec{NodeTaints: []bootstrapv1.NodeTaint{{Key: "k", Effect: "Sometimes"}}}, wantField: "spec.nodeTaints[0].effect"},
		{name: "nodeTaints: a malformed key is rejected", spec: bootstrapv1.KairosConfigSpec{NodeTaints: []bootstrapv1.NodeTaint{{Key: "a b", Effect: corev1.TaintEffectNoSchedule}}}, wantField: "spec.nodeTaints[0].key"},
		{name: "nodeTaints: duplicates are rejected", spec: bootstrapv1.KairosConfigSpec{NodeTaints: []bootstrapv1.NodeTaint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}, {Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}}, wantField: "spec.nodeTaints[1]"},

		{name: "kubeletExtraArgs: an ordinary flag is accepted", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "max-pods", Value: "200"}}}},
		{name: "kubeletExtraArgs: provider-id is the provider's", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "provider-id", Value: "x"}}}, wantField: "spec.kubeletExtraArgs[0].name"},
		{name: "kubeletExtraArgs: node-labels has its own field", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "node-labels", Value: "a=b"}}}, wantField: "spec.kubeletExtraArgs[0].name"},
		{name: "kubeletExtraArgs: leading dashes are rejected", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "--max-pods", Value: "1"}}}, wantField: "spec.kubeletExtraArgs[0].name"},
		{name: "kubeletExtraArgs: a newline in a value is rejected", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "v", Value: "1\n2"}}}, wantField: "spec.kubeletExtraArgs[0].value"},
		{name: "kubeletExtraArgs: template delimiters are rejected", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "v", Value: "{{ .Values }}"}}}, wantField: "spec.kubeletExtraArgs[0].value"},
		{name: "kubeletExtraArgs: duplicates are rejected", spec: bootstrapv1.KairosConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "v", Value: "1"}, {Name: "v", Value: "2"}}}, wantField: "spec.kubeletExtraArgs[1].name"},

		{name: "files: inline content is accepted", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "{{ hi }}\n", Permissions: "0644", Owner: "root:root"}}}},
		{name: "files: content from a Secret is accepted", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/app/token", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "s", Key: "k"}}, Permissions: "0640"}}}},
		{name: "files: content from a Secret may not be world-readable", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/app/token", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "s", Key: "k"}}, Permissions: "0644"}}}, wantField: "spec.files[0].permissions"},
		{name: "files: content and contentFrom are exclusive", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/a", Content: "x", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "s", Key: "k"}}}}}, wantField: "spec.files[0].contentFrom"},
		{name: "files: a relative path is rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "etc/a"}}}, wantField: "spec.files[0].path"},
		{name: "files: a path with .. is rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/../root/.ssh/authorized_keys"}}}, wantField: "spec.files[0].path"},
		{name: "files: a path with a newline is rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/a\n- path: /b"}}}, wantField: "spec.files[0].path"},
		{name: "files: the kubelet kubeconfig is the join's", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/kubernetes/kubelet.conf"}}}, wantField: "spec.files[0].path"},
		{name: "files: the sentinel directory is the join's", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/run/cluster-api/bootstrap-success.complete"}}}, wantField: "spec.files[0].path"},
		{name: "files: the join configuration directory is the join's", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/run/kubeadm"}}}, wantField: "spec.files[0].path"},
		{name: "files: a malformed mode is rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/a", Permissions: "0999"}}}, wantField: "spec.files[0].permissions"},
		{name: "files: a malformed owner is rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/a", Owner: "root;rm"}}}, wantField: "spec.files[0].owner"},
		{name: "files: duplicate paths are rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/a"}, {Path: "/etc/a"}}}, wantField: "spec.files[1].path"},
		{name: "files: too much inline content is rejected", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{
			{Path: "/a", Content: strings.Repeat("x", 65536)}, {Path: "/b", Content: strings.Repeat("x", 65536)},
			{Path: "/c", Content: strings.Repeat("x", 65536)}, {Path: "/d", Content: strings.Repeat("x", 65536)}, {Path: "/e", Content: "x"},
		}}, wantField: "spec.files"},

		{name: "joinTimeouts: in range is accepted", spec: bootstrapv1.KairosConfigSpec{JoinTimeouts: bootstrapv1.JoinTimeouts{DiscoverySeconds: ptr.To[int32](300)}}},
		{name: "joinTimeouts: zero is rejected", spec: bootstrapv1.KairosConfigSpec{JoinTimeouts: bootstrapv1.JoinTimeouts{DiscoverySeconds: ptr.To[int32](0)}}, wantField: "spec.joinTimeouts.discoverySeconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateSpec(&tt.spec, field.NewPath("spec"))
			if tt.wantField == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			for _, e := range errs {
				if e.Field == tt.wantField {
					return
				}
			}
			t.Fatalf("want an error on %s, got %v", tt.wantField, errs)
		})
	}
}

func TestValidateSpecNeverEchoesAKey(t *testing.T) {
	_, privateKey := sshkeystest.KeyPair()
	errs := ValidateSpec(&bootstrapv1.KairosConfigSpec{SSHKeys: []string{privateKey}}, field.NewPath("spec"))
	if len(errs) == 0 || strings.Contains(errs.ToAggregate().Error(), "PRIVATE KEY") {
		t.Fatalf("a private key must be rejected without being quoted back: %v", errs)
	}
}

// TestPrivateKeyFoldedIntoAPublicKeyIsForbidden: a valid public key whose
// comment carries a bare base64 PKCS#8 private key parses as a public key,
// and is still refused as a private key.
func TestPrivateKeyFoldedIntoAPublicKeyIsForbidden(t *testing.T) {
	public, _ := sshkeystest.KeyPair()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	folded := strings.TrimSpace(public) + " " + base64.StdEncoding.EncodeToString(der)
	errs := ValidateSpec(&bootstrapv1.KairosConfigSpec{SSHKeys: []string{folded}}, field.NewPath("spec"))
	if len(errs) != 1 || errs[0].Type != field.ErrorTypeForbidden || errs[0].Field != "spec.sshKeys[0]" {
		t.Fatalf("want spec.sshKeys[0] forbidden, got %v", errs)
	}
	if strings.Contains(errs.ToAggregate().Error(), base64.StdEncoding.EncodeToString(der)) {
		t.Fatalf("the refusal echoes the key: %v", errs)
	}
}

// TestSSHKeysFollowThePoolPolicy: KairosConfig spec.sshKeys is where a
// guest's key is set, and it applies the pool's Kairos policy with the
// project's one detector: the same errors, for the same keys, as the pool
// webhook's (an armoured Ed25519 key, a public key with the private key in
// its comment, two keys, a valid key, none).
func TestSSHKeysFollowThePoolPolicy(t *testing.T) {
	public, private := sshkeystest.KeyPair()
	second, _ := sshkeystest.KeyPair()
	armoured := sshkeystest.EncodedPrivateKeys()["ed25519/openssh-pem"]
	inComment := public + " " + strings.ReplaceAll(private, "\n", "")
	path := field.NewPath("spec", "sshKeys")
	for name, tc := range map[string]struct {
		keys   []string
		refuse bool
	}{
		"an armoured Ed25519 private key":                  {[]string{armoured}, true},
		"a public key with the private key in its comment": {[]string{inComment}, true},
		"two keys":       {[]string{public, second}, true},
		"one public key": {[]string{public}, false},
		"no key":         {[]string{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := ValidateSpec(&bootstrapv1.KairosConfigSpec{SSHKeys: tc.keys}, field.NewPath("spec"))
			g.Expect(got).To(Equal(wcvalidation.ValidateSSHKeys(workerclassv1.BootstrapKairos, tc.keys, path)))
			g.Expect(got).To(HaveLen(map[bool]int{true: 1, false: 0}[tc.refuse]))
			for _, err := range got {
				g.Expect(err.Error()).NotTo(ContainSubstring("PRIVATE KEY"))
			}
		})
	}
}
