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
*/package kairosconfig

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// TestBlockedReportsDataSecretAvailable: a blocked config says why on
// DataSecretAvailable, False whether it waits or is refused, and asks again
// only where no watch ends the block.
func TestBlockedReportsDataSecretAvailable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       *blocked
		requeue time.Duration
	}{
		{"a wait", waitingFor(bootstrapv1.WaitingForClusterReason, "Cluster ns/c does not exist"), 0},
		{"a refusal left at the zero status", &blocked{reason: bootstrapv1.FileSourceNotAvailableReason, message: "missing", requeueAfter: time.Second}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			config := &bootstrapv1.KairosConfig{}
			g.Expect(tc.b.report(config).RequeueAfter).To(Equal(tc.requeue))
			c := conditions.Get(config, bootstrapv1.DataSecretAvailableCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(tc.b.reason))
			g.Expect(c.Message).To(Equal(tc.b.message))
		})
	}
}

// TestAMissingFileSourceIsAskedForWithBackoff: a config waiting for a
// file's Secret, which is read from the API server at each retry, is
// asked again after 10 s, then twice as long while it waits for a file
// source, up to 5 minutes. How long it has waited is its condition's
// lastTransitionTime, which the config's status keeps across restarts; it
// starts anew when the config begins to wait for a file source after
// another wait, and not when it waits for another Secret.
func TestAMissingFileSourceIsAskedForWithBackoff(t *testing.T) {
	waitingSince := func(reason string, ago time.Duration) []metav1.Condition {
		return []metav1.Condition{{Type: bootstrapv1.DataSecretAvailableCondition, Status: metav1.ConditionFalse, Reason: reason, Message: "a",
			LastTransitionTime: metav1.NewTime(time.Now().Add(-ago))}}
	}
	for _, tc := range []struct {
		name        string
		before      []metav1.Condition
		wantRequeue time.Duration
		wantAnew    bool
	}{
		{name: "the first wait", wantRequeue: 10 * time.Second, wantAnew: true},
		{name: "waiting for 25 s", before: waitingSince(bootstrapv1.FileSourceNotAvailableReason, 25*time.Second), wantRequeue: 20 * time.Second},
		{name: "waiting for 100 s", before: waitingSince(bootstrapv1.FileSourceNotAvailableReason, 100*time.Second), wantRequeue: 80 * time.Second},
		{name: "waiting for an hour", before: waitingSince(bootstrapv1.FileSourceNotAvailableReason, time.Hour), wantRequeue: 5 * time.Minute},
		{name: "waiting for an hour for the cluster CA first", before: waitingSince(bootstrapv1.WaitingForClusterCAReason, time.Hour), wantRequeue: 10 * time.Second, wantAnew: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			config := &bootstrapv1.KairosConfig{}
			config.Status.Conditions = tc.before
			b := waitingForFileSource(&fileSourceError{msg: "spec.files[0].contentFrom.secret: Secret b not found"})
			g.Expect(b.report(config).RequeueAfter).To(Equal(tc.wantRequeue))
			c := conditions.Get(config, bootstrapv1.DataSecretAvailableCondition)
			g.Expect(c.Reason).To(Equal(bootstrapv1.FileSourceNotAvailableReason))
			g.Expect(c.Message).To(Equal("spec.files[0].contentFrom.secret: Secret b not found"))
			if tc.wantAnew {
				g.Expect(c.LastTransitionTime.Time).To(BeTemporally("~", time.Now(), 2*time.Second))
			} else {
				g.Expect(c.LastTransitionTime).To(Equal(tc.before[0].LastTransitionTime))
			}
		})
	}
}
