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

package kubevirtmachinetemplate

import (
	"testing"

	. "github.com/onsi/gomega"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestGPUErrors(t *testing.T) {
	const a10, l40 = "nvidia.com/GA102GL_A10", "nvidia.com/AD102GL_L40S"
	it := &instancetypev1beta1.VirtualMachineInstancetypeSpec{GPUs: []kubevirtv1.GPU{{Name: "gpu1", DeviceName: a10}}}
	template := func(class string, pool []string, vm []string) *infrav1.KubeVirtMachineTemplate {
		t := &infrav1.KubeVirtMachineTemplate{}
		if class != "" {
			t.Spec.Template.Spec.WorkerClass = &infrav1.WorkerClassSelection{Name: class}
		}
		t.Spec.Template.Spec.Instancetype = &infrav1.InstancetypeReference{Name: "gn1.xlarge"}
		for _, g := range pool {
			t.Spec.Template.Spec.WorkerClass.GPUs = append(t.Spec.Template.Spec.WorkerClass.GPUs, workerclassv1.GPU{Name: g})
		}
		for _, g := range vm {
			t.Spec.Template.Spec.GPUs = append(t.Spec.Template.Spec.GPUs, infrav1.GPU{Name: "extra", DeviceName: g})
		}
		return t
	}
	for _, c := range []struct {
		name     string
		template *infrav1.KubeVirtMachineTemplate
		fields   []string
	}{
		{"the pool lists the instancetype's GPU", template("kairos", []string{a10}, nil), nil},
		{"the pool lists the instancetype's and the VM's GPUs", template("kairos", []string{a10, l40}, []string{l40}), nil},
		{"the VM lists the instancetype's GPU again", template("kairos", []string{a10, a10}, []string{a10}), []string{"spec.template.spec.gpus[0].deviceName"}},
		{"the pool misses the instancetype's GPU", template("kairos", nil, nil), []string{"spec.template.spec.workerClass.gpus"}},
		{"the pool lists a GPU the machines do not get", template("kairos", []string{a10, l40}, nil), []string{"spec.template.spec.workerClass.gpus"}},
		{"a classless template has no pool GPUs to match", template("", nil, []string{l40}), nil},
		{"a classless template may not list the instancetype's GPU either", template("", nil, []string{a10}), []string{"spec.template.spec.gpus[0].deviceName"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			var fields []string
			for _, e := range gpuErrors(c.template, it) {
				fields = append(fields, e.Field)
			}
			g.Expect(fields).To(Equal(c.fields))
		})
	}
}
