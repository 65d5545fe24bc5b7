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

// Package sharedimage imports a resolved template's HTTP image once per
// namespace, content hash and disk shape, into a DataVolume that every
// machine of the templates resolving to it clones, class-based or
// classless. Its controller creates the shared import, keeps the templates
// as its owners, retries a failed import once and imports a deleted one
// again; OriginOf tells which machines clone it, and Images what they
// clone or wait for.
package sharedimage

import (
	"context"
	"fmt"
	"reflect"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/internal/redact"
)

// Attempts is how many times a shared import is tried: once, and once
// more after a failure.
const Attempts = 2

// Images holds the shared imports in a cache of their own: the manager's
// DataVolume cache selects the machines' own disks by their machine-name
// label, and one informer cannot select two labels.
type Images struct {
	cache ctrlcache.Cache
	// failureRestarts is how many importer pod restarts count as a failed
	// import, as for a machine's own import.
	failureRestarts int32
}

// NewImages adds a cache of the shared imports (DataVolumes labelled
// vmspec.SharedImageLabel, in watchNamespace or all namespaces) to the
// manager; its informers are named after controllerName.
func NewImages(mgr ctrl.Manager, controllerName, watchNamespace string, failureRestarts int32) (*Images, error) {
	shared, err := labels.NewRequirement(vmspec.SharedImageLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	opts := ctrlcache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: labels.NewSelector().Add(*shared),
		DefaultTransform:     ctrlcache.TransformStripManagedFields(),
		NewInformer:          capicontrollerutil.NewInformerFunc(mgr.GetScheme(), controllerName+"-shared-images"),
	}
	if watchNamespace != "" {
		opts.DefaultNamespaces = map[string]ctrlcache.Config{watchNamespace: {}}
	}
	c, err := ctrlcache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, fmt.Errorf("creating the shared image cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return &Images{cache: c, failureRestarts: failureRestarts}, nil
}

// Cache is the cache of the shared imports, for watches.
func (i *Images) Cache() ctrlcache.Cache { return i.cache }

// Shared reports whether a template's machines may clone a shared import:
// the template's resolution is an HTTP import, of its class or of its own
// spec.image (a classless template).
func Shared(t *infrav1.KubeVirtMachineTemplate) bool {
	return t.Status.Resolved != nil && t.Status.Resolved.Image.HTTPImport != nil
}

// Origin is where a machine cloned from a template takes its root disk
// from.
type Origin int

const (
	// OwnImage is the machine's own spec.image, imported or cloned for it
	// alone.
	OwnImage Origin = iota
	// AwaitResolution is the template's resolution, which the machine
	// takes and which is not there yet.
	AwaitResolution
	// ResolvedImage is the template's resolved image as it is: a container
	// disk or a golden clone.
	ResolvedImage
	// SharedClone is a clone of the template's shared import.
	SharedClone
)

// OriginOf decides where a machine cloned from template t takes its root
// disk from; image is the machine's spec.image, nil when it takes the
// template's resolution (a class-based template's machine). A machine
// whose spec.image is its template's, the rule by which the KubeVirtMachine
// webhook knows Cluster API's copies, takes the template's resolution too
// when that is an HTTP import: it waits for the resolution and clones the
// shared import. Any other spec.image is the machine's own, and so are
// container disks and clones, which are not shared. A machine gets the
// bytes its own spec names: it clones the shared import only while its
// image is the resolution's.
func OriginOf(t *infrav1.KubeVirtMachineTemplate, image *infrav1.ImageSource) Origin {
	if image != nil && (image.HTTPImport == nil || !t.CopiesImage(image)) {
		return OwnImage
	}
	switch {
	case t.Status.Resolved == nil:
		return AwaitResolution
	case image != nil && !reflect.DeepEqual(*image, t.Status.Resolved.Image):
		// The shared import holds the resolution's bytes, which are not
		// the ones the machine names.
		return OwnImage
	case Shared(t):
		return SharedClone
	}
	return ResolvedImage
}

// Name is the shared import of a template that Shared.
func Name(t *infrav1.KubeVirtMachineTemplate) string {
	return vmspec.SharedImportName(t.Status.Resolved.ContentHash, t.Spec.Template.Spec.RootDisk)
}

// Wait says what a machine waits for instead of cloning the shared
// import: Reason is a KubeVirtMachine condition reason, Message names the
// shared DataVolume.
type Wait struct {
	Reason, Message string
}

// CloneSource is the image a machine of a Shared template boots: a clone
// of the shared import once it succeeded, or what the machine waits for.
func (i *Images) CloneSource(ctx context.Context, t *infrav1.KubeVirtMachineTemplate) (infrav1.ImageSource, *Wait, error) {
	name := Name(t)
	dv := &cdiv1.DataVolume{}
	if err := i.cache.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, dv); err != nil {
		if !apierrors.IsNotFound(err) {
			return infrav1.ImageSource{}, nil, err
		}
		return infrav1.ImageSource{}, &Wait{infrav1.WaitingForImageImportReason,
			fmt.Sprintf("Waiting for the shared import DataVolume %s of KubeVirtMachineTemplate %s to be created", name, t.Name)}, nil
	}
	state := i.stateOf(dv, t.Status.Resolved)
	if state.wait != nil {
		return infrav1.ImageSource{}, state.wait, nil
	}
	return vmspec.SharedCloneSource(name), nil, nil
}

