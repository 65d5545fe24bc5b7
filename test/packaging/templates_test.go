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
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// variableUse matches a clusterctl variable, ${NAME} or ${NAME:=default}.
var variableUse = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(:=([^}]*))?\}`)

// templateFiles returns the cluster templates and their flavor names ("" for
// cluster-template.yaml).
func templateFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "cluster-template*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	flavors := map[string]string{}
	for _, f := range files {
		flavor := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "cluster-template"), ".yaml")
		flavors[strings.TrimPrefix(flavor, "-")] = f
	}
	return flavors
}

// TestTemplatesDocumentEveryVariable checks that each flavor's header
// comment lists every variable the flavor uses, and that a variable used
// more than once always has the same default (clusterctl takes the first).
func TestTemplatesDocumentEveryVariable(t *testing.T) {
	flavors := templateFiles(t, filepath.Join(repoRoot, "templates"))
	NewWithT(t).Expect(flavors).To(HaveKey(""), "a default flavor, cluster-template.yaml")
	for _, flavor := range []string{"kairos", "talos", "kairos-fixed-image", "scale-from-zero"} {
		NewWithT(t).Expect(flavors).To(HaveKey(flavor), "the %s flavor", flavor)
	}
	for flavor, file := range flavors {
		t.Run(filepath.Base(file), func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(file) //nolint:gosec // A cluster template in the repository.
			g.Expect(err).NotTo(HaveOccurred())
			var header []string
			for _, line := range strings.Split(string(data), "\n") {
				if !strings.HasPrefix(line, "#") {
					break
				}
				header = append(header, line)
			}
			doc := strings.Join(header, "\n")
			_, documented, found := strings.Cut(doc, "Variables")
			g.Expect(found).To(BeTrue(), "the %q flavor's header has a Variables section", flavor)
			g.Expect(doc).To(ContainSubstring("clusterctl generate cluster"), "the header shows how to generate the flavor")
			defaults := map[string]string{}
			for _, m := range variableUse.FindAllStringSubmatch(string(data), -1) {
				name, hasDefault, def := m[1], m[2] != "", m[3]
				g.Expect(documented).To(MatchRegexp(`\b`+name+`\b`), "variable %s is documented in the header", name)
				if !hasDefault {
					continue
				}
				if prev, ok := defaults[name]; ok {
					g.Expect(def).To(Equal(prev), "variable %s has one default", name)
				}
				defaults[name] = def
			}
		})
	}
}
