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

package vmspec

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/rulecases"
)

// TestKubeVirtRules: the renderer refuses the specs the webhooks and the
// template's resolution refuse, as far as it knows the machine (the
// preference, not the instancetype, whose rules KubeVirt applies), at the
// same field; what it renders carries the spec's devices and the
// instancetype and preference matchers for KubeVirt to apply.
func TestKubeVirtRules(t *testing.T) {
	for _, c := range rulecases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			g := NewWithT(t)
			m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec = *c.Spec.DeepCopy() })
			in := input(m, *c.Spec.Image)
			in.Preference = c.Preference
			out, errs := Render(in)
			if c.RenderRefused() {
				g.Expect(out).To(BeNil())
				g.Expect(fields(errs)).To(ConsistOf("spec." + c.Field))
				return
			}
			g.Expect(errs).To(BeEmpty())
			vmi := out.VirtualMachine.Spec.Template.Spec
			g.Expect(vmi.Domain.Devices.GPUs).To(HaveLen(len(c.Spec.GPUs)))
			g.Expect(vmi.Domain.Devices.HostDevices).To(HaveLen(len(c.Spec.HostDevices)))
			g.Expect(out.VirtualMachine.Spec.Instancetype != nil).To(Equal(c.Spec.Instancetype != nil))
			g.Expect(out.VirtualMachine.Spec.Preference != nil).To(Equal(c.Spec.Preference != nil))
		})
	}
}

func fields(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}
