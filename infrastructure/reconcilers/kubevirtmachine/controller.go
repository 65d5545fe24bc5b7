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

// Package kubevirtmachine reconciles KubeVirtMachines: it creates each
// machine's VirtualMachine, root DataVolume and cloud-init Secret once,
// reports their state as conditions, and on deletion waits until the VM, its
// instance and its disks are gone.
package kubevirtmachine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
	"github.com/cozystack/cluster-api-workers/internal/redact"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// DefaultImportFailureRestarts is how many importer pod restarts of a root
// DataVolume count as a failed import. A healthy import, however slow, does
// not restart.
const DefaultImportFailureRestarts int32 = 3

// BootstrapDataKey is the key of the bootstrap data in a Cluster API
// bootstrap Secret.
const BootstrapDataKey = "value"

// Writes go through Cluster API's patch helper, which patches and never
// updates; finalizers/update is what the owner references
// (blockOwnerDeletion) of the machine's VM, disks and Secrets need where
// OwnerReferencesPermissionEnforcement admits them.
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines/status,verbs=patch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=list
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes/source,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=cozystack.io,resources=workerplatforms,verbs=get;list;watch

// Reconciler reconciles KubeVirtMachines.
type Reconciler struct {
	// Client reads through the cache and writes. The manager wires it with
	// strict field validation, so a VM or DataVolume field the installed
	// KubeVirt or CDI does not know fails loudly instead of being dropped.
	Client client.Client
	// APIReader reads objects the cache does not hold: bootstrap Secrets
	// without the cluster-name label.
	APIReader client.Reader
	// Infrastructure is where the machines' VMs, instances, disks,
	// cloud-init Secrets and import CAs live: the management cluster or
	// one of its own (setup.Reconcilers makes it).
	Infrastructure *infracluster.Cluster
	// WatchFilterValue restricts the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// ImportFailureRestarts is how many importer pod restarts count as a
	// failed import; DefaultImportFailureRestarts when zero.
	ImportFailureRestarts int32
	// Clones authorizes a clone source the machine's spec names as the
	// machine's namespace before its DataVolume is created.
	Clones *cloneauth.Authorizer
	// SharedImages tells a machine of a template that resolves to an HTTP
	// import which shared import to clone, or what it waits for. Nil with a
	// remote infrastructure cluster: every machine imports its own image.
	SharedImages *sharedimage.Images
	// WorkerClasses is the WorkerClass feature gate: with it, a clone
	// source of the hoster's golden catalog (the WorkerPlatform) that a
	// class-based template resolved to is not authorized as the tenant.
	WorkerClasses bool
	// Recorder emits the machine's Events (events.go); the manager's
	// when nil.
	Recorder events.EventRecorder
	// Placement is the hoster's placement policy in force: no VM is
	// created for a spec that asks for more (admitted before the policy
	// changed, or written while the webhook was down), and every VM is
	// kept off the reserved nodes. The zero Policy allows nothing.
	Placement placement.Policy

	ownWrites *ownwrites.Versions
	// createdVMs holds the machines whose VirtualMachine a reconcile
	// created and the cache has not shown yet: a reconcile in that window
	// reads the VM from the API server rather than sending a create that
	// can only fail.
	createdVMs ownwrites.Children
}

