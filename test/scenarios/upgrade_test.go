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

package scenarios

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestClassUpgradeRollsOutTheNewImage: the hoster publishes a new class
// with a fixed image; a new template naming it replaces the pool's
// template in the MachineDeployment, which rolls out: every Machine is
// replaced and every VM boots the new image.
func TestClassUpgradeRollsOutTheNewImage(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	before := poolOf(w).expectJoined(t, 2)

	class := &workerclassv1.WorkerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "kairos-tenant-v1-36-3-r2"},
		Spec: workerclassv1.WorkerClassSpec{
			Bootstrap: workerclassv1.BootstrapKairos,
			Image:     &workerclassv1.FixedImage{KubernetesVersion: "v1.36.3", Reference: customImage},
		},
	}
	g.Expect(h.Client.Create(ctx, class)).To(Succeed())
	t.Cleanup(func() { _ = h.Client.Delete(context.Background(), class) })
	r2 := only(t, poolOf(w).render(t, map[string]string{"WORKER_CLASS": class.Name, "TEMPLATE_REVISION": "r2"}), "KubeVirtMachineTemplate")
	g.Expect(h.Apply(ctx, []unstructured.Unstructured{r2})).To(Succeed())

	md := &clusterv1.MachineDeployment{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: w.Key.Name + "-kairos"}, md)).To(Succeed())
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.InfrastructureRef.Name = r2.GetName()
	g.Expect(h.Client.Patch(ctx, md, patch)).To(Succeed())

	expectReplacedOnto(t, w, before, customImage)
	for _, n := range poolOf(w).nodes(g) {
		g.Expect(n.Status.NodeInfo.OSImage).To(Equal("Tenant Kairos v3.5.3"))
	}
	expectNoOrphans(t, w)
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokens(g, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
}

// TestPlatformChangesRollNothingOut: changing the platform default class,
// the Kubernetes patch map and the platform Kairos image changes what new
// templates and new pools resolve to, but no running pool: the templates in
// use stay frozen and no Machine is replaced. A pool stored before the
// default changed keeps its class.
func TestPlatformChangesRollNothingOut(t *testing.T) {
	// Not parallel: it changes the platform configuration every pool reads.
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	before := poolOf(w).expectJoined(t, 2)
	template := &infrav1.KubeVirtMachineTemplate{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: w.Key.Name + "-kairos-r1"}, template)).To(Succeed())
	frozen := template.Status.Resolved.DeepCopy()
	g.Expect(frozen.KubernetesVersion).To(Equal("v1.36.3"))
	storedPool := envtest.NewPool(w.Key.Namespace, "stored", map[string]any{"cluster": w.Key.Name, "version": "v1.36"})
	g.Expect(h.Client.Create(ctx, storedPool)).To(Succeed())
	storedClass, _, _ := unstructured.NestedString(storedPool.Object, "spec", "workerClassName")
	g.Expect(storedClass).To(Equal(workerclassv1.TalosClassName), "admission stores the platform default")

	original := &workerclassv1.WorkerPlatform{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Name: workerclassv1.PlatformName}, original)).To(Succeed())
	t.Cleanup(func() {
		g.Expect(h.ConfigurePlatform(context.Background(), func(p *workerclassv1.WorkerPlatformSpec) { *p = original.Spec })).To(Succeed())
	})
	g.Expect(h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.DefaultClass = workerclassv1.KairosClassName
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: "v1.36.4"}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: rebuiltImage}}
	})).To(Succeed())

	// The change is live: a new template resolves to the new patch and image.
	r2 := only(t, poolOf(w).render(t, map[string]string{"TEMPLATE_REVISION": "r2"}), "KubeVirtMachineTemplate")
	g.Expect(h.Apply(ctx, []unstructured.Unstructured{r2})).To(Succeed())
	g.Eventually(func(g Gomega) {
		t := &infrav1.KubeVirtMachineTemplate{}
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: r2.GetName()}, t)).To(Succeed())
		g.Expect(t.Status.Resolved).NotTo(BeNil())
		g.Expect(t.Status.Resolved.KubernetesVersion).To(Equal("v1.36.4"))
		g.Expect(t.Status.Resolved.Image.ContainerDisk.Reference).To(Equal(rebuiltImage))
	}, timeout, poll).Should(Succeed())

	// But nothing in use moves.
	g.Consistently(func(g Gomega) {
		ms := poolOf(w).machines(g)
		g.Expect(machineUIDs(ms)).To(ConsistOf(machineUIDs(before)))
		for _, m := range ms {
			g.Expect(m.DeletionTimestamp.IsZero()).To(BeTrue())
			vm := &kubevirtv1.VirtualMachine{}
			g.Expect(h.Client.Get(ctx, vmKey(m), vm)).To(Succeed())
			g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ContainerDisk.Image", platformImage)))
		}
		sets := &clusterv1.MachineSetList{}
		g.Expect(h.Client.List(ctx, sets, client.InNamespace(w.Key.Namespace))).To(Succeed())
		g.Expect(sets.Items).To(HaveLen(1))
		current := &infrav1.KubeVirtMachineTemplate{}
		g.Expect(h.Client.Get(ctx, client.ObjectKeyFromObject(template), current)).To(Succeed())
		g.Expect(current.Status.Resolved).To(Equal(frozen))
		stored := storedPool.DeepCopy()
		g.Expect(h.Client.Get(ctx, client.ObjectKeyFromObject(storedPool), stored)).To(Succeed())
		class, _, _ := unstructured.NestedString(stored.Object, "spec", "workerClassName")
		g.Expect(class).To(Equal(workerclassv1.TalosClassName))
	}, 10*time.Second, time.Second).Should(Succeed())
	expectNoOrphans(t, w)
}

