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

package sharedimage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/metrics"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// Indexes of the manager's cache.
const (
	// templateIndex indexes resolved KubeVirtMachineTemplates by the shared
	// import their machines clone.
	templateIndex = "infrastructure.cozystack.io/shared-import"
	// cloneSourceIndex indexes the machines' DataVolumes by the claim in
	// their own namespace they clone.
	cloneSourceIndex = "infrastructure.cozystack.io/clone-source-claim"
)

// The shared import is a DataVolume of no machine: it is created,
// patched (its owners, its finalizer) and deleted (a failed attempt) here.
// Its CA ConfigMap is created once, beside it, and goes with it.
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// The Events on a template, one per change this controller made: its
// image is imported once into a shared import it creates, or it shares
// one imported for another template.
const (
	// SharedImportCreatedEvent: the shared import was created (or created
	// again for its second attempt).
	SharedImportCreatedEvent = "SharedImportCreated"
	// SharedImportJoinedEvent: the template became an owner of a shared
	// import that exists.
	SharedImportJoinedEvent = "SharedImportJoined"
)

// Reconciler keeps one shared import per namespace, resolved image and disk
// shape while a template resolves to it. Its requests are the shared
// imports' keys.
type Reconciler struct {
	// Client reads templates and the machines' DataVolumes through the
	// manager's cache and writes.
	Client client.Client
	// APIReader reads the CA ConfigMap, which no cache holds.
	APIReader client.Reader
	// Images holds the shared imports.
	Images *Images
	// WatchFilterValue restricts the controller to templates with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// Recorder emits the templates' Events; the manager's when nil.
	Recorder events.EventRecorder

	// retries remembers, between deleting a failed first attempt and
	// creating the second, that the next one is the retry. A restart in
	// between forgets it, which costs one more attempt, never a skipped
	// one.
	retries sync.Map
}

// SetupWithManager registers the controller: templates, the shared imports
// and the machines' clones of them reconcile the shared import's key.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Images == nil {
		return fmt.Errorf("the shared image reconciler needs a Client, an APIReader and the shared Images")
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("sharedimage-controller")
	}
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(ctx, &infrav1.KubeVirtMachineTemplate{}, templateIndex, sharedImportOfTemplate); err != nil {
		return fmt.Errorf("indexing KubeVirtMachineTemplates by shared import: %w", err)
	}
	if err := indexer.IndexField(ctx, &cdiv1.DataVolume{}, cloneSourceIndex, clonedClaim); err != nil {
		return fmt.Errorf("indexing DataVolumes by clone source: %w", err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "sharedimage")
	templates := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		keys := sharedImportOfTemplate(o)
		if len(keys) == 0 {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: keys[0]}}}
	})
	clones := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		keys := clonedClaim(o)
		if len(keys) == 0 {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: keys[0]}}}
	})
	return capicontrollerutil.NewControllerManagedBy(mgr, log).
		Named("sharedimage").
		WithOptions(options).
		Watches(&infrav1.KubeVirtMachineTemplate{}, templates,
			predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&cdiv1.DataVolume{}, clones).
		WatchesRawSource(source.Kind(r.Images.Cache(), &cdiv1.DataVolume{}, &handler.TypedEnqueueRequestForObject[*cdiv1.DataVolume]{})).
		Complete(ctx, r)
}

// sharedImportOfTemplate indexes a template that is Shared by its shared
// import's name.
func sharedImportOfTemplate(o client.Object) []string {
	t, ok := o.(*infrav1.KubeVirtMachineTemplate)
	if !ok || !Shared(t) {
		return nil
	}
	return []string{Name(t)}
}

// clonedClaim indexes a machine's DataVolume by the claim of its own
// namespace it clones, which is how machines clone a shared import.
func clonedClaim(o client.Object) []string {
	dv, ok := o.(*cdiv1.DataVolume)
	if !ok || dv.Spec.Source == nil || dv.Spec.Source.PVC == nil {
		return nil
	}
	if ns := dv.Spec.Source.PVC.Namespace; ns != "" && ns != dv.Namespace {
		return nil
	}
	return []string{dv.Spec.Source.PVC.Name}
}