// SetupWithManager registers the controller and its watches. VirtualMachines,
// VirtualMachineInstances and DataVolumes map back to their machine by the
// machine-name label, so nothing is polled; their updates pass only when
// they change what the controller reads (predicates.go).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Infrastructure == nil || r.Clones == nil {
		return fmt.Errorf("the KubeVirtMachine reconciler needs a Client, an APIReader, the infrastructure cluster and a clone Authorizer")
	}
	if r.SharedImages == nil && !r.Infrastructure.Remote {
		return fmt.Errorf("the KubeVirtMachine reconciler needs the shared Images in the management cluster")
	}
	if r.ImportFailureRestarts == 0 {
		r.ImportFailureRestarts = DefaultImportFailureRestarts
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("kubevirtmachine-controller")
	}
	r.ownWrites = ownwrites.New()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.KubeVirtMachine{}, clonedFromTemplateIndex, clonedFromTemplate); err != nil {
		return fmt.Errorf("indexing KubeVirtMachines by template: %w", err)
	}
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.KubeVirtMachineList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	predicateLog := ctrl.LoggerFrom(ctx).WithValues("controller", "kubevirtmachine")
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), predicateLog, r.WatchFilterValue)
	byMachineLabel := handler.EnqueueRequestsFromMapFunc(machineForLabelledObject)
	infra := r.Infrastructure.Cache
	b := capicontrollerutil.NewControllerManagedBy(mgr, predicateLog).
		For(&infrav1.KubeVirtMachine{}, builder.WithPredicates(filter)).
		WithOptions(options).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("KubeVirtMachine"))),
			watchview.Changed(machineView), filter).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), predicateLog),
			filter).
		WatchesRawSource(source.Kind[client.Object](infra, &kubevirtv1.VirtualMachine{}, byMachineLabel, watchview.Changed(viewOfVirtualMachine))).
		WatchesRawSource(source.Kind[client.Object](infra, &kubevirtv1.VirtualMachineInstance{}, byMachineLabel, watchview.Changed(viewOfInstance))).
		WatchesRawSource(source.Kind[client.Object](infra, &cdiv1.DataVolume{}, byMachineLabel, watchview.Changed(viewOfDataVolume))).
		Watches(&infrav1.KubeVirtMachineTemplate{},
			handler.EnqueueRequestsFromMapFunc(r.templateToMachines),
			templateResolved())
	if r.SharedImages != nil {
		b = b.WatchesRawSource(source.Kind[client.Object](r.SharedImages.Cache(), &cdiv1.DataVolume{},
			handler.EnqueueRequestsFromMapFunc(r.sharedImportToMachines), watchview.Changed(viewOfDataVolume)))
	}
	return b.Complete(ctx, r)
}

// scope is what one reconcile of a KubeVirtMachine works on.
type scope struct {
	kubeVirtMachine *infrav1.KubeVirtMachine
	// machine is nil only while the KubeVirtMachine is deleted after its
	// Machine.
	machine *clusterv1.Machine
	// cluster is nil while the machine waits for it (clusterMissing says
	// why), and when the KubeVirtMachine is deleted after its Cluster.
	cluster        *clusterv1.Cluster
	clusterMissing *blocked
}