// TestInPlaceBootstrapFamilySwitchIsRefused: a running Kairos pool cannot be
// switched to Talos in place, neither through the pool API nor by changing
// the class of the template it runs.
func TestInPlaceBootstrapFamilySwitchIsRefused(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "1"})
	before := poolOf(w).expectJoined(t, 1)

	kairosPool := envtest.NewPool(w.Key.Namespace, "workers", map[string]any{
		"cluster": w.Key.Name, "workerClassName": workerclassv1.KairosClassName, "version": "v1.36",
	})
	g.Expect(h.Client.Create(ctx, kairosPool)).To(Succeed())
	g.Expect(unstructured.SetNestedField(kairosPool.Object, workerclassv1.TalosClassName, "spec", "workerClassName")).To(Succeed())
	err := h.Client.Update(ctx, kairosPool)
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "the pool switch was not refused: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("workerClassName"))

	template := &infrav1.KubeVirtMachineTemplate{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: w.Key.Name + "-kairos-r1"}, template)).To(Succeed())
	template.Spec.Template.Spec.WorkerClass.Name = workerclassv1.TalosClassName
	err = h.Client.Update(ctx, template)
	g.Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "the template switch was not refused: %v", err)

	// Nothing moved.
	g.Consistently(func(g Gomega) {
		g.Expect(machineUIDs(poolOf(w).machines(g))).To(ConsistOf(machineUIDs(before)))
	}, 3*time.Second, poll).Should(Succeed())
	expectNoOrphans(t, w)
}

// only returns the one object of a kind.
func only(t *testing.T, objs []unstructured.Unstructured, kind string) unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s in the template", kind)
	return unstructured.Unstructured{}
}

// expectReplacedOnto waits until every Machine of before is replaced, the
// two new ones have joined and booted clean, and each new VM boots image.
// The rollout replaces one Machine at a time (maxSurge 1): each replacement
// gets the suite's timeout.
func expectReplacedOnto(t *testing.T, w *harness.WorkloadCluster, before []clusterv1.Machine, image string) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		for _, m := range poolOf(w).machines(g) {
			g.Expect(machineUIDs(before)).NotTo(ContainElement(m.UID), "Machine %s was not replaced", m.Name)
		}
	}, time.Duration(len(before))*timeout, poll).Should(Succeed(), func() string { return describe(w) })
	after := poolOf(w).expectJoined(t, 2)
	expectBootsClean(g, after)
	for _, m := range after {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(context.Background(), vmKey(m), vm)).To(Succeed())
		g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ContainerDisk.Image", image)))
	}
}
