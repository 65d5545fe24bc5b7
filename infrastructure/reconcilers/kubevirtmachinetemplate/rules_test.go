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
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/rulecases"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{infrav1.AddToScheme, clusterv1.AddToScheme, kubevirtv1.AddToScheme, instancetypev1beta1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// resolveOnce reconciles a classless template of spec against objs until
// it has tried to resolve it once, and returns it.
func resolveOnce(t *testing.T, spec infrav1.KubeVirtMachineSpec, objs ...client.Object) *infrav1.KubeVirtMachineTemplate {
	t.Helper()
	tmpl := &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers-r1", Namespace: "ns"},
		Spec: infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: spec}}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&infrav1.KubeVirtMachineTemplate{}).
		WithObjects(append(objs, tmpl)...).Build()
	r := &Reconciler{Client: c, Infrastructure: &infracluster.Cluster{Client: c, Reader: c}}
	// The first reconcile records Paused=False, the second resolves.
	for range 2 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tmpl)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(tmpl), tmpl); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestKubeVirtRules: a template resolves, with a capacity for scale from
// zero, only when KubeVirt runs its VMs once it applies the instancetype
// and preference (the webhooks' rule, which the instancetype or preference
// may have escaped by changing since); a refusal names the field.
func TestKubeVirtRules(t *testing.T) {
	for _, c := range rulecases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl := resolveOnce(t, *c.Spec.DeepCopy(), c.Objects("ns")...)
			cond := conditions.Get(tmpl, infrav1.ResolvedCondition)
			g.Expect(cond).NotTo(BeNil())
			if c.Field == "" {
				g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
				g.Expect(tmpl.Status.Resolved).NotTo(BeNil())
				g.Expect(tmpl.Status.Capacity).NotTo(BeEmpty())
				return
			}
			g.Expect(cond.Reason).To(Equal(infrav1.ResolutionFailedReason), cond.Message)
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Message).To(HavePrefix("spec.template.spec." + c.Field + ": "))
			g.Expect(tmpl.Status.Resolved).To(BeNil())
			g.Expect(tmpl.Status.Capacity).To(BeEmpty(), "no capacity the autoscaler could scale from zero into")
		})
	}
}
