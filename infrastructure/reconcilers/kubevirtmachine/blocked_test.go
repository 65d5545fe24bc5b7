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

package kubevirtmachine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestDeletingConditions(t *testing.T) {
	g := NewWithT(t)
	kvm := &infrav1.KubeVirtMachine{}
	setConditions(kvm, deletingConditions([]string{"VirtualMachine w", "DataVolume w-root"})...)
	g.Expect(setReady(kvm)).To(Succeed())
	g.Expect(kvm.Status.Conditions).To(HaveLen(3))
	for _, c := range kvm.Status.Conditions {
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(infrav1.DeletingReason))
		g.Expect(c.Message).To(Equal("Waiting for VirtualMachine w, DataVolume w-root to be deleted"))
	}
}

// TestBlockedReportsBothSteps: a blocked machine says why on both steps,
// Unknown while it waits and False where a replacement fixes it, and asks
// again only where no watch ends the block.
func TestBlockedReportsBothSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       *blocked
		status  metav1.ConditionStatus
		requeue time.Duration
	}{
		{"a wait", waitingFor(infrav1.WaitingForClusterReason, "Cluster ns/c does not exist"), metav1.ConditionUnknown, 0},
		{"a refusal", refusedFor(infrav1.CreateRefusedReason, "refused"), metav1.ConditionUnknown, refusedRetry},
		{"a refused clone", cloneRefusedFor(infrav1.CloneSourceForbiddenReason, "refused"), metav1.ConditionUnknown, cloneRetry},
		{"a name conflict left at the zero status", &blocked{reason: infrav1.NameConflictReason, message: "not ours"}, metav1.ConditionFalse, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			kvm := &infrav1.KubeVirtMachine{}
			g.Expect(tc.b.report(kvm).RequeueAfter).To(Equal(tc.requeue))
			for _, step := range []string{infrav1.BootDiskReadyCondition, infrav1.VirtualMachineProvisionedCondition} {
				c := conditionOf(kvm, step)
				g.Expect(c).NotTo(BeNil(), step)
				g.Expect(c.Status).To(Equal(tc.status), step)
				g.Expect(c.Reason).To(Equal(tc.b.reason), step)
				g.Expect(c.Message).To(Equal(tc.b.message), step)
			}
		})
	}
}

// TestARefusedCloneIsAskedAboutWithBackoff: each ask about a refused clone
// reads from the API server and sends access reviews, so a machine whose
// clone stays refused is asked about after a minute, then twice as long,
// up to 5 minutes. How long it has been refused is its steps'
// lastTransitionTime, which the machine's status keeps across restarts;
// it starts anew when the machine is refused after another wait (with the
// same Unknown status), and not when another source is refused.
func TestARefusedCloneIsAskedAboutWithBackoff(t *testing.T) {
	refusedSince := func(reason string, ago time.Duration) []metav1.Condition {
		at := metav1.NewTime(time.Now().Add(-ago))
		return []metav1.Condition{
			{Type: infrav1.BootDiskReadyCondition, Status: metav1.ConditionUnknown, Reason: reason, Message: "spec.image.clone: earlier", LastTransitionTime: at},
			{Type: infrav1.VirtualMachineProvisionedCondition, Status: metav1.ConditionUnknown, Reason: reason, Message: "spec.image.clone: earlier", LastTransitionTime: at},
		}
	}
	for _, tc := range []struct {
		name        string
		reason      string
		before      []metav1.Condition
		wantRequeue time.Duration
		wantAnew    bool
	}{
		{name: "the first refusal", reason: infrav1.CloneSourceForbiddenReason, wantRequeue: time.Minute, wantAnew: true},
		{name: "refused for 2.5 minutes", reason: infrav1.CloneSourceForbiddenReason,
			before: refusedSince(infrav1.CloneSourceForbiddenReason, 150*time.Second), wantRequeue: 2 * time.Minute},
		{name: "refused for an hour", reason: infrav1.CloneSourceForbiddenReason,
			before: refusedSince(infrav1.CloneSourceForbiddenReason, time.Hour), wantRequeue: 5 * time.Minute},
		{name: "a missing source for an hour", reason: infrav1.WaitingForCloneSourceReason,
			before: refusedSince(infrav1.WaitingForCloneSourceReason, time.Hour), wantRequeue: 5 * time.Minute},
		{name: "refused after waiting an hour for the bootstrap data", reason: infrav1.CloneSourceForbiddenReason,
			before: refusedSince(infrav1.WaitingForBootstrapDataReason, time.Hour), wantRequeue: time.Minute, wantAnew: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			kvm := &infrav1.KubeVirtMachine{}
			kvm.Status.Conditions = tc.before
			b := cloneRefusedFor(tc.reason, "spec.image.clone: https://user:secret@example.com/ refused")
			g.Expect(b.report(kvm).RequeueAfter).To(Equal(tc.wantRequeue))
			for _, step := range []string{infrav1.BootDiskReadyCondition, infrav1.VirtualMachineProvisionedCondition} {
				c := conditionOf(kvm, step)
				g.Expect(c.Reason).To(Equal(tc.reason), step)
				g.Expect(c.Message).To(Equal("spec.image.clone: https://***@example.com/ refused"), step)
				if tc.wantAnew {
					g.Expect(c.LastTransitionTime.Time).To(BeTemporally("~", time.Now(), 2*time.Second), step)
				} else {
					g.Expect(c.LastTransitionTime).To(Equal(tc.before[0].LastTransitionTime), step)
				}
			}
		})
	}
}
