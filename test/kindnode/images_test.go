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

package kindnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

func testSources(t *testing.T) Sources {
	t.Helper()
	return Sources{
		Bin: "/bin", Pause: "/pause", IptablesRoot: "/root", Out: t.TempDir(),
		Kubernetes: "v1.36.3", Etcd: "v3.6.16", CoreDNS: "v1.13.1",
	}
}

// TestKubeadmFindsEveryImageItRuns: the images kubeadm lists for the
// cluster configuration's ClusterConfiguration are those the node holds
// (the sandbox aside: containerd's configuration pins ours), so nothing is
// ever pulled. kubeadm itself does the naming, as kind's kubeadm init will.
func TestKubeadmFindsEveryImageItRuns(t *testing.T) {
	kubeadm, err := envtest.KubeadmBinary()
	if err != nil {
		t.Fatal(err)
	}
	s := testSources(t)
	config, err := s.ClusterConfig("localhost/kindest/node:v1.36.3-test")
	if err != nil {
		t.Fatal(err)
	}
	var cluster struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Networking struct {
			DisableDefaultCNI bool `json:"disableDefaultCNI"`
		} `json:"networking"`
		Nodes []struct {
			Role  string `json:"role"`
			Image string `json:"image"`
		} `json:"nodes"`
		KubeadmConfigPatches    []string `json:"kubeadmConfigPatches"`
		ContainerdConfigPatches []string `json:"containerdConfigPatches"`
	}
	if err := yaml.UnmarshalStrict([]byte(config), &cluster); err != nil {
		t.Fatalf("cluster configuration: %v\n%s", err, config)
	}
	if len(cluster.Nodes) != 1 || cluster.Nodes[0].Image != "localhost/kindest/node:v1.36.3-test" {
		t.Errorf("nodes: %+v", cluster.Nodes)
	}
	var clusterConfiguration string
	for _, p := range cluster.KubeadmConfigPatches {
		if strings.HasPrefix(p, "kind: ClusterConfiguration\n") {
			clusterConfiguration = p
		}
	}
	if clusterConfiguration == "" {
		t.Fatalf("no ClusterConfiguration patch in %q", cluster.KubeadmConfigPatches)
	}
	file := filepath.Join(t.TempDir(), "kubeadm.yaml")
	doc := "apiVersion: kubeadm.k8s.io/v1beta4\nkubernetesVersion: " + s.Kubernetes + "\n" + clusterConfiguration
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubeadm, "config", "images", "list", "--config", file).CombinedOutput() //nolint:gosec,noctx // The test's kubeadm; it ends on its own.
	if err != nil {
		t.Fatalf("kubeadm config images list: %v\n%s", err, out)
	}
	images, err := s.Images()
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, img := range images {
		held = append(held, img.Ref)
	}
	for _, ref := range strings.Fields(string(out)) {
		if strings.HasPrefix(ref, Repository+"/pause:") {
			continue
		}
		if !slices.Contains(held, ref) {
			t.Errorf("kubeadm runs %s, which the node does not hold (it holds %v)", ref, held)
		}
	}
	if !slices.Contains(held, PauseImage) {
		t.Errorf("the sandbox image %s is not held: %v", PauseImage, held)
	}
	if len(cluster.ContainerdConfigPatches) != 1 || !strings.Contains(cluster.ContainerdConfigPatches[0], `sandbox_image = "`+PauseImage+`"`) {
		t.Errorf("containerd does not pin the sandbox image: %q", cluster.ContainerdConfigPatches)
	}
}

func TestMissingSourcesAreNamed(t *testing.T) {
	s := testSources(t)
	s.IptablesRoot = ""
	if _, err := s.Images(); err == nil || !strings.Contains(err.Error(), "IptablesRoot") {
		t.Errorf("Images without a root: %v", err)
	}
	s = testSources(t)
	s.Bin, s.Out = "", ""
	for range 20 {
		if _, err := s.Images(); err == nil || err.Error() != "sources: Bin is empty" {
			t.Fatalf("Images without Bin and Out: %v, want the first empty field named", err)
		}
	}
	s = testSources(t)
	s.CoreDNS = ""
	if _, err := s.ClusterConfig("localhost/kindest/node:v1"); err == nil || !strings.Contains(err.Error(), "CoreDNS") {
		t.Errorf("ClusterConfig without CoreDNS: %v", err)
	}
}