// Reconcile reconciles one shared import.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("DataVolume", klog.KRef(req.Namespace, req.Name))
	ctx = ctrl.LoggerInto(ctx, log)

	dv := &cdiv1.DataVolume{}
	if err := r.Images.cache.Get(ctx, req.NamespacedName, dv); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		dv = nil
	}
	if dv != nil && !dv.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.releaseWhenCloned(ctx, dv)
	}

	owners, resolved, rootDisk, err := r.templates(ctx, req)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(owners) == 0 {
		// No template resolves to it: garbage collection deletes it with
		// its last owner, and a machine's clone in progress holds it by
		// the finalizer.
		return ctrl.Result{}, nil
	}
	if dv == nil {
		return ctrl.Result{}, r.create(ctx, req, owners, resolved, rootDisk)
	}
	st := r.Images.stateOf(dv, resolved)
	if !vmspec.SharedImportMatches(dv, resolved) {
		// Not ours to touch; the machines say so.
		return ctrl.Result{}, nil
	}
	if err := r.adoptOwners(ctx, dv, owners); err != nil {
		return ctrl.Result{}, err
	}
	if st.failed && st.attempt < Attempts {
		r.retries.Store(req.NamespacedName, st.attempt+1)
		err := r.Client.Delete(ctx, dv, client.Preconditions{UID: &dv.UID})
		if client.IgnoreNotFound(err) != nil {
			r.retries.Delete(req.NamespacedName)
			return ctrl.Result{}, fmt.Errorf("deleting the failed shared import: %w", err)
		}
		log.Info("The shared import failed; deleting it to import once more", "attempt", st.attempt, "reason", st.wait.Message)
		return ctrl.Result{}, nil
	}
	if st.failed {
		if err := r.keepFailure(ctx, dv); err != nil {
			return ctrl.Result{}, err
		}
	}
	if dv.Status.Phase != cdiv1.Succeeded && resolved.Image.HTTPImport.CABundle != "" {
		// The importer waits for its CA bundle: bring it back if lost.
		return ctrl.Result{}, r.ensureCA(ctx, dv, resolved, rootDisk)
	}
	return ctrl.Result{}, nil
}

// keepFailure records CDI's words on the failed import, when it has
// some, in the DataVolume's ImportFailureAnnotation: the machines read
// them from there while CDI's restarted importer runs and the Running
// condition has none.
func (r *Reconciler) keepFailure(ctx context.Context, dv *cdiv1.DataVolume) error {
	words := runningMessage(dv)
	if words == "" || dv.Annotations[vmspec.ImportFailureAnnotation] == words {
		return nil
	}
	patched := dv.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[vmspec.ImportFailureAnnotation] = words
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(dv)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// templates returns the owner references of the templates resolving to
// the shared import, with the resolution and root disk of the oldest.
func (r *Reconciler) templates(ctx context.Context, req ctrl.Request) ([]metav1.OwnerReference, *infrav1.ResolvedMachine, *infrav1.RootDisk, error) {
	list := &infrav1.KubeVirtMachineTemplateList{}
	if err := r.Client.List(ctx, list, client.InNamespace(req.Namespace), client.MatchingFields{templateIndex: req.Name}); err != nil {
		return nil, nil, nil, err
	}
	var owners []metav1.OwnerReference
	var first *infrav1.KubeVirtMachineTemplate
	for i := range list.Items {
		t := &list.Items[i]
		if !t.DeletionTimestamp.IsZero() || !r.matchesFilter(t) {
			continue
		}
		owners = append(owners, vmspec.TemplateOwnerReference(t))
		if first == nil || t.CreationTimestamp.Before(&first.CreationTimestamp) {
			first = t
		}
	}
	if first == nil {
		return nil, nil, nil, nil
	}
	slices.SortFunc(owners, func(a, b metav1.OwnerReference) int { return strings.Compare(a.Name, b.Name) })
	return owners, first.Status.Resolved, first.Spec.Template.Spec.RootDisk, nil
}

func (r *Reconciler) matchesFilter(t *infrav1.KubeVirtMachineTemplate) bool {
	return r.WatchFilterValue == "" || t.Labels[clusterv1.WatchLabel] == r.WatchFilterValue
}

// create imports the image: the DataVolume, then its CA bundle, which the
// DataVolume owns.
func (r *Reconciler) create(ctx context.Context, req ctrl.Request, owners []metav1.OwnerReference, resolved *infrav1.ResolvedMachine, rootDisk *infrav1.RootDisk) error {
	attempt := 1
	if v, ok := r.retries.Load(req.NamespacedName); ok {
		attempt = v.(int)
	}
	dv, _ := vmspec.SharedImport(vmspec.SharedImportInput{
		Namespace: req.Namespace, Resolved: resolved, RootDisk: rootDisk, Attempt: attempt, Owners: owners,
	})
	if err := r.Client.Create(ctx, dv); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The cache is behind; its event brings the import back here.
			return nil
		}
		return fmt.Errorf("creating the shared import: %w", err)
	}
	r.retries.Delete(req.NamespacedName)
	ctrl.LoggerFrom(ctx).Info("Importing the templates' image once into a shared DataVolume", "attempt", attempt, "templates", len(owners))
	r.recordOwners(dv.Namespace, owners, SharedImportCreatedEvent, "Importing the image once into the shared DataVolume %s (attempt %d) for the machines to clone", dv.Name, attempt)
	metrics.SharedImportCreated()
	return r.ensureCA(ctx, dv, resolved, rootDisk)
}

