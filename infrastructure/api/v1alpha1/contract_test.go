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

package v1alpha1_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/contract"
)

// TestContractFieldPaths fails when a json tag moves under a path another
// provider reads: each path must resolve, in a populated template turned
// unstructured, to the value the typed field holds.
func TestContractFieldPaths(t *testing.T) {
	template := &infrav1.KubeVirtMachineTemplate{
		Spec: infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{
			Spec: infrav1.KubeVirtMachineSpec{
				WorkerClass:  &infrav1.WorkerClassSelection{Name: "spec-class"},
				GPUs:         []infrav1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}},
				Instancetype: &infrav1.InstancetypeReference{Name: "gn1.xlarge"},
			},
		}},
		Status: infrav1.KubeVirtMachineTemplateStatus{NodeLabels: map[string]string{"cluster-api/accelerator": "GA102GL_A10"}, Resolved: &infrav1.ResolvedMachine{
			WorkerClassName:        "resolved-class",
			Bootstrap:              workerclassv1.BootstrapKairos,
			KubernetesVersion:      "v1.33.1",
			KubernetesVersionMatch: workerclassv1.KubernetesVersionMatchMinor,
		}},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(template)
	if err != nil {
		t.Fatalf("converting the template: %v", err)
	}
	for _, c := range []struct {
		fields []string
		want   string
	}{
		{contract.TemplateWorkerClassField, "spec-class"},
		{contract.ResolvedWorkerClassField, "resolved-class"},
		{contract.ResolvedBootstrapField, string(workerclassv1.BootstrapKairos)},
		{contract.ResolvedKubernetesVersionField, "v1.33.1"},
		{contract.ResolvedKubernetesVersionMatchField, string(workerclassv1.KubernetesVersionMatchMinor)},
	} {
		got, found, err := unstructured.NestedFieldNoCopy(u, c.fields...)
		if err != nil || !found || got != c.want {
			t.Errorf("%s = %v (found %v, err %v), want %q", strings.Join(c.fields, "."), got, found, err, c.want)
		}
	}
	if gpus, found, err := unstructured.NestedSlice(u, contract.TemplateGPUsField...); err != nil || !found || len(gpus) != 1 {
		t.Errorf("%s = %v (found %v, err %v), want the one GPU", strings.Join(contract.TemplateGPUsField, "."), gpus, found, err)
	}
	if name, found, err := unstructured.NestedString(u, append(contract.TemplateInstancetypeField, "name")...); err != nil || !found || name != "gn1.xlarge" {
		t.Errorf("%s.name = %q (found %v, err %v), want gn1.xlarge", strings.Join(contract.TemplateInstancetypeField, "."), name, found, err)
	}
	if labels, found, err := unstructured.NestedStringMap(u, contract.NodeLabelsField...); err != nil || !found || labels["cluster-api/accelerator"] != "GA102GL_A10" {
		t.Errorf("%s = %v (found %v, err %v), want the GPU label", strings.Join(contract.NodeLabelsField, "."), labels, found, err)
	}
	resolved, found, err := unstructured.NestedFieldNoCopy(u, contract.ResolvedField...)
	if _, isMap := resolved.(map[string]any); err != nil || !found || !isMap {
		t.Errorf("%s = %v (found %v, err %v), want the resolved object", strings.Join(contract.ResolvedField, "."), resolved, found, err)
	}

	if got, want := infrav1.ProviderID("vm-1"), "kubevirt://vm-1"; got != want {
		t.Errorf("ProviderID(vm-1) = %q, want %q", got, want)
	}
}
