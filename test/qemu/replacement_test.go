//go:build qemu

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

package qemu

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestKilledGuestIsReplaced: the QEMU process of one guest of the joined
// pool is killed. virt-handler's stand-in reports its instance Failed (and
// virt-controller, under run strategy Always, starts another instance of
// the VM, which boots the container disk blank); the workload control
// plane's node lifecycle controller marks its Node NotReady (Ready
// Unknown) once the kubelet's heartbeats stop; the MachineHealthCheck
// finds the Machine's node unhealthy and remediates it, and the
// MachineSet's replacement boots a new guest that joins. The other Machine
// is left alone.
func TestKilledGuestIsReplaced(t *testing.T) {
	timings.scenario(t)
	g := NewWithT(t)
	before := ensureJoinPool(t)
	victim, survivor := before[0], before[1]
	history := watchMachines(t, joinPool())
	killedGuest := guestOf(g, vmKey(victim))
	// Joined nodes' tokens are revoked; a new instance of the killed VM
	// boots the container disk blank with the same bootstrap data and must
	// not be able to join again in the old node's place.
	g.Eventually(func(g Gomega) { g.Expect(joinPool().joinTokens(g)).To(BeEmpty()) }, time.Minute, poll).Should(Succeed())

	g.Expect(runner.Kill(vmKey(victim))).To(Succeed())
	killed := time.Now()
	g.Eventually(func(g Gomega) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		err := h.Client.Get(suiteCtx, vmKey(victim), vmi)
		if err == nil && vmi.UID == killedGuest.Instance {
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Failed))
			return
		}
		// virt-controller replaced the failed instance already (run
		// strategy Always); the killed guest's record says how it ended.
		g.Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "reading the instance: %v", err)
		g.Expect(guestOf(g, vmKey(victim)).Instance).NotTo(Equal(killedGuest.Instance))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	for _, guest := range runner.Guests() {
		if guest.Instance == killedGuest.Instance {
			g.Expect(guest.Exited.IsZero()).To(BeFalse())
			g.Expect(guest.ExitError).NotTo(BeEmpty(), "a killed guest is not a clean power-off")
		}
	}

	// The Node goes NotReady while the Machine still exists: the node
	// lifecycle controller stops trusting the kubelet after its grace
	// period (kube-controller-manager's default, 50 s).
	var notReadyAfter time.Duration
	g.Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Name: victim.Status.NodeRef.Name}, node)).To(Succeed())
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				g.Expect(c.Status).To(Equal(corev1.ConditionUnknown))
			}
		}
		notReadyAfter = time.Since(killed)
	}, 3*time.Minute, 200*time.Millisecond).Should(Succeed(), func() string { return describe(joinPool()) })
	t.Logf("timing: the Node of the killed guest %s went NotReady %s after the kill", victim.Name, notReadyAfter.Round(time.Second))

	g.Eventually(func(g Gomega) {
		for _, m := range joinPool().machines(g) {
			g.Expect(m.UID).NotTo(Equal(victim.UID), "Machine %s was not remediated", m.Name)
		}
	}, 5*time.Minute, poll).Should(Succeed(), func() string { return describe(joinPool()) })
	g.Expect(history.Reasons(victim.UID, metav1.ConditionFalse)).To(ContainElement(clusterv1.MachineHealthCheckUnhealthyNodeReason),
		"the MachineHealthCheck did not find the killed guest's node unhealthy")
	g.Expect(history.Reasons(survivor.UID, metav1.ConditionFalse)).To(BeEmpty(), "the healthy Machine was found unhealthy")

	after := joinPool().expectJoined(t, 2)
	var replacement []clusterv1.Machine
	uids := map[string]bool{}
	for _, m := range after {
		uids[string(m.UID)] = true
		if m.UID != survivor.UID {
			replacement = append(replacement, m)
		}
	}
	g.Expect(uids).To(HaveKey(string(survivor.UID)), "the healthy Machine was replaced too")
	g.Expect(replacement).To(HaveLen(1))
	recordJoins(t, "replacement", replacement)
	t.Logf("timing: from the kill to the replacement's Node Ready: %s", time.Since(killed).Round(time.Second))
	g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Name: victim.Status.NodeRef.Name}, &corev1.Node{})).
		To(Satisfy(apierrors.IsNotFound), "the remediated Machine's Node is left")
	g.Eventually(func(g Gomega) { g.Expect(joinPool().joinTokens(g)).To(BeEmpty()) }, time.Minute, poll).Should(Succeed())
}
