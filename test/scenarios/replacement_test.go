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
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/kubevirtmachinetemplate"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/sim/fault"
)

// TestReplacementAfterInstanceCrash: the instance of one VM crashes; its
// node goes unknown (a container disk cannot rejoin), the
// MachineHealthCheck remediates the Machine, and the replacement joins.
// Nothing of the crashed machine is left.
func TestReplacementAfterInstanceCrash(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	before := poolOf(w).expectJoined(t, 2)
	victim := before[0]

	g.Expect(h.Hosts.Crash(vmKey(victim), "")).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, m := range poolOf(w).machines(g) {
			g.Expect(m.UID).NotTo(Equal(victim.UID), "Machine %s was not remediated", m.Name)
		}
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })

	after := poolOf(w).expectJoined(t, 2)
	g.Expect(machineUIDs(after)).To(ContainElement(before[1].UID), "the healthy Machine was replaced too")
	expectBootsClean(g, after)
	expectNoOrphans(t, w)
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokens(g, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
}

// TestReplacementAfterLostInstance: the infrastructure node loses one
// VM's instance with its container disk (its launcher Pod is gone);
// virt-controller fails the instance and starts another on a blank disk,
// which cannot rejoin. The provider reports the lost disk, the
// MachineHealthCheck remediates the Machine, and the replacement joins.
func TestReplacementAfterLostInstance(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	before := poolOf(w).expectJoined(t, 2)
	victim := before[0]

	g.Expect(h.Hosts.LoseDisk(context.Background(), vmKey(victim))).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, m := range poolOf(w).machines(g) {
			g.Expect(m.UID).NotTo(Equal(victim.UID), "Machine %s was not remediated", m.Name)
		}
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })

	after := poolOf(w).expectJoined(t, 2)
	g.Expect(machineUIDs(after)).To(ContainElement(before[1].UID), "the healthy Machine was replaced too")
	expectBootsClean(g, after)
	expectNoOrphans(t, w)
}

// TestSingletonPoolWithHalfUnhealthyAllowedIsNotRemediated: 50% of one
// Machine rounds down to zero, so the MachineHealthCheck reports the
// Machine unhealthy but does not remediate it (the seed's note).
func TestSingletonPoolWithHalfUnhealthyAllowedIsNotRemediated(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "1", "MAX_UNHEALTHY": "50%"})
	only := poolOf(w).expectJoined(t, 1)[0]

	g.Expect(h.Hosts.Crash(vmKey(only), "")).To(Succeed())
	mhcKey := client.ObjectKey{Namespace: w.Key.Namespace, Name: w.Key.Name + "-kairos"}
	g.Eventually(func(g Gomega) {
		m := &clusterv1.Machine{}
		g.Expect(h.Client.Get(context.Background(), client.ObjectKeyFromObject(&only), m)).To(Succeed())
		g.Expect(conditions.IsFalse(m, clusterv1.MachineHealthCheckSucceededCondition)).To(BeTrue())
		mhc := &clusterv1.MachineHealthCheck{}
		g.Expect(h.Client.Get(context.Background(), mhcKey, mhc)).To(Succeed())
		c := conditions.Get(mhc, clusterv1.MachineHealthCheckRemediationAllowedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(BeEquivalentTo(corev1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(clusterv1.MachineHealthCheckTooManyUnhealthyReason))
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })
	// Well past the 5 s node timeout, the Machine is still there and not
	// marked for remediation.
	g.Consistently(func(g Gomega) {
		ms := poolOf(w).machines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].UID).To(Equal(only.UID))
		g.Expect(ms[0].DeletionTimestamp.IsZero()).To(BeTrue())
		g.Expect(conditions.Get(&ms[0], clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())
	}, 10*time.Second, time.Second).Should(Succeed())
	expectNoOrphans(t, w)
}

// TestImportFailureIsRemediatedThroughUnhealthyMachineConditions: the root
// disk of one Machine, its clone of the template's shared import, fails
// (its importer keeps restarting); the provider reports InfrastructureReady
// False, the MachineHealthCheck's unhealthyMachineConditions remediate it
// long before the node startup timeout, and the replacement clones and
// joins.
func TestImportFailureIsRemediatedThroughUnhealthyMachineConditions(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	h.CDI.FailImports(machineDisksIn(w.Key.Namespace), 1)
	applyImportPool(t, w, map[string]string{"WORKER_MACHINE_COUNT": "2", "NODE_STARTUP_TIMEOUT_SECONDS": "600"})

	var failed types.UID
	g.Eventually(func(g Gomega) {
		for _, m := range poolOf(w).machines(g) {
			if c := conditions.Get(&m, clusterv1.MachineInfrastructureReadyCondition); c != nil &&
				c.Status == "False" && c.Reason == infrav1.ImportFailedReason {
				failed = m.UID
			}
		}
		g.Expect(failed).NotTo(BeEmpty())
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })

	after := poolOf(w).expectJoined(t, 2)
	g.Expect(machineUIDs(after)).NotTo(ContainElement(failed))
	expectBootsClean(g, after)
	expectNoOrphans(t, w)
}

