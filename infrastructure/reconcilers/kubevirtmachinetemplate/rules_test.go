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
	"strings"
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
	"sigs.k8s.io/controller-runtime/pkg/event"

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
// zero, only when KubeVirt runs its VMs: the webhooks' rules (the
// instancetype's and preference's), then the installed KubeVirt's feature
// gates and permitted devices, each refusal naming the field and, for
// KubeVirt's configuration, the gate or device.
func TestKubeVirtRules(t *testing.T) {
	for _, c := range rulecases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl := resolveOnce(t, *c.Spec.DeepCopy(), append(c.Objects("ns"), c.KubeVirtCR())...)
			cond := conditions.Get(tmpl, infrav1.ResolvedCondition)
			g.Expect(cond).NotTo(BeNil())
			switch {
			case c.Field == "":
				g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
				g.Expect(tmpl.Status.Resolved).NotTo(BeNil())
				g.Expect(tmpl.Status.Capacity).NotTo(BeEmpty())
				return
			case c.Configuration:
				g.Expect(cond.Reason).To(Equal(infrav1.KubeVirtFeatureNotEnabledReason), cond.Message)
				g.Expect(cond.Message).To(ContainSubstring("KubeVirt kubevirt/kubevirt"))
			default:
				g.Expect(cond.Reason).To(Equal(infrav1.ResolutionFailedReason), cond.Message)
			}
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Message).To(HavePrefix("spec.template.spec." + c.Field + ": "))
			g.Expect(tmpl.Status.Resolved).To(BeNil())
			g.Expect(tmpl.Status.Capacity).To(BeEmpty(), "no capacity the autoscaler could scale from zero into")
		})
	}
}

func TestKubeVirtConfigurationMessages(t *testing.T) {
	cases := map[string]rulecases.Case{}
	for _, c := range rulecases.Cases() {
		cases[c.Name] = c
	}
	for name, want := range map[string]string{
		"a host device without the HostDevices gate": "spec.template.spec.hostDevices: Forbidden: KubeVirt kubevirt/kubevirt does not enable the HostDevices feature gate " +
			"(spec.configuration.developerConfiguration.featureGates), and virt-api refuses a VM with host devices without it",
		"a GPU KubeVirt does not permit": "spec.template.spec.gpus[0].deviceName: Forbidden: KubeVirt kubevirt/kubevirt does not permit GPU nvidia.com/AD102GL_L40S " +
			"(spec.configuration.permittedHostDevices), and virt-controller cannot start a VM that asks for it",
		"a preference's arm64 without the MultiArchitecture gate": "spec.template.spec.preference.name: Forbidden: KubeVirt kubevirt/kubevirt runs amd64 and does not enable " +
			"the MultiArchitecture feature gate (spec.configuration.developerConfiguration.featureGates), and virt-api refuses a VM of architecture arm64 without it",
	} {
		t.Run(name, func(t *testing.T) {
			c := cases[name]
			tmpl := resolveOnce(t, *c.Spec.DeepCopy(), append(c.Objects("ns"), c.KubeVirtCR())...)
			NewWithT(t).Expect(conditions.Get(tmpl, infrav1.ResolvedCondition).Message).To(Equal(want))
		})
	}

	t.Run("without a deployed KubeVirt CR a template that needs its configuration waits", func(t *testing.T) {
		g := NewWithT(t)
		c := cases["a host device with the HostDevices gate"]
		undeployed := c.KubeVirtCR()
		undeployed.Status.Phase = ""
		tmpl := resolveOnce(t, *c.Spec.DeepCopy(), undeployed)
		cond := conditions.Get(tmpl, infrav1.ResolvedCondition)
		g.Expect(cond.Reason).To(Equal(infrav1.KubeVirtFeatureNotEnabledReason))
		g.Expect(cond.Message).To(Equal("spec.template.spec: Forbidden: the infrastructure cluster has no deployed KubeVirt CR, " +
			"whose feature gates and permitted host devices decide whether KubeVirt runs this machine's host devices"))
	})
	t.Run("a template that needs none of it resolves without a KubeVirt CR", func(t *testing.T) {
		g := NewWithT(t)
		c := cases["3 cores in sockets"]
		tmpl := resolveOnce(t, *c.Spec.DeepCopy(), c.Objects("ns")...)
		g.Expect(conditions.IsTrue(tmpl, infrav1.ResolvedCondition)).To(BeTrue())
	})
}

// TestKubeVirtConfigurationChanges: a change of the KubeVirt CR's
// configuration, phase or default architecture reconciles the unresolved
// templates (resolved ones are frozen and not even enqueued); its status'
// other churn does not.
func TestKubeVirtConfigurationChanges(t *testing.T) {
	g := NewWithT(t)
	kv := rulecases.Case{}.KubeVirtCR()
	changed := func(mutate func(*kubevirtv1.KubeVirt)) bool {
		newKV := kv.DeepCopy()
		mutate(newKV)
		return kubeVirtConfigChanged.Update(event.UpdateEvent{ObjectOld: kv, ObjectNew: newKV})
	}
	g.Expect(changed(func(kv *kubevirtv1.KubeVirt) {
		kv.Spec.Configuration.DeveloperConfiguration.FeatureGates = append(kv.Spec.Configuration.DeveloperConfiguration.FeatureGates, "MultiArchitecture")
	})).To(BeTrue())
	g.Expect(changed(func(kv *kubevirtv1.KubeVirt) { kv.Spec.Configuration.PermittedHostDevices = nil })).To(BeTrue())
	g.Expect(changed(func(kv *kubevirtv1.KubeVirt) { kv.Status.Phase = kubevirtv1.KubeVirtPhaseDeleting })).To(BeTrue())
	g.Expect(changed(func(kv *kubevirtv1.KubeVirt) { kv.Status.ObservedKubeVirtVersion = "v1.7.1" })).To(BeFalse())
	g.Expect(changed(func(kv *kubevirtv1.KubeVirt) {
		kv.Status.Conditions = []kubevirtv1.KubeVirtCondition{{Type: kubevirtv1.KubeVirtConditionAvailable}}
	})).To(BeFalse())

	resolved := &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "resolved", Namespace: "ns"},
		Status: infrav1.KubeVirtMachineTemplateStatus{Resolved: &infrav1.ResolvedMachine{ContentHash: strings.Repeat("a", 64)}}}
	waiting := &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: "ns"}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(resolved, waiting).Build()
	r := &Reconciler{Client: c}
	g.Expect(r.unresolvedTemplates(context.Background(), kv)).To(ConsistOf(
		ctrl.Request{NamespacedName: client.ObjectKeyFromObject(waiting)}))
}
