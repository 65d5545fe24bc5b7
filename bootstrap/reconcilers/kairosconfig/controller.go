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

package kairosconfig

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/contract"
	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// Requeue intervals for waits that no watch ends.
const (
	waitForInfrastructureInterval = 10 * time.Second
	// A file's Secret is read from the API server at each retry: the
	// interval doubles while the config waits for one, up to the limit
	// (backoff), so a tenant's hundreds of such configs cost the shared
	// client little. A Secret with the cluster-name label is seen at once.
	waitForFileSourceInterval      = 10 * time.Second
	waitForFileSourceIntervalLimit = 5 * time.Minute
)

// Writes go through Cluster API's patch helper, which patches and never
// updates; finalizers/update is what our Secrets' owner references
// (blockOwnerDeletion) need where OwnerReferencesPermissionEnforcement
// admits them.
// +kubebuilder:rbac:groups=bootstrap.cozystack.io,resources=kairosconfigs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bootstrap.cozystack.io,resources=kairosconfigs/status,verbs=patch
// +kubebuilder:rbac:groups=bootstrap.cozystack.io,resources=kairosconfigs/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machines,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines;kubevirtmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles KairosConfigs.
type Reconciler struct {
	// Client reads management objects from the cache (infrastructure
	// objects and templates of any provider as unstructured) and writes
	// them; it reads Secrets directly.
	Client client.Client
	// SecretCachingClient reads cluster-labelled Secrets (the cluster CA,
	// our token records) from the cache.
	SecretCachingClient client.Client
	// APIReader reads what the cache cannot be trusted with: a Secret that
	// already exists although the cache has not seen it, and the token
	// record before the finalizer goes.
	APIReader client.Reader
	// ClusterCache gives clients and watches for workload clusters.
	ClusterCache clustercache.ClusterCache
	// WatchFilterValue, when set, limits reconciliation to objects with the
	// cluster.x-k8s.io/watch-filter label of that value.
	WatchFilterValue string
	// TokenTTL is the bootstrap token lifetime between refreshes.
	TokenTTL time.Duration
	// TokenKeepAlive bounds how long after its mint a token is refreshed
	// while its node has not joined; DefaultTokenKeepAlive when zero.
	TokenKeepAlive time.Duration
	// InfrastructureKinds are the only kinds read from a Machine's
	// infrastructure reference and its cloned-from annotations;
	// KubeVirtKinds when zero.
	InfrastructureKinds InfrastructureKinds
	// Recorder emits the configs' Events (events.go); the manager's when
	// nil.
	Recorder events.EventRecorder

	controller controller.Controller
	// templates adds a watch per infrastructure template kind, the first
	// time a config waits for a template of that kind to resolve.
	templates *external.ObjectTracker
	now       func() time.Time
	expect    *expectations
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.SecretCachingClient == nil || r.APIReader == nil || r.ClusterCache == nil {
		return errors.New("kairosconfig reconciler: Client, SecretCachingClient, APIReader and ClusterCache are required")
	}
	if r.TokenTTL <= 0 {
		r.TokenTTL = DefaultTokenTTL
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.InfrastructureKinds == (InfrastructureKinds{}) {
		r.InfrastructureKinds = KubeVirtKinds
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("kairosconfig-controller")
	}
	r.expect = newExpectations()
	if err := indexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the kairosconfig controller: %w", err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "kairosconfig")
	c, err := capicontrollerutil.NewControllerManagedBy(mgr, log).
		For(&bootstrapv1.KairosConfig{}).
		Named("kairosconfig").
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToKairosConfig), watchview.Changed(machineView)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToKairosConfigs), clusterEvents(mgr.GetScheme(), log)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretToKairosConfigs)).
		WatchesRawSource(r.ClusterCache.GetClusterSource("kairosconfig", r.clusterToKairosConfigs)).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Build(ctx, r)
	if err != nil {
		return fmt.Errorf("setting up the kairosconfig controller: %w", err)
	}
	r.controller = c
	r.templates = &external.ObjectTracker{Controller: c, Cache: mgr.GetCache(), Scheme: mgr.GetScheme(), PredicateLogger: &log}
	return nil
}

// scope is what one reconcile works on.
type scope struct {
	config  *bootstrapv1.KairosConfig
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
}

