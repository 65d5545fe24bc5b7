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
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/rulecases"
)

func instancetypeReader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := instancetypev1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// TestKubeVirtRules: the webhooks refuse a spec whose VM KubeVirt refuses
// once it applies the instancetype and preference, at the field that
// causes it, and accept the rest: what the installed KubeVirt's
// configuration decides is the template resolution's (the same table runs
// there, in the renderer and against virt-api).
func TestKubeVirtRules(t *testing.T) {
	ctx := context.Background()
	for _, c := range rulecases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			g := NewWithT(t)
			reader := instancetypeReader(t, c.Objects("ns")...)
			_, machineErr := (&KubeVirtMachine{Instancetypes: reader, Placement: rulecases.Placement()}).ValidateCreate(ctx, kvm("w", c.Spec))
			tmpl := &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers-r1", Namespace: "ns"},
				Spec: infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: *c.Spec.DeepCopy()}}}
			_, templateErr := (&KubeVirtMachineTemplate{Instancetypes: reader, Placement: rulecases.Placement()}).ValidateCreate(ctx, tmpl)
			if !c.SpecRefused() {
				g.Expect(machineErr).NotTo(HaveOccurred())
				g.Expect(templateErr).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(machineErr)).To(BeTrue(), "%v", machineErr)
			g.Expect(causes(machineErr)).To(ConsistOf("spec." + c.Field))
			g.Expect(apierrors.IsInvalid(templateErr)).To(BeTrue(), "%v", templateErr)
			g.Expect(causes(templateErr)).To(ConsistOf("spec.template.spec." + c.Field))
		})
	}

	t.Run("an instancetype or preference that does not exist is not checked", func(t *testing.T) {
		g := NewWithT(t)
		c := rulecases.Cases()[0]
		_, err := (&KubeVirtMachine{Instancetypes: instancetypeReader(t)}).ValidateCreate(ctx, kvm("w", c.Spec))
		g.Expect(err).NotTo(HaveOccurred())
	})
	t.Run("without a reader a spec that names an instancetype is refused", func(t *testing.T) {
		g := NewWithT(t)
		_, err := (&KubeVirtMachine{}).ValidateCreate(ctx, kvm("w", rulecases.Cases()[0].Spec))
		g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "%v", err)
	})
}

// causes are the fields of an Invalid error's causes.
func causes(err error) []string {
	var out []string
	if status, ok := err.(apierrors.APIStatus); ok && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			out = append(out, c.Field)
		}
	}
	return out
}
