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

package kairosconfig

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/backoff"
)

// blocked is why a config has no bootstrap data yet, a wait or a refusal:
// what its DataSecretAvailable condition says (and Ready with it), and
// when to look again where no watch ends it (zero when one does). The
// infrastructure provider's machines are blocked the same way.
type blocked struct {
	// status is False when left zero, which is what a config without
	// bootstrap data says whatever it waits for, as Cluster API's
	// KubeadmConfig does.
	status          metav1.ConditionStatus
	reason, message string
	requeueAfter    time.Duration
	// requeueAfterLimit, when set, makes requeueAfter the first interval
	// of a backoff: doubled while the config stays blocked for this
	// reason, up to the limit.
	requeueAfterLimit time.Duration
}

// waitingFor blocks a config until a watched object changes.
func waitingFor(reason, message string) *blocked {
	return &blocked{status: metav1.ConditionFalse, reason: reason, message: message}
}

// conditions are the config's conditions while it is blocked.
func (b *blocked) conditions() []metav1.Condition {
	return []metav1.Condition{
		{Type: bootstrapv1.DataSecretAvailableCondition, Status: b.conditionStatus(), Reason: b.reason, Message: b.message},
	}
}

// conditionStatus is status, False when left zero.
func (b *blocked) conditionStatus() metav1.ConditionStatus {
	if b.status == "" {
		return metav1.ConditionFalse
	}
	return b.status
}

// report puts the block on the config and returns when to look again. A
// block that backs off restarts its condition's lastTransitionTime when the
// reason changes, which then tells how long this reason has held.
func (b *blocked) report(config *bootstrapv1.KairosConfig) ctrl.Result {
	if b.requeueAfterLimit == 0 {
		for _, c := range b.conditions() {
			conditions.Set(config, c)
		}
		return ctrl.Result{RequeueAfter: b.requeueAfter}
	}
	for _, c := range b.conditions() {
		backoff.SetCondition(config, c)
	}
	now := time.Now()
	since := backoff.Since(config, bootstrapv1.DataSecretAvailableCondition, now)
	return ctrl.Result{RequeueAfter: backoff.Interval(since, now, b.requeueAfter, b.requeueAfterLimit)}
}
