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
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestInfrastructureNodeDrainEnds: the hoster drains the infrastructure
// node of a pool whose VMs have eviction strategy External. virt-api
// denies every eviction and leaves the VMs to the provider (KubeVirt's
// External contract); the provider hands each Machine to Cluster API by
// deleting it, so that Cluster API drains the guest's Node first, honouring
// its PodDisruptionBudgets, and only then deletes the VM, which ends the
// infrastructure node's drain; the MachineSet replaces the Machines. A Pod
// on one worker, guarded by a PodDisruptionBudget that allows no
// disruption, holds that worker's VM on the drained node until the budget
// goes: no pod on a worker dies without its budget.
func TestInfrastructureNodeDrainEnds(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	objs := poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	harness.EditMachineTemplates(objs, externalOn(drainNode))
	g.Expect(h.Apply(ctx, objs)).To(Succeed())
	before := poolOf(w).expectJoined(t, 2)

	// A workload on the first worker that may not be disrupted: a Pod
	// bound to its Node (no kubelet runs it, so the test reports it
	// running; a grace period of zero lets its eviction delete it at once)
	// and a budget that allows no disruption.
	guarded := before[0]
	workload := w.API.Client
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "guarded", Labels: map[string]string{"app": "guarded"}},
		Spec: corev1.PodSpec{
			NodeName:                      guarded.Status.NodeRef.Name,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.example.com/app:v1"}},
		},
	}
	g.Expect(workload.Create(ctx, pod)).To(Succeed())
	// Running and ready, as its kubelet would report it: the eviction API
	// lets a Pending Pod go whatever its budget says.
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	g.Expect(workload.Status().Update(ctx, pod)).To(Succeed())
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "guarded"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	g.Expect(workload.Create(ctx, budget)).To(Succeed())

	// kubectl drain: cordon, then evict every Pod on the node until none
	// is left.
	uncordon := cordon(t, g, drainNode)
	denied := 0
	launchersLeft := func(g Gomega) []string {
		left, refused := evictLaunchers(g, w.Key.Namespace, drainNode)
		denied += refused
		return left
	}

	// Both Machines are handed to Cluster API; the unguarded worker is
	// drained and its VM goes, the guarded one's drain waits for its
	// budget and its VM keeps running on the drained node.
	g.Eventually(func(g Gomega) {
		left := launchersLeft(g) // kubectl drain evicts on every pass
		for _, m := range before {
			got := &clusterv1.Machine{}
			err := h.Client.Get(ctx, client.ObjectKeyFromObject(&m), got)
			if err == nil {
				g.Expect(got.DeletionTimestamp.IsZero()).To(BeFalse(), "Machine %s is deleted for the drain", m.Name)
			}
		}
		g.Expect(left).To(ConsistOf(guarded.Spec.InfrastructureRef.Name), "only the guarded worker's VM is left")
	}, timeout, 2*time.Second).Should(Succeed(), func() string { return describe(w) })
	g.Expect(denied).To(BeNumerically(">", 0), "virt-api should have denied the evictions (External)")
	guardedNode := &corev1.Node{}
	g.Expect(workload.Get(ctx, client.ObjectKey{Name: guarded.Status.NodeRef.Name}, guardedNode)).To(Succeed())
	g.Expect(guardedNode.Spec.Unschedulable).To(BeTrue(), "Cluster API cordoned the guarded worker's Node")
	g.Consistently(func(g Gomega) {
		g.Expect(launchersLeft(g)).To(ConsistOf(guarded.Spec.InfrastructureRef.Name))
		g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})).To(Succeed(), "the guarded Pod is not evicted past its budget")
	}, 10*time.Second, 2*time.Second).Should(Succeed(), func() string { return describe(w) })

	// The budget goes: Cluster API evicts the Pod, and the VM follows.
	g.Expect(workload.Delete(ctx, budget)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(launchersLeft(g)).To(BeEmpty(), "launcher Pods still on the drained node")
	}, timeout, 2*time.Second).Should(Succeed(), func() string { return describe(w) })

	uncordon()
	g.Eventually(func(g Gomega) {
		for _, m := range poolOf(w).machines(g) {
			g.Expect(machineUIDs(before)).NotTo(ContainElement(m.UID), "Machine %s was not replaced", m.Name)
		}
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })
	after := poolOf(w).expectJoined(t, 2)
	expectBootsClean(g, after)
	expectNoOrphans(t, w)
}

