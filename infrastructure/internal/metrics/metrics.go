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

// Package metrics is the KubeVirt infrastructure provider's Prometheus
// metrics, registered on controller-runtime's metrics.Registry and so
// served on the manager's metrics endpoint. Each is counted once at the
// transition it names, never per reconcile, and no label names an object:
// the labels' values are the few kinds a machine creates and the API
// server's reasons.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sharedmetrics "github.com/cozystack/cluster-api-workers/internal/metrics"
)

// The scope label's values of ImageImports.
const (
	// SharedScope is a template's shared import, which its machines clone.
	SharedScope = "shared"
	// MachineScope is a machine's own import.
	MachineScope = "machine"
)

var (
	// Provisioned is the time from a Machine's creation to its
	// KubeVirtMachine being provisioned.
	Provisioned = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cozystack_workers_infrastructure_machine_provisioned_seconds",
		Help:    "Seconds from a Machine's creation to its KubeVirtMachine being provisioned (its instance ready).",
		Buckets: sharedmetrics.MachineDurationBuckets,
	})
	// ImageImports counts the HTTP imports created, by scope.
	ImageImports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cozystack_workers_infrastructure_image_imports_total",
		Help: "HTTP image imports (DataVolumes) created: scope shared for a template's shared import, machine for a machine's own.",
	}, []string{"scope"})
	// SharedImportClones counts the root disks cloned from a template's
	// shared import instead of imported.
	SharedImportClones = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cozystack_workers_infrastructure_shared_import_clones_total",
		Help: "Machines' root disks cloned from their template's shared import instead of imported.",
	})
	// SavedBytes counts the bytes of the root disks cloned from a shared
	// import: what those machines did not import again.
	SavedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cozystack_workers_infrastructure_shared_import_saved_bytes_total",
		Help: "Root disk bytes not imported again because the disk was cloned from its template's shared import.",
	})
	// CreateRefusals counts the creates of a machine's objects that the
	// infrastructure cluster's API server refused (KubeVirt's and CDI's
	// admission, a quota, the schema), by kind and the API's reason.
	CreateRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cozystack_workers_infrastructure_create_refusals_total",
		Help: "Creates of a machine's objects the infrastructure cluster's API server refused (KubeVirt's or CDI's admission, a quota, the schema), by kind and the API server's reason.",
	}, []string{"kind", "reason"})
)

func init() {
	metrics.Registry.MustRegister(Provisioned, ImageImports, SharedImportClones, SavedBytes, CreateRefusals)
}

// ObserveProvisioned records that a Machine created at created is
// provisioned at now.
func ObserveProvisioned(created metav1.Time, now time.Time) {
	Provisioned.Observe(sharedmetrics.SinceCreation(created, now))
}

// RootDiskCreated counts a machine's root DataVolume just created: a clone
// of its template's shared import (sharedClone) saves its size, and an
// HTTP source is the machine's own import.
func RootDiskCreated(dv *cdiv1.DataVolume, sharedClone bool) {
	switch {
	case sharedClone:
		SharedImportClones.Inc()
		if dv.Spec.Storage != nil {
			size := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
			SavedBytes.Add(float64(size.Value()))
		}
	case dv.Spec.Source != nil && dv.Spec.Source.HTTP != nil:
		ImageImports.WithLabelValues(MachineScope).Inc()
	}
}

// SharedImportCreated counts a template's shared import just created.
func SharedImportCreated() {
	ImageImports.WithLabelValues(SharedScope).Inc()
}

// CreateRefused counts the API server's refusal of a create of kind; the
// reason is the API's, one of the few a refusal has (an admission
// webhook's denial carries its code when it gives no reason).
func CreateRefused(kind string, err error) {
	CreateRefusals.WithLabelValues(kind, string(refusalReason(err))).Inc()
}

func refusalReason(err error) metav1.StatusReason {
	switch {
	case apierrors.IsInvalid(err):
		return metav1.StatusReasonInvalid
	case apierrors.IsForbidden(err):
		return metav1.StatusReasonForbidden
	case apierrors.IsBadRequest(err):
		return metav1.StatusReasonBadRequest
	case apierrors.IsRequestEntityTooLargeError(err):
		return metav1.StatusReasonRequestEntityTooLarge
	case apierrors.IsNotFound(err):
		return metav1.StatusReasonNotFound
	}
	return metav1.StatusReasonUnknown
}
