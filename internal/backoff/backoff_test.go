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

package backoff

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
)

// TestInterval: 10 s at first, doubled while the block holds, at most the
// limit; a clock behind the condition's time waits the first interval.
func TestInterval(t *testing.T) {
	since := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		held time.Duration
		want time.Duration
	}{
		{-time.Minute, 10 * time.Second},
		{0, 10 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{19 * time.Second, 10 * time.Second},
		{20 * time.Second, 20 * time.Second},
		{40 * time.Second, 40 * time.Second},
		{80 * time.Second, 80 * time.Second},
		{159 * time.Second, 80 * time.Second},
		{160 * time.Second, 160 * time.Second},
		{320 * time.Second, 5 * time.Minute},
		{24 * time.Hour, 5 * time.Minute},
	} {
		t.Run(tc.held.String(), func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Interval(since, since.Add(tc.held), 10*time.Second, 5*time.Minute)).To(Equal(tc.want))
		})
	}
}

// TestSetConditionStartsAnewOnAnotherReason: lastTransitionTime moves on a
// change of reason, as on a change of status, and stays while the reason
// does (a new message included), so Since tells how long the reason held.
func TestSetConditionStartsAnewOnAnotherReason(t *testing.T) {
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, tc := range []struct {
		name       string
		reason     string
		message    string
		wantMoved  bool
		wantReason string
	}{
		{name: "same reason, same message", reason: "WaitingForA", message: "a", wantReason: "WaitingForA"},
		{name: "same reason, another message", reason: "WaitingForA", message: "b", wantReason: "WaitingForA"},
		{name: "another reason, same status", reason: "WaitingForB", message: "a", wantMoved: true, wantReason: "WaitingForB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := &clusterv1.Cluster{}
			obj.Status.Conditions = []metav1.Condition{{Type: "Blocked", Status: metav1.ConditionFalse, Reason: "WaitingForA", Message: "a", LastTransitionTime: long}}
			SetCondition(obj, metav1.Condition{Type: "Blocked", Status: metav1.ConditionFalse, Reason: tc.reason, Message: tc.message})
			c := conditions.Get(obj, "Blocked")
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.Message).To(Equal(tc.message))
			since := Since(obj, "Blocked", time.Now())
			if tc.wantMoved {
				g.Expect(since).To(BeTemporally("~", time.Now(), 2*time.Second))
			} else {
				g.Expect(since).To(Equal(long.Time))
			}
		})
	}
	g := NewWithT(t)
	now := time.Now()
	g.Expect(Since(&clusterv1.Cluster{}, "Blocked", now)).To(Equal(now), "no condition: blocked from now")
}