// Reconcile reconciles one KubeVirtMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	kvm := &infrav1.KubeVirtMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, kvm); err != nil {
		if apierrors.IsNotFound(err) {
			r.ownWrites.Forget(req.NamespacedName)
			r.createdVMs.Seen(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.ownWrites.CacheBehind(req.NamespacedName, kvm.ResourceVersion) {
		log.V(4).Info("The cache has not seen the last write to the KubeVirtMachine yet; its event reconciles it again")
		return ctrl.Result{}, nil
	}
	s, err := r.newScope(ctx, kvm)
	if err != nil || s == nil {
		return ctrl.Result{}, err
	}
	if s.machine != nil {
		log = log.WithValues("Machine", klog.KObj(s.machine))
	}
	if s.cluster != nil {
		log = log.WithValues("Cluster", klog.KObj(s.cluster))
	}
	ctx = ctrl.LoggerInto(ctx, log)

	// The machine's own writes go through writes, so that a later
	// reconcile on a cache that has not seen them can be told apart.
	before, writes := kvm.ResourceVersion, ownwrites.NewRecorder(r.Client)
	defer func() { r.ownWrites.Wrote(req.NamespacedName, before, writes.Written()) }()
	// The finalizer is stored before the VM and disks exist, so that
	// deletion always waits for them. It and Paused=False are patches of
	// their own (Cluster API's helpers), but the reconcile goes on after
	// them rather than waiting for their events: writes reads them back
	// while the cache is behind.
	if _, err := finalizers.EnsureFinalizer(ctx, writes, kvm, infrav1.MachineFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	// Every controller of both providers makes its patch helper before it
	// calls the paused helper, as Cluster API's do: a Paused condition
	// whose only change is its observedGeneration is set by the paused
	// helper without a patch, for this reconcile's patch to carry; made
	// afterwards, the helper would take that change for the state it
	// started from and never send it. A paused object records that, and
	// nothing else; an unpaused one records Paused=False in a patch of its
	// own the first time.
	patchHelper, err := patch.NewHelper(kvm, writes)
	if err != nil {
		return ctrl.Result{}, err
	}
	isPaused, pausedPatched, err := paused.EnsurePausedCondition(ctx, writes, s.cluster, kvm)
	if err != nil || isPaused {
		return ctrl.Result{}, err
	}
	if pausedPatched {
		// Paused=False was sent: the reconcile's own patch starts from the
		// machine as the paused helper left it.
		if patchHelper, err = patch.NewHelper(kvm, writes); err != nil {
			return ctrl.Result{}, err
		}
	}
	if kvm.DeletionTimestamp.IsZero() && kvm.Spec.ProviderID == "" {
		return ctrl.Result{}, fillProviderID(ctx, patchHelper, kvm)
	}
	was := transitionsOf(kvm)
	defer func() {
		if err := patchKubeVirtMachine(ctx, patchHelper, kvm, reterr == nil); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
			return
		}
		r.recordTransitions(kvm, was)
	}()

	if !kvm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	if s.clusterMissing != nil {
		log.Info("The machine waits for its Cluster", "reason", s.clusterMissing.message)
		return s.clusterMissing.report(kvm), nil
	}
	return r.reconcileNormal(ctx, s)
}

// newScope reads the machine's Machine and Cluster. It returns no scope
// while the Machine controller has not set the owner reference yet (that
// update reconciles the machine again), and an error only for a failed
// read.
func (r *Reconciler) newScope(ctx context.Context, kvm *infrav1.KubeVirtMachine) (*scope, error) {
	deleting := !kvm.DeletionTimestamp.IsZero()
	machine, err := util.GetOwnerMachine(ctx, r.Client, kvm.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if machine == nil && !deleting {
		ctrl.LoggerFrom(ctx).V(4).Info("Waiting for the Machine controller to set an owner reference")
		return nil, nil
	}
	s := &scope{kubeVirtMachine: kvm, machine: machine}
	clusterName := kvm.Labels[clusterv1.ClusterNameLabel]
	if clusterName == "" {
		if !deleting {
			s.clusterMissing = waitingFor(infrav1.WaitingForClusterReason,
				fmt.Sprintf("The machine has no %s label", clusterv1.ClusterNameLabel))
		}
		return s, nil
	}
	s.cluster, err = util.GetClusterByName(ctx, r.Client, kvm.Namespace, clusterName)
	switch {
	case apierrors.IsNotFound(err):
		// The Cluster watch reconciles the machine once the Cluster's
		// infrastructure is provisioned.
		s.cluster = nil
		if !deleting {
			s.clusterMissing = waitingFor(infrav1.WaitingForClusterReason,
				fmt.Sprintf("Cluster %s does not exist", klog.KRef(kvm.Namespace, clusterName)))
		}
	case err != nil:
		return nil, err
	}
	return s, nil
}

// setConditions sets conditions with every URL's credentials masked:
// their messages carry CDI's, KubeVirt's and the API server's words.
func setConditions(kvm *infrav1.KubeVirtMachine, conds ...metav1.Condition) {
	for _, c := range conds {
		c.Message = redact.URLCredentials(c.Message)
		conditions.Set(kvm, c)
	}
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	vm, blocker, err := r.ensureVirtualMachine(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if blocker != nil {
		return blocker.report(s.kubeVirtMachine), nil
	}
	return r.observe(ctx, s, vm)
}
