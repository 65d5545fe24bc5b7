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

// TestGPUErrors: a class-based template's pool GPUs, which drive the
// class's GPU rules, are the GPUs its machines get: the instancetype's when
// it attaches any (a VM GPU beside them is instancetype.Conflicts', run by
// the webhooks and the resolution alike), else the VM's.
func TestGPUErrors(t *testing.T) {
	const a10, l40 = "nvidia.com/GA102GL_A10", "nvidia.com/AD102GL_L40S"
	withGPU := &instancetypev1beta1.VirtualMachineInstancetypeSpec{GPUs: []kubevirtv1.GPU{{Name: "gpu1", DeviceName: a10}}}
	withoutGPU := &instancetypev1beta1.VirtualMachineInstancetypeSpec{}
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
		it       *instancetypev1beta1.VirtualMachineInstancetypeSpec
		fields   []string
	}{
		{"the pool lists the instancetype's GPU", template("kairos", []string{a10}, nil), withGPU, nil},
		{"the pool misses the instancetype's GPU", template("kairos", nil, nil), withGPU, []string{"spec.template.spec.workerClass.gpus"}},
		{"the pool lists a GPU the machines do not get", template("kairos", []string{a10, l40}, nil), withGPU, []string{"spec.template.spec.workerClass.gpus"}},
		{"the pool lists the VM's GPUs beside an instancetype without GPUs", template("kairos", []string{l40}, []string{l40}), withoutGPU, nil},
		{"the pool misses the VM's GPU beside an instancetype without GPUs", template("kairos", nil, []string{l40}), withoutGPU, []string{"spec.template.spec.workerClass.gpus"}},
		{"VM GPUs beside the instancetype's are not what the machines get", template("kairos", []string{a10, l40}, []string{l40}), withGPU, []string{"spec.template.spec.workerClass.gpus"}},
		{"a classless template has no pool GPUs to match", template("", nil, []string{l40}), withoutGPU, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			var fields []string
			for _, e := range gpuErrors(c.template, c.it) {
				fields = append(fields, e.Field)
			}
			g.Expect(fields).To(Equal(c.fields))
		})
	}
}
