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

// Package metrics is the Kairos bootstrap provider's Prometheus metrics,
// registered on controller-runtime's metrics.Registry and so served on the
// manager's metrics endpoint. Each is counted once at the transition it
// names, never per reconcile, and none has a label naming an object.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sharedmetrics "github.com/cozystack/cluster-api-workers/internal/metrics"
)

var (
	// TokensMinted counts the bootstrap tokens minted: recorded in the
	// management cluster and created in a workload cluster.
	TokensMinted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cozystack_workers_bootstrap_tokens_minted_total",
		Help: "Bootstrap tokens minted for Machines' joins (recorded, then created in the workload cluster).",
	})
	// TokensRevoked counts the bootstrap tokens deleted from a workload
	// cluster: once the node joined, or when its Machine or KairosConfig
	// goes.
	TokensRevoked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cozystack_workers_bootstrap_tokens_revoked_total",
		Help: "Bootstrap tokens deleted from the workload cluster after the node joined or when its Machine or KairosConfig went.",
	})
	// DataReady is the time from a Machine's creation to its bootstrap
	// data Secret being written.
	DataReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cozystack_workers_bootstrap_machine_data_ready_seconds",
		Help:    "Seconds from a Machine's creation to its bootstrap data Secret being written.",
		Buckets: sharedmetrics.MachineDurationBuckets,
	})
)

func init() {
	metrics.Registry.MustRegister(TokensMinted, TokensRevoked, DataReady)
}

// ObserveDataReady records that a Machine created at created has its
// bootstrap data at now.
func ObserveDataReady(created metav1.Time, now time.Time) {
	DataReady.Observe(sharedmetrics.SinceCreation(created, now))
}
