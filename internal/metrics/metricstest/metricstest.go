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

// Package metricstest reads the providers' histograms in tests, as
// prometheus/testutil.ToFloat64 reads counters (which it cannot do for a
// histogram), and checks that their metrics are served and well named.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Histogram is one histogram's state: how many observations and their sum.
type Histogram struct {
	Count uint64
	Sum   float64
}

// ReadHistogram reads a histogram without labels.
func ReadHistogram(t *testing.T, h prometheus.Histogram) Histogram {
	t.Helper()
	m := &dto.Metric{}
	if err := h.Write(m); err != nil {
		t.Fatalf("reading the histogram: %v", err)
	}
	if m.Histogram == nil {
		t.Fatalf("the metric is not a histogram")
	}
	return Histogram{Count: m.Histogram.GetSampleCount(), Sum: m.Histogram.GetSampleSum()}
}

// ExpectServedAndLinted checks that each of names is gathered from
// controller-runtime's metrics.Registry, which a manager's metrics
// endpoint serves, and follows Prometheus' naming conventions (promlint).
// A vector is gathered only once it has a series.
func ExpectServedAndLinted(t *testing.T, names ...string) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics.Registry: %v", err)
	}
	gathered := map[string]bool{}
	for _, f := range families {
		gathered[f.GetName()] = true
	}
	for _, name := range names {
		if !gathered[name] {
			t.Errorf("%s is not gathered from metrics.Registry", name)
		}
	}
	problems, err := testutil.GatherAndLint(metrics.Registry, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
