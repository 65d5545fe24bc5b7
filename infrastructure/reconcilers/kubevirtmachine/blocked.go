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
	"github.com/cozystack/cluster-api-workers/internal/backoff"
	"github.com/cozystack/cluster-api-workers/internal/redact"
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
	// requeueAfterLimit, when set, makes requeueAfter the first interval
	// of a backoff: doubled while the machine stays blocked for this
	// reason, up to the limit.
	requeueAfterLimit time.Duration
}

// refusedRetry is how long a machine whose object the API server refused,
// or whose bootstrap data Secret is not its own, waits before it asks
// again.
const refusedRetry = time.Minute

// A refused clone is asked about again after cloneRetry, then twice as
// long while it stays refused, at most cloneRetryLimit: each ask reads the
// DataSource and namespace from the API server and sends access reviews.
// A change of the machine's spec reconciles it at once; the tenant's RBAC
// is not watched, so the limit bounds how long a newly granted right
// waits.
const (
	cloneRetry      = time.Minute
	cloneRetryLimit = 5 * time.Minute
)

// waitingFor blocks a machine until a watched object changes.
func waitingFor(reason, message string) *blocked {
	return &blocked{status: metav1.ConditionUnknown, reason: reason, message: message}
}

// refusedFor blocks a machine on a refusal, asked again after refusedRetry.
func refusedFor(reason, message string) *blocked {
	return &blocked{status: metav1.ConditionUnknown, reason: reason, message: message, requeueAfter: refusedRetry}
}

// cloneRefusedFor blocks a machine on a clone source that is missing or
// that its namespace may not clone, asked again with backoff.
func cloneRefusedFor(reason, message string) *blocked {
	return &blocked{status: metav1.ConditionUnknown, reason: reason, message: message, requeueAfter: cloneRetry, requeueAfterLimit: cloneRetryLimit}
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

// report puts the block on the machine and returns when to look again. A
// block that backs off restarts its steps' lastTransitionTime when the
// reason changes, which then tells how long this reason has held.
func (b *blocked) report(kvm *infrav1.KubeVirtMachine) ctrl.Result {
	if b.requeueAfterLimit == 0 {
		setConditions(kvm, b.conditions()...)
		return ctrl.Result{RequeueAfter: b.requeueAfter}
	}
	for _, c := range b.conditions() {
		c.Message = redact.URLCredentials(c.Message)
		backoff.SetCondition(kvm, c)
	}
	now := time.Now()
	since := backoff.Since(kvm, infrav1.BootDiskReadyCondition, now)
	return ctrl.Result{RequeueAfter: backoff.Interval(since, now, b.requeueAfter, b.requeueAfterLimit)}
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
