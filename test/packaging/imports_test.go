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
	"strings"
	"testing"
)

// TestBootstrapImportsNoInfrastructureProvider: the bootstrap provider
// reads the infrastructure provider only through internal/contract (the
// providerID format and the template's field paths), as Cluster API's
// kubeadm bootstrap provider reads infrastructure objects only through its
// contract package. A bootstrap package (tests aside) that imports an
// infrastructure package, directly or through another package, fails here.
func TestBootstrapImportsNoInfrastructureProvider(t *testing.T) {
	infrastructure := modulePath + "/infrastructure/"
	out := run(t, nil, repoRoot, "go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./bootstrap/...")
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], modulePath+"/") {
			continue
		}
		for _, imported := range fields[1:] {
			if strings.HasPrefix(imported, infrastructure) {
				t.Errorf("%s imports %s: the bootstrap provider reads the infrastructure provider through internal/contract only", fields[0], imported)
			}
		}
	}
}
