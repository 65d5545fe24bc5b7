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

// Package kubevirtcluster reconciles KubeVirtClusters: the infrastructure of
// a cluster whose control plane is hosted elsewhere. There is nothing to
// create; the controller passes the failure domains through and reports the
// cluster provisioned, so Cluster API proceeds.
package kubevirtcluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// Only the status is written (Cluster API's patch helper patches it).
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtclusters/status,verbs=patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch

// Reconciler reconciles KubeVirtClusters.
type Reconciler struct {
	Client client.Client
	// WatchFilterValue restricts the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil {
		return fmt.Errorf("the KubeVirtCluster reconciler needs a Client")
	}
	predicateLog := ctrl.LoggerFrom(ctx).WithValues("controller", "kubevirtcluster")
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), predicateLog, r.WatchFilterValue)
	return capicontrollerutil.NewControllerManagedBy(mgr, predicateLog).
		For(&infrav1.KubeVirtCluster{}, builder.WithPredicates(filter)).
		WithOptions(options).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("KubeVirtCluster"), mgr.GetClient(), &infrav1.KubeVirtCluster{})),
			predicates.ClusterPausedTransitions(mgr.GetScheme(), predicateLog),
			filter).
		Complete(ctx, r)
}

// Reconcile reconciles one KubeVirtCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	kc := &infrav1.KubeVirtCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, kc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, kc.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cluster == nil {
		log.V(4).Info("Waiting for the Cluster controller to set an owner reference")
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("Cluster", klog.KObj(cluster)))
	patchHelper, err := patch.NewHelper(kc, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, kc); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if !kc.DeletionTimestamp.IsZero() {
		// Nothing was created, so nothing waits for deletion.
		return ctrl.Result{}, nil
	}
	defer func() {
		opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
			infrav1.ReadyCondition, clusterv1.PausedCondition,
		}}}
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := patchHelper.Patch(ctx, kc, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()
	reconcileNormal(ctx, kc)
	return ctrl.Result{}, nil
}

// reconcileNormal passes the failure domains through and reports the
// cluster provisioned. Ready is set directly: there is no step below it to
// summarise.
func reconcileNormal(ctx context.Context, kc *infrav1.KubeVirtCluster) {
	kc.Status.FailureDomains = append([]clusterv1.FailureDomain(nil), kc.Spec.FailureDomains...)
	if !ptr.Deref(kc.Status.Initialization.Provisioned, false) {
		kc.Status.Initialization.Provisioned = ptr.To(true)
		ctrl.LoggerFrom(ctx).Info("The cluster infrastructure is provisioned")
	}
	message := "Control plane endpoint comes from the control plane provider"
	if !kc.Spec.ControlPlaneEndpoint.IsZero() {
		message = fmt.Sprintf("Control plane endpoint is %s:%d", kc.Spec.ControlPlaneEndpoint.Host, kc.Spec.ControlPlaneEndpoint.Port)
	}
	conditions.Set(kc, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason, Message: message})
}