// TestSlowHealthyImportDoesNotLoop: root disks (clones of the template's
// shared import) that take far longer than the infrastructure failure
// timeout but progress are not remediated: each Machine keeps its one
// DataVolume until it joins. Remediation is allowed
// for every Machine here, so any false unhealthy verdict would show. CDI
// makes each claim a few seconds late (the suite's ClaimDelay), so real
// virt-controller reports the claim missing and then keeps a stale
// unschedulable condition for the whole import: the provider reported
// both as failures and the health check replaced healthy machines. After
// the import, until virt-controller has made the launcher Pod, the stale
// condition is still there: a watch on the KubeVirtMachines checks that
// no instant of it read as a failure.
func TestSlowHealthyImportDoesNotLoop(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	watcher, err := client.NewWithWatch(h.Config(), client.Options{Scheme: h.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	provisioning := harness.WatchConditions(t, watcher, &infrav1.KubeVirtMachineList{}, infrav1.VirtualMachineProvisionedCondition, client.InNamespace(w.Key.Namespace))
	// Far longer than the health check lets infrastructure report False.
	slow := 2 * infrastructureFailedTimeout
	h.CDI.SlowImports(machineDisksIn(w.Key.Namespace), 2, slow)
	applyImportPool(t, w, map[string]string{"WORKER_MACHINE_COUNT": "2", "MAX_UNHEALTHY": "100%", "NODE_STARTUP_TIMEOUT_SECONDS": "120"})

	firstMachines := map[types.UID]bool{}
	disks := map[string]types.UID{}
	sawProgress := false
	g.Eventually(func(g Gomega) {
		ms := poolOf(w).machines(g)
		for _, m := range ms {
			if len(firstMachines) < 2 {
				firstMachines[m.UID] = true
			}
			g.Expect(firstMachines).To(HaveKey(m.UID), "Machine %s replaced a Machine whose import was only slow", m.Name)
			if c := conditions.Get(&m, clusterv1.MachineInfrastructureReadyCondition); c != nil && c.Reason == infrav1.CloningReason {
				g.Expect(c.Status).To(BeEquivalentTo("Unknown"))
				sawProgress = true
			}
		}
		dvs := &cdiv1.DataVolumeList{}
		g.Expect(h.Client.List(context.Background(), dvs, client.InNamespace(w.Key.Namespace))).To(Succeed())
		for _, dv := range dvs.Items {
			if uid, seen := disks[dv.Name]; seen {
				g.Expect(dv.UID).To(Equal(uid), "DataVolume %s was imported again", dv.Name)
			}
			disks[dv.Name] = dv.UID
			g.Expect(dv.Status.RestartCount).To(BeZero())
		}
		g.Expect(ms).To(HaveLen(2))
		for _, m := range ms {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)))
		}
	}, slow+timeout, poll).Should(Succeed(), func() string {
		return fmt.Sprintf("%s\nKubeVirtMachines read as failed: %q", describe(w), provisioning.With(metav1.ConditionFalse))
	})
	g.Expect(sawProgress).To(BeTrue(), "no Machine reported clone progress")
	g.Expect(disks).To(HaveLen(3), "the shared import and each Machine's clone")
	expectBootsClean(g, poolOf(w).expectJoined(t, 2))
	g.Expect(provisioning.Objects()).To(Equal(2))
	g.Expect(provisioning.With(metav1.ConditionFalse)).To(BeEmpty(), "a machine read as failed on its way to provisioned")
	expectNoOrphans(t, w)
}

// applyImportPool applies the example pool with a classless template whose
// root disk is imported over HTTP by CDI (a Kairos class always boots a
// container disk): once, into the template's shared import, which each
// Machine's root disk clones. The node simulator is told, before any
// machine exists, that the clones boot the imported image. Each of edits
// is applied to the template first.
func applyImportPool(t *testing.T, w *harness.WorkloadCluster, vars map[string]string, edits ...func(template *unstructured.Unstructured, machine map[string]any)) {
	t.Helper()
	objs := poolOf(w).render(t, vars)
	for _, edit := range edits {
		harness.EditMachineTemplates(objs, edit)
	}
	harness.EditMachineTemplates(objs, func(template *unstructured.Unstructured, machine map[string]any) {
		delete(machine, "workerClass")
		labels := template.GetLabels()
		delete(labels, "cozystack.io/worker-class")
		template.SetLabels(labels)
		machine["image"] = map[string]any{"httpImport": map[string]any{"url": importedImage}}
		machine["rootDisk"] = map[string]any{"size": "20Gi"}
		spec := &infrav1.KubeVirtMachineSpec{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(machine, spec); err != nil {
			t.Fatal(err)
		}
		shared := vmspec.SharedImportName(kubevirtmachinetemplate.Classless(spec).ContentHash, spec.RootDisk)
		h.Nodes.SetImage("PVC "+w.Key.Namespace+"/"+shared, importedOS)
	})
	if err := h.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
}

// machineDisksIn selects the Machines' root disks of a namespace for CDI's
// faults, not the template's shared import.
func machineDisksIn(namespace string) fault.Selector {
	return func(o client.Object) bool {
		_, machine := o.GetLabels()[infrav1.MachineNameLabel]
		return machine && o.GetNamespace() == namespace
	}
}

func vmKey(m clusterv1.Machine) client.ObjectKey {
	return client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}
}

func machineUIDs(ms []clusterv1.Machine) []types.UID {
	out := make([]types.UID, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.UID)
	}
	return out
}
