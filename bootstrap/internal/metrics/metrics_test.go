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

package metrics

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cluster-api-workers/internal/metrics/metricstest"
)

var names = []string{
	"cozystack_workers_bootstrap_tokens_minted_total",
	"cozystack_workers_bootstrap_tokens_revoked_total",
	"cozystack_workers_bootstrap_machine_data_ready_seconds",
}

// TestServedOnTheManagersRegistry: the metrics are on controller-runtime's
// registry, which the manager's metrics endpoint serves, and follow
// Prometheus' naming conventions (promlint).
func TestServedOnTheManagersRegistry(t *testing.T) {
	metricstest.ExpectServedAndLinted(t, names...)
}

func TestObserveDataReady(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC))
	before := metricstest.ReadHistogram(t, DataReady)
	ObserveDataReady(created, created.Add(7*time.Second))
	ObserveDataReady(created, created.Add(-time.Second))
	after := metricstest.ReadHistogram(t, DataReady)
	if got := after.Count - before.Count; got != 2 {
		t.Errorf("observations: %d, want 2", got)
	}
	if got := after.Sum - before.Sum; got != 7 {
		t.Errorf("sum of the observations: %v seconds, want 7 (a clock behind the API server's counts zero)", got)
	}
}
