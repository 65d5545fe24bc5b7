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
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// FuzzValidateMachineSpec feeds arbitrary machine specs (image references,
// URLs, PEM bundles, resource and network names) to the validation: it never
// panics, is deterministic, and every error names a field under spec.
func FuzzValidateMachineSpec(f *testing.F) {
	seeds := []infrav1.KubeVirtMachineSpec{
		spec(),
		spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"}}
		}),
		spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "golden", Name: "talos"}}
			s.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}}, {Name: "vlan", Multus: &infrav1.MultusNetwork{NetworkName: "ns/vlan", Default: true}}}
			s.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10"}}
		}),
	}
	for _, s := range seeds {
		data, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s infrav1.KubeVirtMachineSpec
		if json.Unmarshal(data, &s) != nil {
			t.Skip("not JSON of a KubeVirtMachineSpec")
		}
		path := field.NewPath("spec")
		errs := ValidateMachineSpec(&s, path)
		if !reflect.DeepEqual(errs, ValidateMachineSpec(&s, path)) {
			t.Fatal("validation is not deterministic")
		}
		for _, e := range errs {
			if len(e.Field) < len("spec") || e.Field[:4] != "spec" {
				t.Fatalf("error outside spec: %v", e)
			}
		}
	})
}