// Reconcile brings one KairosConfig closer to having bootstrap data and,
// afterwards, keeps its token alive until the node joins.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	log := ctrl.LoggerFrom(ctx)
	config := &bootstrapv1.KairosConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, config); err != nil {
		if apierrors.IsNotFound(err) {
			r.expect.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.expect.CacheBehind(req.NamespacedName, config.ResourceVersion) {
		// The event of our last write will reconcile the config again.
		log.V(4).Info("The cache has not seen the last write to the KairosConfig yet, waiting")
		return ctrl.Result{}, nil
	}

	machine, machineGone, err := r.ownerMachine(ctx, config)
	if err != nil {
		return ctrl.Result{}, err
	}
	if machine == nil && !machineGone {
		// Cluster API's MachineSet creates the config, owned by the
		// MachineSet, just before the Machine, whose controller makes the
		// Machine the owner moments later (or the MachineSet deletes the
		// config if the Machine cannot be created); that event reconciles
		// the config again. A condition written in between would be
		// overwritten at once, so only a config without that prospect
		// reports the wait.
		log.V(4).Info("KairosConfig has no owner Machine yet, waiting")
		if ownedByMachineSet(config) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.reportBlocked(ctx, config, waitingFor(bootstrapv1.WaitingForOwnerReason, "Waiting for a Machine to own this KairosConfig"))
	}
	clusterName := config.Labels[clusterv1.ClusterNameLabel]
	if machine != nil {
		clusterName = machine.Spec.ClusterName
		log = log.WithValues("Machine", klog.KObj(machine))
	}
	log = log.WithValues("Cluster", klog.KRef(config.Namespace, clusterName))
	ctx = ctrl.LoggerInto(ctx, log)

	cluster, err := util.GetClusterByName(ctx, r.Client, config.Namespace, clusterName)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if !config.DeletionTimestamp.IsZero() || machineGone {
			// Without a Cluster there is no workload cluster left to hold a
			// token, so nothing can leak.
			t, found, err := r.readTokenRecordLive(ctx, config)
			if err != nil {
				return ctrl.Result{}, err
			}
			if found {
				if err := r.forgetTokenRecord(ctx, config, t); err != nil {
					return ctrl.Result{}, err
				}
			}
			return ctrl.Result{}, r.removeFinalizer(ctx, config)
		}
		// Only a config with a live Machine gets here, and a Machine always
		// names its Cluster (spec.clusterName is required). No token is
		// made for a Cluster that does not exist; the Cluster watch
		// reconciles the config when it appears.
		log.Info("Cluster does not exist yet, waiting")
		return ctrl.Result{}, r.reportBlocked(ctx, config, waitingFor(bootstrapv1.WaitingForClusterReason,
			fmt.Sprintf("Cluster %s does not exist", klog.KRef(config.Namespace, clusterName))))
	}

	// Our writes to the config go through writes, so that a reconcile on a
	// cache that has not seen them yet can be told apart. The finalizer
	// and Paused=False are patches of their own (Cluster API's helpers),
	// but the reconcile goes on after them rather than waiting for their
	// events: writes reads them back while the cache is behind, so the
	// bootstrap data is rendered in the reconcile that first sees the
	// config owned by its Machine, not two watch round trips later.
	before, writes := config.ResourceVersion, ownwrites.NewRecorder(r.Client)
	defer func() { r.expect.Wrote(req.NamespacedName, before, writes.Written()) }()
	if err := r.ensureFinalizer(ctx, writes, config); err != nil {
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(config, writes)
	if err != nil {
		return ctrl.Result{}, err
	}
	// A paused config records that, and nothing else; an unpaused one
	// records Paused=False in a patch of its own the first time, as Cluster
	// API's controllers do.
	isPaused, pausedPatched, err := r.ensurePausedCondition(ctx, writes, cluster, config)
	if err != nil || isPaused {
		return ctrl.Result{}, err
	}
	if pausedPatched {
		// The reconcile's own patch starts from the config as the paused
		// helper left it.
		if patchHelper, err = patch.NewHelper(config, writes); err != nil {
			return ctrl.Result{}, err
		}
	}
	s := &scope{config: config, machine: machine, cluster: cluster}
	defer func() {
		if err := r.patchConfig(ctx, patchHelper, config, rerr == nil); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
		}
	}()

	if !config.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if machineGone || !machine.DeletionTimestamp.IsZero() {
		// The Machine is going: its token must not outlive it.
		return r.revokeToken(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// ownedByMachineSet says whether a Cluster API MachineSet owns config: it
// made the config for a Machine it is creating.
func ownedByMachineSet(config *bootstrapv1.KairosConfig) bool {
	return util.HasOwner(config.OwnerReferences, clusterv1.GroupVersion.String(), []string{"MachineSet"})
}

// ownerMachine returns the owning Machine; machineGone is true when the
// config names a Machine owner that no longer exists.
func (r *Reconciler) ownerMachine(ctx context.Context, config *bootstrapv1.KairosConfig) (machine *clusterv1.Machine, machineGone bool, err error) {
	machine, err = util.GetOwnerMachine(ctx, r.Client, config.ObjectMeta)
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the owner Machine: %w", err)
	}
	return machine, false, nil
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	config, machine := s.config, s.machine

	// A restored or moved config (status is not moved) whose Machine already
	// points at our Secret: take the Secret over instead of rendering anew.
	if name := ptr.Deref(machine.Spec.Bootstrap.DataSecretName, ""); name != "" && !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
		config.Status.DataSecretName = name
		config.Status.Initialization.DataSecretCreated = ptr.To(true)
	}

	if ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
		markAvailable(config)
		stored, found, err := r.readTokenRecord(ctx, config)
		if err != nil {
			return ctrl.Result{}, err
		}
		if found && stored.ended != "" {
			// The node joined, or the keep-alive is over: a config's token
			// ends once, and none is minted again, whatever becomes of
			// the Node (deleted before Cluster API set the nodeRef, say).
			return ctrl.Result{}, nil
		}
		joined, err := r.nodeJoined(ctx, s)
		if err != nil {
			return workloadUnavailable(s, err)
		}
		switch {
		case joined && found:
			return ctrl.Result{}, r.endToken(ctx, s, stored, endedJoined)
		case joined:
			// Joined with no record (a restored config): the mark alone.
			return ctrl.Result{}, r.recordEnded(ctx, s, stored, endedJoined)
		case found:
			return r.refreshToken(ctx, s, stored)
		}
		// The token is gone while the node has not joined (restored config,
		// or a Secret deleted by hand): render again with a new token.
	}
	return r.reconcileBootstrapData(ctx, s)
}

