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

package workerclass_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// cozystackPoolSpec reads the spec of a pool of test/cozystack/pools,
// which follow Cozystack's own defaults and samples.
func cozystackPoolSpec(g Gomega, name string) map[string]any {
	data, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "test", "cozystack", "pools", name)) //nolint:gosec // A fixture of the repository.
	g.Expect(err).NotTo(HaveOccurred())
	obj := map[string]any{}
	g.Expect(yaml.Unmarshal(data, &obj)).To(Succeed())
	return obj["spec"].(map[string]any)
}

// Cozystack's pools as its API serves them, through the apiserver (whose
// pool schema writes Cozystack's defaults, as Cozystack's does) and the
// pool webhooks.
func TestCozystackPools(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)

	t.Run("a pool that gives only its cluster gets Cozystack's defaults and the default class", func(t *testing.T) {
		g := NewWithT(t)
		pool, err := createPool(t, ns, "example-bare", map[string]any{"cluster": "example"})
		g.Expect(err).NotTo(HaveOccurred())
		expectClass(g, pool, "talos")
		got := getPool(g, pool)
		version, _, _ := unstructured.NestedString(got.Object, "spec", "talos", "version")
		g.Expect(version).To(Equal("v1.13.6"), "the pool schema wrote Cozystack's default")
	})
	t.Run("a pool that gives its cluster and the kairos class holds no Talos settings", func(t *testing.T) {
		g := NewWithT(t)
		pool, err := createPool(t, ns, "example-bare-kairos", map[string]any{"cluster": "example", "workerClassName": "kairos"})
		g.Expect(err).NotTo(HaveOccurred())
		expectClass(g, pool, "kairos")
	})
	for file, class := range map[string]string{
		"default-talos.yaml":  "talos",
		"default-kairos.yaml": "kairos",
		"talos-mirrors.yaml":  "talos",
		"every-field.yaml":    "talos",
	} {
		t.Run(file, func(t *testing.T) {
			g := NewWithT(t)
			pool, err := createPool(t, ns, "cozystack-"+filepath.Base(file[:len(file)-len(".yaml")]), cozystackPoolSpec(g, file))
			g.Expect(err).NotTo(HaveOccurred())
			expectClass(g, pool, class)
		})
	}
	spec := cozystackPoolSpec(g, "talos-mirrors.yaml")
	spec["workerClassName"] = "kairos"
	_, err := createPool(t, ns, "mirrored-kairos", spec)
	g.Expect(err).To(MatchError(ContainSubstring("spec.talos.registryMirrors: Forbidden: Talos settings are not Kairos configuration")))

	spec = cozystackPoolSpec(g, "talos-mirrors.yaml")
	spec["registryMirrors"] = map[string]any{"docker.io": map[string]any{"endpoints": []any{"https://mirror.example.com"}}}
	_, err = createPool(t, ns, "mirrored-twice", spec)
	g.Expect(err).To(MatchError(ContainSubstring("spec.talos.registryMirrors: Forbidden: differs from spec.registryMirrors")))
}