// externalOn edits a machine template for the drain scenarios: eviction
// strategy External, and placed on the drain node of that name alone
// (its label's value, its taint tolerated).
func externalOn(node string) func(*unstructured.Unstructured, map[string]any) {
	return func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["evictionStrategy"] = "External"
		machine["tolerations"] = []any{map[string]any{"key": drainNodeLabel, "operator": "Exists", "effect": "NoSchedule"}}
		machine["affinity"] = map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": drainNodeLabel, "operator": "In", "values": []any{drainNodes[node]}}}}},
		}}}
	}
}

// cordon marks the infrastructure node unschedulable, as kubectl drain
// does first, and returns how to uncordon it, which also runs when the
// test ends.
func cordon(t *testing.T, g Gomega, name string) (uncordon func()) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	cordoned := node.DeepCopy()
	cordoned.Spec.Unschedulable = true
	g.Expect(h.Client.Patch(ctx, cordoned, client.MergeFrom(node))).To(Succeed())
	uncordon = func() {
		n := &corev1.Node{}
		if err := h.Client.Get(ctx, client.ObjectKey{Name: name}, n); err == nil {
			u := n.DeepCopy()
			u.Spec.Unschedulable = false
			_ = h.Client.Patch(ctx, u, client.MergeFrom(n))
		}
	}
	t.Cleanup(uncordon)
	return uncordon
}

// evictLaunchers is one pass of kubectl drain over the namespace's
// launcher Pods on the node: it asks to evict each one still running and
// returns their instances (named after their VMs) and how many evictions
// were refused.
func evictLaunchers(g Gomega, namespace, node string) (left []string, refused int) {
	ctx := context.Background()
	pods := &corev1.PodList{}
	g.Expect(h.Client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"})).To(Succeed())
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// A launcher Pod is controlled by its instance, named after the VM.
		instance := ""
		if owner := metav1.GetControllerOf(p); owner != nil {
			instance = owner.Name
		}
		left = append(left, instance)
		if err := h.Client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}); err != nil {
			refused++
		}
	}
	return left, refused
}

// TestInfrastructureNodeDrainEndsForAClaimBackedMachine: the drain of
// TestInfrastructureNodeDrainEnds for a machine whose root disk is a claim
// (a DataVolume cloned from its template's shared import) rather than a
// container disk, on a drain node of its own. The provider hands the
// Machine to Cluster API all the same; the machine's DataVolume goes with
// its VM, the shared import stays, and the replacement clones it again and
// joins.
func TestInfrastructureNodeDrainEndsForAClaimBackedMachine(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	applyImportPool(t, w, map[string]string{"WORKER_MACHINE_COUNT": "1"}, externalOn(drainClaimsNode))
	before := poolOf(w).expectJoined(t, 1)
	drained := before[0]
	machineDisks := func(g Gomega, kubeVirtMachine string) []string {
		dvs := &cdiv1.DataVolumeList{}
		g.Expect(h.Client.List(ctx, dvs, client.InNamespace(w.Key.Namespace), client.MatchingLabels{infrav1.MachineNameLabel: kubeVirtMachine})).To(Succeed())
		var names []string
		for _, dv := range dvs.Items {
			names = append(names, dv.Name)
		}
		return names
	}
	g.Expect(machineDisks(g, drained.Spec.InfrastructureRef.Name)).NotTo(BeEmpty(), "the machine's root disk is a DataVolume")

	uncordon := cordon(t, g, drainClaimsNode)
	denied := 0
	g.Eventually(func(g Gomega) {
		left, refused := evictLaunchers(g, w.Key.Namespace, drainClaimsNode)
		denied += refused
		g.Expect(left).To(BeEmpty(), "launcher Pods still on the drained node")
		got := &clusterv1.Machine{}
		err := h.Client.Get(ctx, client.ObjectKeyFromObject(&drained), got)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Machine %s is deleted for the drain: %v", drained.Name, err)
		g.Expect(machineDisks(g, drained.Spec.InfrastructureRef.Name)).To(BeEmpty(), "the machine's DataVolume goes with it")
	}, timeout, 2*time.Second).Should(Succeed(), func() string { return describe(w) })
	g.Expect(denied).To(BeNumerically(">", 0), "virt-api should have denied the evictions (External)")

	uncordon()
	after := poolOf(w).expectJoined(t, 1)
	g.Expect(after[0].UID).NotTo(Equal(drained.UID), "the MachineSet replaced the Machine")
	g.Expect(machineDisks(g, after[0].Spec.InfrastructureRef.Name)).NotTo(BeEmpty(), "the replacement cloned the shared import again")
	expectBootsClean(g, after)
	expectNoOrphans(t, w)
}

