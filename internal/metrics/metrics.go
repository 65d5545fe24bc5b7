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

// Package metrics holds what both providers' metrics share: the buckets
// of the durations a machine's life is charted by, and how such a duration
// is measured. Each provider's metrics are in its own package
// (bootstrap/internal/metrics, infrastructure/internal/metrics), registered
// on controller-runtime's metrics.Registry, so that they are served on the
// manager's metrics endpoint beside controller-runtime's.
package metrics

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MachineDurationBuckets are the upper bounds, in seconds, of the
// histograms of a Machine's steps since its creation: from a second (the
// bootstrap data of a Machine whose Cluster is ready) to an hour (a slow
// image import).
var MachineDurationBuckets = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// SinceCreation is the seconds from an object's creation, as the API
// server stamped it, to now, as this process's clock says. A clock behind
// the API server's gives zero, never a negative duration.
func SinceCreation(created metav1.Time, now time.Time) float64 {
	return max(now.Sub(created.Time).Seconds(), 0)
}
