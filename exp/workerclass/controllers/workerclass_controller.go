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

// Package controllers holds the class controller: it keeps the built-in
// classes and the default platform configuration present, reports each
// class's users, and keeps a class in use from being deleted.
package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// UserKinds are the kinds that use classes: pools and templates.
var UserKinds = []schema.GroupVersionKind{workerclassv1.PoolGroupVersionKind, workerclassv1.KubeVirtMachineTemplateGroupVersionKind}

// Classes are written through Cluster API's patch helper, which patches
// and never updates; nothing is owned by a class. Users (pools, templates)
// are only watched and listed, as metadata.
// +kubebuilder:rbac:groups=cozystack.io,resources=workerclasses,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=cozystack.io,resources=workerclasses/status,verbs=patch
// +kubebuilder:rbac:groups=cozystack.io,resources=workerplatforms,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=apps.cozystack.io,resources=kubernetesnodes,verbs=list;watch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// WorkerClassReconciler reports a class's users and holds the in-use
// finalizer until none is left.
type WorkerClassReconciler struct {
	// Client reads and patches classes, and counts users from the cache
	// (their metadata, which the watches keep).
	Client client.Client
	// UserReader lists users live, only before the in-use finalizer is
	// released, so that a cache that has not yet seen a new user never
	// lets a class in use go. It must be uncached.
	UserReader client.Reader
	Recorder   events.EventRecorder
}

// SetupWithManager watches classes, and pools and templates (metadata
// only) when their kinds are installed.
func (r *WorkerClassReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.UserReader == nil {
		r.UserReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("workerclass-controller")
	}
	predicateLog := ctrl.LoggerFrom(ctx).WithValues("controller", "workerclass")
	b := capicontrollerutil.NewControllerManagedBy(mgr, predicateLog).For(&workerclassv1.WorkerClass{}).Named("workerclass")
	for _, gvk := range UserKinds {
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				// Without a watch the counts refresh on class events only;
				// deletion stays safe because release lists users live.
				ctrl.LoggerFrom(ctx).Info("A kind that uses classes is not installed; its users are counted when a class changes", "kind", gvk.String())
				continue
			}
			return fmt.Errorf("looking up %s: %w", gvk, err)
		}
		user := &metav1.PartialObjectMetadata{}
		user.SetGroupVersionKind(gvk)
		b = b.WatchesMetadata(user, handler.EnqueueRequestsFromMapFunc(classOfUser), classLabelChanged)
	}
	return b.Complete(ctx, r)
}

// classLabelChanged lets through a user's creation and deletion, and of
// its updates only those that change its class label (both classes are
// then reconciled): every other change of a pool or template, its status
// included, changes no class's counts.
var classLabelChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[workerclassv1.WorkerClassLabel] != e.ObjectNew.GetLabels()[workerclassv1.WorkerClassLabel]
	},
}

// classOfUser maps a pool or template to the class its label names.
func classOfUser(_ context.Context, obj client.Object) []reconcile.Request {
	if name := obj.GetLabels()[workerclassv1.WorkerClassLabel]; name != "" {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
	}
	return nil
}

// Reconcile updates one class's users, conditions and finalizer, with one
// deferred patch.
func (r *WorkerClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	class := &workerclassv1.WorkerClass{}
	if err := r.Client.Get(ctx, req.NamespacedName, class); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, ensureBuiltinClass(ctx, r.Client, req.Name)
		}
		return ctrl.Result{}, err
	}
	helper, err := patch.NewHelper(class, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := helper.Patch(ctx, class,
			patch.WithOwnedConditions{Conditions: []string{workerclassv1.InUseCondition, workerclassv1.ReadyCondition}},
			patch.WithStatusObservedGeneration{}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	releasing := !class.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(class, workerclassv1.WorkerClassInUseFinalizer)
	users, err := r.listUsers(ctx, r.Client, class.Name)
	if err == nil && releasing && users.pools+users.templates == 0 {
		// The cache may not have seen a user created a moment ago: the
		// finalizer goes only on a live count of none.
		users, err = r.listUsers(ctx, r.UserReader, class.Name)
	}
	if err != nil {
		conditions.Set(class, metav1.Condition{Type: workerclassv1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: workerclassv1.UsersUnknownReason, Message: "The pools and templates using this class could not be listed"})
		conditions.Set(class, metav1.Condition{Type: workerclassv1.InUseCondition, Status: metav1.ConditionUnknown,
			Reason: workerclassv1.UsersUnknownReason, Message: "The pools and templates using this class could not be listed"})
		return ctrl.Result{}, err
	}
	setUsers(class, users)

	if class.DeletionTimestamp.IsZero() {
		controllerutil.AddFinalizer(class, workerclassv1.WorkerClassInUseFinalizer)
		return ctrl.Result{}, nil
	}
	if !releasing {
		return ctrl.Result{}, nil
	}
	if users.pools+users.templates > 0 {
		r.Recorder.Eventf(class, nil, corev1.EventTypeWarning, "DeletionBlocked", "Delete",
			"Class is used by %d pool(s) and %d template(s); it is deleted once none uses it", users.pools, users.templates)
		log.Info("Deletion of the class waits until no pool or template uses it", "pools", users.pools, "templates", users.templates)
		return ctrl.Result{}, nil
	}
	controllerutil.RemoveFinalizer(class, workerclassv1.WorkerClassInUseFinalizer)
	r.Recorder.Eventf(class, nil, corev1.EventTypeNormal, "Released", "Delete", "Class is no longer used; deletion proceeds")
	log.Info("Released the class for deletion: no pool or template uses it")
	return ctrl.Result{}, nil
}

// classUsers counts a class's users; their names stay out of its status.
type classUsers struct {
	pools, templates int32
	namespaces       sets.Set[string]
}

// listUsers lists, through reader, the pools and templates labelled with
// the class, as metadata. A kind that is not installed has no users.
func (r *WorkerClassReconciler) listUsers(ctx context.Context, reader client.Reader, class string) (classUsers, error) {
	users := classUsers{namespaces: sets.New[string]()}
	var errs []error
	for _, gvk := range UserKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := reader.List(ctx, list, client.MatchingLabels{workerclassv1.WorkerClassLabel: class})
		switch {
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("listing %s using class %s: %w", gvk.Kind, class, err))
			continue
		}
		for _, item := range list.Items {
			users.namespaces.Insert(item.Namespace)
		}
		if gvk == workerclassv1.PoolGroupVersionKind {
			users.pools += int32(len(list.Items))
		} else {
			users.templates += int32(len(list.Items))
		}
	}
	return users, errors.Join(errs...)
}

// setUsers writes the counts and the conditions.
func setUsers(class *workerclassv1.WorkerClass, users classUsers) {
	class.Status.PoolCount, class.Status.TemplateCount = users.pools, users.templates
	class.Status.NamespaceCount = int32(users.namespaces.Len())

	inUse := metav1.Condition{Type: workerclassv1.InUseCondition, Status: metav1.ConditionFalse, Reason: workerclassv1.NotInUseReason,
		Message: "No pool or template uses this class"}
	if users.pools+users.templates > 0 {
		inUse = metav1.Condition{Type: workerclassv1.InUseCondition, Status: metav1.ConditionTrue, Reason: workerclassv1.InUseReason,
			Message: fmt.Sprintf("Used by %d pool(s) and %d template(s)", users.pools, users.templates)}
	}
	conditions.Set(class, inUse)
	conditions.Set(class, metav1.Condition{Type: workerclassv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: workerclassv1.ReadyReason})
}
