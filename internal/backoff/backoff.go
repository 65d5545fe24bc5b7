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

// Package backoff spaces the retries of an object blocked on what no watch
// reports (a Secret the cache does not hold, a tenant's access rights), so
// that a tenant's many blocked objects cost the shared client little: the
// first retry comes after a first interval, each next one after twice as
// long while the object stays blocked for the same reason, up to a limit.
// The interval is derived from the blocking condition's lastTransitionTime,
// which the object's status keeps: it survives a restart and needs no
// memory in the controller. SetCondition moves that time when the reason
// changes, not only the status, so that it tells how long the object has
// been blocked for this reason.
package backoff

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
)

// Interval is how long to wait, at now, before looking again at an object
// blocked for the same reason since since: first until it has been blocked
// for twice first, then the largest of first doubled that it has been
// blocked for, at most limit. With first 10 s, retries at each interval's
// end come 10, 20, 40 and 80 s after the block began.
func Interval(since, now time.Time, first, limit time.Duration) time.Duration {
	held := now.Sub(since)
	interval := first
	for interval < limit && 2*interval <= held {
		interval *= 2
	}
	return min(interval, limit)
}

// SetCondition sets c on obj as conditions.Set does, except that a
// condition whose reason changes starts anew, its lastTransitionTime now,
// as on a change of status.
func SetCondition(obj conditions.Setter, c metav1.Condition) {
	if old := conditions.Get(obj, c.Type); old != nil && old.Reason != c.Reason {
		conditions.Delete(obj, c.Type)
	}
	conditions.Set(obj, c)
}

// Since is when obj's condition of that type took its reason (as
// SetCondition sets it), or now when obj has no such condition.
func Since(obj conditions.Getter, conditionType string, now time.Time) time.Time {
	c := conditions.Get(obj, conditionType)
	if c == nil || c.LastTransitionTime.IsZero() {
		return now
	}
	return c.LastTransitionTime.Time
}