// ensureCA creates the shared import's CA ConfigMap when its image has a
// CA bundle and the ConfigMap does not exist.
func (r *Reconciler) ensureCA(ctx context.Context, dv *cdiv1.DataVolume, resolved *infrav1.ResolvedMachine, rootDisk *infrav1.RootDisk) error {
	_, ca := vmspec.SharedImport(vmspec.SharedImportInput{Namespace: dv.Namespace, Resolved: resolved, RootDisk: rootDisk})
	if ca == nil {
		return nil
	}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ca), &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	vmspec.SharedImportCA(ca, dv)
	if err := r.Client.Create(ctx, ca); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the shared import's CA ConfigMap: %w", err)
	}
	return nil
}

// adoptOwners adds every template resolving to the import as an owner.
// Owners that are gone are garbage collection's to drop.
func (r *Reconciler) adoptOwners(ctx context.Context, dv *cdiv1.DataVolume, owners []metav1.OwnerReference) error {
	var missing []metav1.OwnerReference
	for _, o := range owners {
		if !slices.ContainsFunc(dv.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == o.UID }) {
			missing = append(missing, o)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	original := dv.DeepCopy()
	dv.OwnerReferences = append(dv.OwnerReferences, missing...)
	if err := r.Client.Patch(ctx, dv, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding templates as owners of the shared import: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("A further template shares the import", "templates", len(dv.OwnerReferences))
	r.recordOwners(dv.Namespace, missing, SharedImportJoinedEvent, "The machines clone the shared DataVolume %s, imported for another template", dv.Name)
	return nil
}

// recordOwners emits an Event on each template of owners.
func (r *Reconciler) recordOwners(namespace string, owners []metav1.OwnerReference, reason, note string, args ...any) {
	for _, o := range owners {
		t := &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: o.Name, UID: o.UID}}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, reason, "Import", note, args...)
	}
}

// releaseWhenCloned removes the finalizer of a shared import being deleted
// once no machine's clone of it is in progress.
func (r *Reconciler) releaseWhenCloned(ctx context.Context, dv *cdiv1.DataVolume) error {
	if !controllerutil.ContainsFinalizer(dv, vmspec.CloneSourceFinalizer) {
		return nil
	}
	clones := &cdiv1.DataVolumeList{}
	if err := r.Client.List(ctx, clones, client.InNamespace(dv.Namespace), client.MatchingFields{cloneSourceIndex: dv.Name}); err != nil {
		return err
	}
	for i := range clones.Items {
		c := &clones.Items[i]
		if c.DeletionTimestamp.IsZero() && c.Status.Phase != cdiv1.Succeeded && c.Status.Phase != cdiv1.Failed {
			ctrl.LoggerFrom(ctx).V(4).Info("The shared import is held while a machine clones it", "clone", klog.KObj(c))
			return nil
		}
	}
	original := dv.DeepCopy()
	controllerutil.RemoveFinalizer(dv, vmspec.CloneSourceFinalizer)
	err := r.Client.Patch(ctx, dv, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{}))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing the shared import: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("No machine clones the shared import; releasing it for deletion")
	return nil
}
