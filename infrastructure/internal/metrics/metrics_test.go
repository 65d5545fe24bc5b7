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
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/cluster-api-workers/internal/metrics/metricstest"
)

// TestServedOnTheManagersRegistry: the metrics are on controller-runtime's
// registry, which the manager's metrics endpoint serves, and follow
// Prometheus' naming conventions (promlint).
func TestServedOnTheManagersRegistry(t *testing.T) {
	// A vector is gathered once it has a series.
	SharedImportCreated()
	CreateRefused("VirtualMachine", apierrors.NewForbidden(schema.GroupResource{}, "vm", nil))
	names := []string{
		"cozystack_workers_infrastructure_machine_provisioned_seconds",
		"cozystack_workers_infrastructure_image_imports_total",
		"cozystack_workers_infrastructure_shared_import_clones_total",
		"cozystack_workers_infrastructure_shared_import_saved_bytes_total",
		"cozystack_workers_infrastructure_create_refusals_total",
	}
	metricstest.ExpectServedAndLinted(t, names...)
}

func TestObserveProvisioned(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC))
	before := metricstest.ReadHistogram(t, Provisioned)
	ObserveProvisioned(created, created.Add(42*time.Second))
	after := metricstest.ReadHistogram(t, Provisioned)
	if after.Count-before.Count != 1 || after.Sum-before.Sum != 42 {
		t.Errorf("one observation of 42 s moved the histogram by %d observations and %v s", after.Count-before.Count, after.Sum-before.Sum)
	}
}

// rootDisk is a machine's root DataVolume of size from source.
func rootDisk(size string, source *cdiv1.DataVolumeSource) *cdiv1.DataVolume {
	storage := &cdiv1.StorageSpec{}
	if size != "" {
		storage.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
	}
	return &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{Source: source, Storage: storage}}
}

func TestImportsClonesAndSavedBytes(t *testing.T) {
	shared, own := ImageImports.WithLabelValues(SharedScope), ImageImports.WithLabelValues(MachineScope)
	type counts struct{ shared, own, clones, saved float64 }
	read := func() counts {
		return counts{testutil.ToFloat64(shared), testutil.ToFloat64(own), testutil.ToFloat64(SharedImportClones), testutil.ToFloat64(SavedBytes)}
	}
	clone := &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "image-0123456789abcdef-0123456789"}}
	http := &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/worker.raw"}}
	for _, tc := range []struct {
		name  string
		count func()
		want  counts
	}{
		{"a template's shared import", SharedImportCreated, counts{shared: 1}},
		{"a clone of the shared import saves its size", func() { RootDiskCreated(rootDisk("10Gi", clone), true) }, counts{clones: 1, saved: 10 << 30}},
		{"a clone of the shared import without a size saves what is not known", func() { RootDiskCreated(rootDisk("", clone), true) }, counts{clones: 1}},
		{"a machine's own import", func() { RootDiskCreated(rootDisk("10Gi", http), false) }, counts{own: 1}},
		{"a clone of a golden image is neither", func() { RootDiskCreated(rootDisk("10Gi", clone), false) }, counts{}},
	} {
		before := read()
		tc.count()
		after := read()
		got := counts{after.shared - before.shared, after.own - before.own, after.clones - before.clones, after.saved - before.saved}
		if got != tc.want {
			t.Errorf("%s: moved the counters by %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCreateRefusedByReason(t *testing.T) {
	gr := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}
	webhookDenial := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
		Message: `admission webhook "virtualmachine-validator.kubevirt.io" denied the request`}}
	for _, tc := range []struct {
		err  error
		kind string
		want string
	}{
		{apierrors.NewInvalid(schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}, "vm", field.ErrorList{field.Invalid(field.NewPath("spec"), "", "x")}), "VirtualMachine", "Invalid"},
		{apierrors.NewForbidden(gr, "vm", nil), "VirtualMachine", "Forbidden"},
		{webhookDenial, "VirtualMachine", "BadRequest"},
		{apierrors.NewRequestEntityTooLargeError("limit"), "Secret", "RequestEntityTooLarge"},
		{apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "tenant"), "DataVolume", "NotFound"},
	} {
		c := CreateRefusals.WithLabelValues(tc.kind, tc.want)
		before := testutil.ToFloat64(c)
		CreateRefused(tc.kind, tc.err)
		if got := testutil.ToFloat64(c) - before; got != 1 {
			t.Errorf("%v: counted %v under kind %s and reason %s, want 1", tc.err, got, tc.kind, tc.want)
		}
	}
}
