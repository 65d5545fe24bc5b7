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
