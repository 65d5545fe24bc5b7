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
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Fixed test values; none of them is a real secret.
const (
	testToken    = "abcdef.0123456789abcdef"
	testEndpoint = "10.0.0.1:6443"
	testCAHash   = "sha256:2c0f2a0b6d6b0f5e8e6c1f0d4a5b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b"
	testSSHKey   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGc0hrJbC4Vbb4HsGh6R1F8Jm7w0pXHk1Ei8T3JvS2mN tenant@example"
)

func minimalInput() Input {
	return Input{
		Hostname:          "pool-a-vm-7x2k9",
		ProviderID:        "kubevirt://pool-a-vm-7x2k9",
		APIServerEndpoint: testEndpoint,
		CACertHashes:      []string{testCAHash},
		Token:             testToken,
	}
}

// goldenCases are the renderings the issue names: minimal join, SSH key,
// labels and taints, extra files and a fixed custom image (a disk built
// with the Kairos kubeadm provider, joined through its cluster block).
func goldenCases() map[string]Input {
	withKey := minimalInput()
	withKey.SSHAuthorizedKey = testSSHKey

	labelsAndTaints := minimalInput()
	labelsAndTaints.NodeLabels = map[string]string{
		"node.kubernetes.io/pool":     "pool-a",
		"example.com/tier":            "batch",
		"kubelet.kubernetes.io/extra": "yes",
	}
	labelsAndTaints.NodeTaints = []corev1.Taint{
		{Key: "example.com/dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/spot", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	labelsAndTaints.KubeletExtraArgs = []Arg{{Name: "max-pods", Value: "200"}, {Name: "system-reserved", Value: "cpu=500m,memory=1Gi"}}

	files := minimalInput()
	files.Files = []File{
		{Path: "/etc/motd", Content: []byte("Managed by Cluster API.\n")},
		{Path: "/etc/containerd/conf.d/mirror.toml", Permissions: 0o600, Owner: "root:root",
			Content: []byte("[plugins]\n  template = \"{{ .Registry }}\"\n")},
		{Path: "/var/lib/rancher/blob.bin", Permissions: 0o640, Content: []byte{0x00, 0x01, 0xfe, 0xff, '\n'}},
	}

	fixed := minimalInput()
	fixed.Mode = bootstrapv1.JoinModeClusterProvider
	fixed.ClusterToken = "7f1c2c1e-43a1-4d4b-9a43-5a7c2d7d3c11"
	fixed.KubernetesVersion = "v1.35.6"
	fixed.SSHAuthorizedKey = testSSHKey
	fixed.NodeLabels = map[string]string{"example.com/image": "kairos-v1-35-6"}
	fixed.Timeouts = Timeouts{Discovery: 5 * time.Minute, TLSBootstrap: 2 * time.Minute}

	return map[string]Input{
		"minimal-join":       minimalInput(),
		"ssh-key":            withKey,
		"labels-and-taints":  labelsAndTaints,
		"extra-files":        files,
		"fixed-custom-image": fixed,
	}
}

func TestRenderGolden(t *testing.T) {
	for name, in := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			got, err := Render(in)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil { //nolint:gosec // A golden file in the repository, as readable as its neighbours.
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path) //nolint:gosec // The test's own golden file.
			if err != nil {
				t.Fatalf("reading %s (run with -update to create it): %v", path, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendering differs from %s (run with -update after checking the change):\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	in := goldenCases()["labels-and-taints"]
	first, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, first) {
			t.Fatal("two renders of the same input differ")
		}
	}
}