// TestInfrastructureNodeDrainLiveMigrates: the hoster drains the node of a
// machine whose VM has eviction strategy LiveMigrate and can migrate (a
// container disk on a masqueraded pod network). virt-api denies the
// launcher Pod's eviction, marks the instance for evacuation and
// virt-controller creates a kubevirt-evacuation migration for it; the
// provider leaves the instance alone, since stopping it would kill a VM
// KubeVirt is moving, and shows the migration on the machine, which stays
// provisioned. (The node stand-in does not carry a migration out: what is
// checked is what the provider does while KubeVirt migrates.)
func TestInfrastructureNodeDrainLiveMigrates(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	objs := poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "1"})
	harness.EditMachineTemplates(objs, func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["evictionStrategy"] = "LiveMigrate"
	})
	g.Expect(h.Apply(ctx, objs)).To(Succeed())
	before := poolOf(w).expectJoined(t, 1)
	key := vmKey(before[0])
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(h.Client.Get(ctx, key, vmi)).To(Succeed())
	t.Cleanup(func() { deleteMigrationsOf(t, vmi) })

	// kubectl drain evicts the launcher Pod: virt-api denies it and
	// evacuates the instance instead.
	pods := &corev1.PodList{}
	g.Expect(h.Client.List(ctx, pods, client.InNamespace(key.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)})).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	err := h.Client.SubResource("eviction").Create(ctx, &pods.Items[0], &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: pods.Items[0].Name}})
	g.Expect(err).To(MatchError(ContainSubstring("Eviction triggered evacuation of VMI")))

	// virt-controller migrates it, and the machine shows the migration.
	kvm := &infrav1.KubeVirtMachine{}
	g.Eventually(func(g Gomega) {
		g.Expect(h.Client.Get(ctx, key, kvm)).To(Succeed())
		c := conditions.Get(kvm, infrav1.VirtualMachineProvisionedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.LiveMigratingReason))
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(MatchRegexp(`^Infrastructure node \S+ is being drained: KubeVirt live-migrates the instance \(eviction strategy LiveMigrate\); migration kubevirt-evacuation-\S+ is `))
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })
	g.Expect(conditions.IsTrue(kvm, infrav1.ReadyCondition)).To(BeTrue(), "the machine stopped being ready while KubeVirt migrates it")

	// The provider has seen the evacuation (the condition above) and left
	// the instance running: the same instance, not being deleted.
	current := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(h.Client.Get(ctx, key, current)).To(Succeed())
	g.Expect(current.UID).To(Equal(vmi.UID))
	g.Expect(current.DeletionTimestamp.IsZero()).To(BeTrue(), "the provider stopped an instance KubeVirt live-migrates")
	g.Expect(current.Status.EvacuationNodeName).To(Equal(vmi.Status.NodeName))
	g.Expect(machineUIDs(poolOf(w).machines(g))).To(Equal(machineUIDs(before)))
}

// deleteMigrationsOf cancels KubeVirt's migrations of an instance.
func deleteMigrationsOf(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	migrations := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := h.Client.List(context.Background(), migrations, client.InNamespace(vmi.Namespace)); err != nil {
		t.Errorf("listing the migrations of %s: %v", vmi.Name, err)
		return
	}
	for i := range migrations.Items {
		m := &migrations.Items[i]
		if m.Spec.VMIName != vmi.Name {
			continue
		}
		if err := client.IgnoreNotFound(h.Client.Delete(context.Background(), m)); err != nil {
			t.Errorf("deleting migration %s: %v", m.Name, err)
		}
	}
}
