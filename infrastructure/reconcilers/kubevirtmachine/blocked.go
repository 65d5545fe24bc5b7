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
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// blocked is why a machine cannot go on before its VM runs, a wait or a
// refusal: what its conditions say (both steps, and Ready with them), and
// when to look again where no watch ends it (zero when one does). The
// bootstrap provider's configs are blocked the same way.
type blocked struct {
	// status is False when left zero, for what a replacement Machine
	// fixes, and Unknown while the machine waits (a new Machine would wait
	// the same way, so remediation must not loop on it).
	status          metav1.ConditionStatus
	reason, message string
	requeueAfter    time.Duration
}

// refusedRetry is how long a machine whose object the API server refused,
// or whose clone source is missing or forbidden, waits before it asks
// again.
const refusedRetry = time.Minute

// waitingFor blocks a machine until a watched object changes.
func waitingFor(reason, message string) *blocked {
	return &blocked{status: metav1.ConditionUnknown, reason: reason, message: message}
}

// refusedFor blocks a machine on a refusal, asked again after refusedRetry.
func refusedFor(reason, message string) *blocked {
	return &blocked{status: metav1.ConditionUnknown, reason: reason, message: message, requeueAfter: refusedRetry}
}

// conditions are the machine's steps while it is blocked.
func (b *blocked) conditions() []metav1.Condition {
	return []metav1.Condition{
		condition(infrav1.BootDiskReadyCondition, b.conditionStatus(), b.reason, b.message),
		condition(infrav1.VirtualMachineProvisionedCondition, b.conditionStatus(), b.reason, b.message),
	}
}

// conditionStatus is status, False when left zero.
func (b *blocked) conditionStatus() metav1.ConditionStatus {
	if b.status == "" {
		return metav1.ConditionFalse
	}
	return b.status
}

// report puts the block on the machine and returns when to look again.
func (b *blocked) report(kvm *infrav1.KubeVirtMachine) ctrl.Result {
	setConditions(kvm, b.conditions()...)
	return ctrl.Result{RequeueAfter: b.requeueAfter}
}

// deletingConditions are the machine's steps while it waits for its
// objects to be deleted.
func deletingConditions(pending []string) []metav1.Condition {
	message := "Deleted the VirtualMachine and its disks"
	if len(pending) > 0 {
		message = "Waiting for " + strings.Join(pending, ", ") + " to be deleted"
	}
	return (&blocked{status: metav1.ConditionFalse, reason: infrav1.DeletingReason, message: message}).conditions()
}
