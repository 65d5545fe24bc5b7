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

package packaging

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// deprecatedKustomizeKeys are kustomization fields kustomize v5 deprecates,
// with what replaces them.
var deprecatedKustomizeKeys = map[string]string{
	"bases":                 "resources",
	"commonLabels":          "labels (with includeSelectors where selectors must follow)",
	"patchesStrategicMerge": "patches",
	"patchesJson6902":       "patches",
	"vars":                  "replacements",
	"imageTags":             "images",
}

// kustomizations returns every kustomization file under config/.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "config"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "kustomization.yaml" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestKustomizationsUseNoDeprecatedKeys checks every kustomization and
// component under config/ for fields kustomize v5 deprecates, and that each
// declares what it is.
func TestKustomizationsUseNoDeprecatedKeys(t *testing.T) {
	files := kustomizations(t)
	NewWithT(t).Expect(len(files)).To(BeNumerically(">=", 10), "the kustomizations under config/")
	for _, f := range files {
		rel, _ := filepath.Rel(repoRoot, f)
		t.Run(rel, func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(f) //nolint:gosec // A kustomization in the repository.
			g.Expect(err).NotTo(HaveOccurred())
			var k map[string]any
			g.Expect(yaml.Unmarshal(data, &k)).To(Succeed())
			for key, instead := range deprecatedKustomizeKeys {
				g.Expect(k).NotTo(HaveKey(key), "%s is deprecated; use %s", key, instead)
			}
			switch k["kind"] {
			case "Kustomization":
				g.Expect(k["apiVersion"]).To(Equal("kustomize.config.k8s.io/v1beta1"))
			case "Component":
				g.Expect(k["apiVersion"]).To(Equal("kustomize.config.k8s.io/v1alpha1"))
			default:
				t.Errorf("kind must be Kustomization or Component, got %v", k["kind"])
			}
		})
	}
}

// TestProviderDefaultsBuildWithoutWarnings builds what Tilt applies and
// checks that kustomize has nothing to warn about (it warns on deprecated
// fields anywhere in the tree, config/workerclass included).
func TestProviderDefaultsBuildWithoutWarnings(t *testing.T) {
	for _, p := range providers {
		t.Run(p.dir, func(t *testing.T) {
			g := NewWithT(t)
			out, stderr := buildKustomization(t, filepath.Join(repoRoot, "config", p.dir, "default"))
			g.Expect(stderr).To(BeEmpty(), "kustomize build prints no warnings")
			objs := decode(t, []byte(out))
			checkComponents(t, p, objs)
			g.Expect(deployment(t, objs).Spec.Replicas).To(HaveValue(Equal(int32(1))), "without a level the manager runs like level none")
		})
	}
}

// TestCRDKustomizationsListEveryCRD checks that each provider's
// crd/kustomization.yaml installs every CRD controller-gen writes.
func TestCRDKustomizationsListEveryCRD(t *testing.T) {
	for _, p := range providers {
		t.Run(p.dir, func(t *testing.T) {
			g := NewWithT(t)
			dir := filepath.Join(repoRoot, "config", p.dir, "crd")
			generated, err := filepath.Glob(filepath.Join(dir, "bases", "*.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(generated).NotTo(BeEmpty())
			data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml")) //nolint:gosec // A kustomization in the repository.
			g.Expect(err).NotTo(HaveOccurred())
			var k struct {
				Resources []string `json:"resources"`
			}
			g.Expect(yaml.Unmarshal(data, &k)).To(Succeed())
			var want []string
			for _, f := range generated {
				want = append(want, "bases/"+filepath.Base(f))
			}
			g.Expect(k.Resources).To(ConsistOf(want), "run 'make generate-%s' and list new CRDs in %s", p.dir, filepath.Join("config", p.dir, "crd", "kustomization.yaml"))
		})
	}
}

// buildKustomization runs kustomize build and returns its output and
// standard error.
func buildKustomization(t *testing.T, dir string) (string, string) {
	t.Helper()
	var stderr strings.Builder
	out, err := commandWithStderr(t.Context(), &stderr, tool(t, "kustomize"), "build", dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return out, stderr.String()
}
