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
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// externalCRD is a CRD of another project that the generated objects or
// clusterctl need, read from that project's Go module at a pinned version
// (the module proxy serves these versions; the files are the projects' own
// generated CRDs, not copies).
type externalCRD struct {
	module, version string
	files           []string
}

var externalCRDs = []externalCRD{
	{
		// clusterctl init skips installing cert-manager when its API
		// answers, and the components' Issuer and Certificate need it.
		module: "github.com/cert-manager/cert-manager", version: "v1.19.1",
		files: []string{"deploy/crds/cert-manager.io_certificates.yaml", "deploy/crds/cert-manager.io_issuers.yaml"},
	},
	{
		// The default flavor's hosted control plane, and the topology
		// flavors' ClusterClasses' template of it.
		module: "github.com/clastix/cluster-api-control-plane-provider-kamaji", version: "v0.15.2",
		files: []string{"config/crd/bases/controlplane.cluster.x-k8s.io_kamajicontrolplanes.yaml", "config/crd/bases/controlplane.cluster.x-k8s.io_kamajicontrolplanetemplates.yaml"},
	},
	{
		// The talos flavor's bootstrap template.
		module: "github.com/siderolabs/cluster-api-bootstrap-provider-talos", version: "v0.6.7",
		files: []string{"config/crd/bases/bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml", "config/crd/bases/bootstrap.cluster.x-k8s.io_talosconfigs.yaml"},
	},
}

// externalCRDFiles downloads the modules into the module cache (a no-op
// when they are there) and returns the CRD files.
func externalCRDFiles(t *testing.T) []string {
	t.Helper()
	return crdFiles(t, externalCRDs...)
}

// crdFiles downloads the modules of crds into the module cache (a no-op
// when they are there) and returns their CRD files.
func crdFiles(t *testing.T, crds ...externalCRD) []string {
	t.Helper()
	var files []string
	for _, crd := range crds {
		// Outside this module, so go.mod and go.sum stay untouched.
		out := run(t, []string{"GOFLAGS=", "GOWORK=off"}, t.TempDir(), "go", "mod", "download", "-json", crd.module+"@"+crd.version)
		var m struct{ Dir, Error string }
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("go mod download %s@%s: %v", crd.module, crd.version, err)
		}
		if m.Error != "" || m.Dir == "" {
			t.Fatalf("go mod download %s@%s: %s", crd.module, crd.version, m.Error)
		}
		for _, f := range crd.files {
			path := filepath.Join(m.Dir, f)
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%s@%s has no %s: %v", crd.module, crd.version, f, err)
			}
			files = append(files, path)
		}
	}
	return files
}