// state is a shared import as its controller and the machines read it.
type state struct {
	// wait is nil once machines may clone it.
	wait *Wait
	// failed: CDI failed this attempt.
	failed bool
	// attempt of the import, 1 or 2.
	attempt int
}

func (i *Images) stateOf(dv *cdiv1.DataVolume, resolved *infrav1.ResolvedMachine) state {
	name := dv.Name
	if !vmspec.SharedImportMatches(dv, resolved) {
		// The name is only ever rendered for this hash and source: this is
		// someone else's disk, and its bytes are not the resolution's.
		return state{wait: &Wait{infrav1.ImageImportFailedReason,
			fmt.Sprintf("DataVolume %s exists and is not the shared import of content hash %s; delete it to import the template's image", name, resolved.ContentHash)}}
	}
	attempt, err := strconv.Atoi(dv.Annotations[vmspec.ImportAttemptAnnotation])
	if err != nil || attempt < 1 {
		attempt = 1
	}
	if !dv.DeletionTimestamp.IsZero() {
		return state{attempt: attempt, wait: &Wait{infrav1.WaitingForImageImportReason,
			fmt.Sprintf("Shared import DataVolume %s is being deleted; it is imported again once gone", name)}}
	}
	running := runningDetail(dv)
	if running == "" && dv.Annotations[vmspec.ImportFailureAnnotation] != "" {
		running = ": " + redact.URLCredentials(dv.Annotations[vmspec.ImportFailureAnnotation])
	}
	failure := ""
	switch {
	case dv.Status.Phase == cdiv1.Succeeded:
		return state{attempt: attempt}
	case dv.Status.Phase == cdiv1.Failed:
		failure = "failed" + running
	case i.failureRestarts > 0 && dv.Status.RestartCount >= i.failureRestarts:
		// The count that failed it, not CDI's, which keeps growing: the
		// message stays the same while the importer keeps restarting.
		failure = fmt.Sprintf("its importer pod restarted %d times%s", i.failureRestarts, running)
	}
	if failure != "" {
		next := "importing it once more"
		if attempt >= Attempts {
			next = "delete it to import again"
		}
		return state{attempt: attempt, failed: true, wait: &Wait{infrav1.ImageImportFailedReason,
			fmt.Sprintf("Shared import DataVolume %s, attempt %d of %d: %s; %s", name, attempt, Attempts, failure, next)}}
	}
	phase := string(dv.Status.Phase)
	if phase == "" {
		phase = "waiting for CDI"
	}
	if p := string(dv.Status.Progress); p != "" && p != "N/A" {
		phase += ", " + p
	}
	return state{attempt: attempt, wait: &Wait{infrav1.WaitingForImageImportReason,
		fmt.Sprintf("Shared import DataVolume %s: %s", name, phase)}}
}

// runningDetail is CDI's word on a failing import, from the DataVolume's
// Running condition.
func runningDetail(dv *cdiv1.DataVolume) string {
	if m := runningMessage(dv); m != "" {
		return ": " + redact.URLCredentials(m)
	}
	return ""
}

// runningMessage is the DataVolume's Running condition message.
func runningMessage(dv *cdiv1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeRunning && c.Message != "" {
			return c.Message
		}
	}
	return ""
}

// templateOwners lists the templates that own a shared import.
func templateOwners(o metav1.Object) []string {
	var names []string
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == "KubeVirtMachineTemplate" && ref.APIVersion == infrav1.GroupVersion.String() {
			names = append(names, ref.Name)
		}
	}
	return names
}

// TemplatesOf lists the templates, by key, that own a shared import: their
// machines wait for it.
func TemplatesOf(o client.Object) []client.ObjectKey {
	names := templateOwners(o)
	keys := make([]client.ObjectKey, 0, len(names))
	for _, n := range names {
		keys = append(keys, client.ObjectKey{Namespace: o.GetNamespace(), Name: n})
	}
	return keys
}