// nodeJoined reports whether the Machine's node has registered: Cluster API
// set the nodeRef, or a Node named after the VM with our providerID exists.
func (r *Reconciler) nodeJoined(ctx context.Context, s *scope) (bool, error) {
	if s.machine.Status.NodeRef.IsDefined() {
		return true, nil
	}
	vm := s.machine.Spec.InfrastructureRef.Name
	if vm == "" {
		return false, nil
	}
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return false, err
	}
	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: vm}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading Node %s in the workload cluster: %w", vm, err)
	}
	return node.Spec.ProviderID == contract.ProviderID(vm), nil
}

// reconcileDelete revokes the token before the finalizer goes. The record
// is read directly: this is the last chance to revoke a token, and a cache
// that has not yet seen a record created moments ago must not leak it.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, found, err := r.readTokenRecordLive(ctx, s.config)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found && t.ended == "" {
		if err := r.revokeAndForget(ctx, s, t); err != nil {
			return ctrl.Result{}, err
		}
	}
	controllerutil.RemoveFinalizer(s.config, bootstrapv1.ConfigFinalizer)
	return ctrl.Result{}, nil
}

// workloadUnavailable says, before the data is rendered, that the workload
// cluster cannot be reached yet, and returns the error: the request is
// retried with backoff, and the ClusterCache's source reconciles the config
// as soon as the connection is up.
func workloadUnavailable(s *scope, err error) (ctrl.Result, error) {
	if errors.Is(err, clustercache.ErrClusterNotConnected) && !ptr.Deref(s.config.Status.Initialization.DataSecretCreated, false) {
		markWaiting(s.config, bootstrapv1.WaitingForWorkloadClusterReason, "Waiting for the workload cluster's API server to be reachable")
	}
	return ctrl.Result{}, fmt.Errorf("reaching the workload cluster: %w", err)
}

// watchNodes makes Node events in the workload cluster reconcile the
// KairosConfig of the Machine they belong to, so the token is revoked as
// soon as the node registers.
func (r *Reconciler) watchNodes(ctx context.Context, cluster *clusterv1.Cluster) error {
	if r.controller == nil {
		return nil
	}
	err := r.ClusterCache.Watch(ctx, util.ObjectKey(cluster), clustercache.NewWatcher(clustercache.WatcherOptions{
		Name:         "kairosconfig-watchNodes",
		Watcher:      r.controller,
		Kind:         &corev1.Node{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(r.nodeToKairosConfig(util.ObjectKey(cluster))),
		Predicates:   []predicate.Predicate{nodeRegistered()},
	}))
	if errors.Is(err, clustercache.ErrClusterNotConnected) {
		return nil
	}
	return err
}

func markAvailable(config *bootstrapv1.KairosConfig) {
	conditions.Set(config, metav1.Condition{
		Type:   bootstrapv1.DataSecretAvailableCondition,
		Status: metav1.ConditionTrue,
		Reason: bootstrapv1.DataSecretAvailableReason,
	})
}

func markWaiting(config *bootstrapv1.KairosConfig, reason, message string) {
	conditions.Set(config, metav1.Condition{
		Type:    bootstrapv1.DataSecretAvailableCondition,
		Status:  metav1.ConditionFalse,
		Reason:  reason,
		Message: message,
	})
}

func markInternalError(config *bootstrapv1.KairosConfig) {
	markWaiting(config, bootstrapv1.InternalErrorReason, "Please check controller logs for errors")
}
