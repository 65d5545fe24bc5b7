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
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
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
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
	"github.com/cozystack/cluster-api-workers/infrastructure/pkg/instancetype"
	"github.com/cozystack/cluster-api-workers/infrastructure/pkg/kubevirtconfig"
	"github.com/cozystack/cluster-api-workers/infrastructure/pkg/render"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
	"github.com/cozystack/cluster-api-workers/internal/redact"
)

// DefaultImportFailureRestarts is how many importer pod restarts of a root
// DataVolume count as a failed import. A healthy import, however slow, does
// not restart.
const DefaultImportFailureRestarts int32 = 3

// BootstrapDataKey is the key of the bootstrap data in a Cluster API
// bootstrap Secret.
const BootstrapDataKey = "value"

// clonedFromTemplateIndex indexes KubeVirtMachines by the
// KubeVirtMachineTemplate they were cloned from.
const clonedFromTemplateIndex = "infrastructure.cozystack.io/cloned-from-template"

var templateGroupKind = infrav1.GroupVersion.WithKind("KubeVirtMachineTemplate").GroupKind().String()

// Writes go through Cluster API's patch helper, which patches and never
// updates; finalizers/update is what the owner references
// (blockOwnerDeletion) of the machine's VM, disks and Secrets need where
// OwnerReferencesPermissionEnforcement admits them.
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines/status,verbs=patch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=list
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes/source,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete

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
			filter).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), predicateLog),
			filter).
		WatchesRawSource(source.Kind[client.Object](infra, &kubevirtv1.VirtualMachine{}, byMachineLabel, viewChanged(viewOfVirtualMachine))).
		WatchesRawSource(source.Kind[client.Object](infra, &kubevirtv1.VirtualMachineInstance{}, byMachineLabel, viewChanged(viewOfInstance))).
		WatchesRawSource(source.Kind[client.Object](infra, &cdiv1.DataVolume{}, byMachineLabel, viewChanged(viewOfDataVolume))).
		Watches(&infrav1.KubeVirtMachineTemplate{},
			handler.EnqueueRequestsFromMapFunc(r.templateToMachines),
			templateResolved())
	if r.SharedImages != nil {
		b = b.WatchesRawSource(source.Kind[client.Object](r.SharedImages.Cache(), &cdiv1.DataVolume{},
			handler.EnqueueRequestsFromMapFunc(r.sharedImportToMachines), viewChanged(viewOfDataVolume)))
	}
	return b.Complete(ctx, r)
}

// clonedFromTemplate indexes a machine by the KubeVirtMachineTemplate named in
// the annotations Cluster API sets when it clones a template.
func clonedFromTemplate(o client.Object) []string {
	a := o.GetAnnotations()
	if a[clusterv1.TemplateClonedFromGroupKindAnnotation] != templateGroupKind || a[clusterv1.TemplateClonedFromNameAnnotation] == "" {
		return nil
	}
	return []string{a[clusterv1.TemplateClonedFromNameAnnotation]}
}

func machineForLabelledObject(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[infrav1.MachineNameLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

func (r *Reconciler) templateToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	machines := &infrav1.KubeVirtMachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(o.GetNamespace()), client.MatchingFields{clonedFromTemplateIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list the KubeVirtMachines of a template", "KubeVirtMachineTemplate", klog.KObj(o))
		return nil
	}
	requests := make([]reconcile.Request, 0, len(machines.Items))
	for i := range machines.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&machines.Items[i])})
	}
	return requests
}

// sharedImportToMachines maps a shared import to the machines of the
// templates that own it: they wait for it.
func (r *Reconciler) sharedImportToMachines(ctx context.Context, dv client.Object) []reconcile.Request {
	templates := sharedimage.TemplatesOf(dv)
	requests := make([]reconcile.Request, 0, len(templates))
	for _, t := range templates {
		requests = append(requests, r.templateToMachines(ctx, &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: t.Name}})...)
	}
	return requests
}

// templateResolved passes template events that make a resolved image
// available: machines only wait for that.
func templateResolved() predicate.Funcs {
	resolved := func(o client.Object) bool {
		t, ok := o.(*infrav1.KubeVirtMachineTemplate)
		return ok && t.Status.Resolved != nil
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return resolved(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !resolved(e.ObjectOld) && resolved(e.ObjectNew) },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool {
			return false
		},
	}
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
	// deletion always waits for them.
	if added, err := finalizers.EnsureFinalizer(ctx, writes, kvm, infrav1.MachineFinalizer); err != nil || added {
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
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, writes, s.cluster, kvm); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if kvm.DeletionTimestamp.IsZero() && kvm.Spec.ProviderID == "" {
		return ctrl.Result{}, fillProviderID(ctx, patchHelper, kvm)
	}
	defer func() {
		if err := patchKubeVirtMachine(ctx, patchHelper, kvm, reterr == nil); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !kvm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	if s.clusterMissing != nil {
		log.Info("The machine waits for its Cluster", "reason", s.clusterMissing.message)
		return s.block(s.clusterMissing), nil
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

// fillProviderID sets the empty spec.providerID (kubevirt://<name>) and has
// the patch helper write it in a reconcile of its own, before anything is
// created and before the first step's conditions: the providerID is known
// before the VM exists, and as the only spec change it bumps the
// generation once. The patch helper sends conditions before spec, so
// conditions and status.observedGeneration sent with it would record the
// generation it replaces and be written again (only Paused=False, written
// by the paused helper before, records the old one until the first step's
// patch carries it). Cluster API reads it only
// once the machine is provisioned. The event of this patch reconciles the
// machine again.
func fillProviderID(ctx context.Context, h *patch.Helper, kvm *infrav1.KubeVirtMachine) error {
	kvm.Spec.ProviderID = infrav1.ProviderID(kvm.Name)
	if err := h.Patch(ctx, kvm); err != nil {
		return fmt.Errorf("setting spec.providerID: %w", err)
	}
	return nil
}

// patchKubeVirtMachine writes the reconcile's changes through Cluster API's
// patch helper: the conditions this controller owns, metadata and spec,
// then the rest of the status, each in a patch of its own when it changed.
// Ready summarises the machine's two steps; the generation is recorded as
// observed only when the reconcile succeeded.
func patchKubeVirtMachine(ctx context.Context, h *patch.Helper, kvm *infrav1.KubeVirtMachine, observed bool) error {
	if err := setReady(kvm); err != nil {
		return err
	}
	opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
		infrav1.ReadyCondition,
		infrav1.VirtualMachineProvisionedCondition,
		infrav1.BootDiskReadyCondition,
		clusterv1.PausedCondition,
	}}}
	if observed {
		opts = append(opts, patch.WithStatusObservedGeneration{})
	}
	return h.Patch(ctx, kvm, opts...)
}

// block reports on the machine why it cannot go on, and when to ask again.
func (s *scope) block(b *blocked) ctrl.Result {
	setConditions(s.kubeVirtMachine, b.conditions()...)
	return ctrl.Result{RequeueAfter: b.requeueAfter}
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
		return s.block(blocker), nil
	}
	return r.observe(ctx, s, vm)
}

// ensureVirtualMachine returns the machine's VM, creating it and what it
// boots from when everything they need is there. A VM that exists is never
// updated: everything else is observed from it, so a deleted template or
// bootstrap Secret no longer matters. A provisioned machine whose VM is
// gone gets no new one (nil): the node it ran is gone with it.
func (r *Reconciler) ensureVirtualMachine(ctx context.Context, s *scope) (*kubevirtv1.VirtualMachine, *blocked, error) {
	kvm, machine, cluster := s.kubeVirtMachine, s.machine, s.cluster
	key := client.ObjectKeyFromObject(kvm)
	infra := r.Infrastructure
	vm := &kubevirtv1.VirtualMachine{}
	err := infra.Client.Get(ctx, key, vm)
	if r.createdVMs.Pending(key, key.Name) {
		if err == nil {
			r.createdVMs.Seen(key)
		} else if apierrors.IsNotFound(err) {
			err = infra.Reader.Get(ctx, key, vm)
		}
	}
	switch {
	case err == nil:
		return vm, r.notControlled(vm, kvm, "VirtualMachine"), nil
	case !apierrors.IsNotFound(err):
		return nil, nil, err
	}
	if ptr.Deref(kvm.Status.Initialization.Provisioned, false) {
		return nil, nil, nil
	}
	if !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		return nil, waitingFor(infrav1.WaitingForClusterInfrastructureReason, "Cluster infrastructure is not provisioned yet"), nil
	}
	if machine.Spec.Bootstrap.DataSecretName == nil {
		return nil, waitingFor(infrav1.WaitingForBootstrapDataReason, "Machine has no bootstrap data Secret yet"), nil
	}
	image, blocker, err := r.machineImage(ctx, kvm)
	if err != nil || blocker != nil {
		return nil, blocker, err
	}
	userData, blocker, err := r.bootstrapData(ctx, machine)
	if err != nil || blocker != nil {
		return nil, blocker, err
	}

	var preference *instancetypev1beta1.VirtualMachinePreferenceSpec
	if ref := kvm.Spec.Preference; ref != nil {
		// A preference that does not exist is KubeVirt's to refuse; the VM is
		// rendered as without one.
		if preference, _, err = instancetype.Preference(ctx, infra.Client, kvm.Namespace, ref, field.NewPath("spec", "preference")); err != nil {
			return nil, nil, err
		}
	}
	objs, errs := render.Render(render.Input{
		Machine:       kvm,
		ClusterName:   cluster.Name,
		Image:         image.source,
		Datasource:    image.datasource,
		FailureDomain: machine.Spec.FailureDomain,
		UserData:      userData,
		Preference:    preference,
		Unowned:       infra.Remote,
	})
	if len(errs) > 0 {
		return nil, waitingFor(infrav1.InvalidSpecReason, errs.ToAggregate().Error()), nil
	}

	if blocker, err := r.ensureUserData(ctx, kvm, objs.UserData); err != nil || blocker != nil {
		return nil, blocker, err
	}
	if objs.ImportCA != nil {
		if _, blocker, err := ensureCreated(ctx, r, kvm, objs.ImportCA, "ConfigMap"); err != nil || blocker != nil {
			return nil, blocker, err
		}
	}
	if objs.RootDataVolume != nil {
		if blocker, err := r.authorizeClone(ctx, image, objs.RootDataVolume); err != nil || blocker != nil {
			return nil, blocker, err
		}
		if _, blocker, err := ensureCreated(ctx, r, kvm, objs.RootDataVolume, "DataVolume"); err != nil || blocker != nil {
			return nil, blocker, err
		}
	}
	vm, blocker, err = ensureCreated(ctx, r, kvm, objs.VirtualMachine, "VirtualMachine")
	if err == nil && blocker == nil {
		r.createdVMs.Wrote(key, vm.Name)
	}
	return vm, blocker, err
}

// authorizeClone authorizes the clone of a root DataVolume that does not
// exist yet as the machine's namespace (cloneauth), when a tenant chose the
// source: the machine's own spec.image, or the one of the classless
// template it was cloned from. A class's image comes from the hoster's
// catalog and is not the tenant's to choose. A DataVolume that exists was
// authorized when it was created. dv is pinned: a DataSource it would name
// is replaced by the claim or snapshot that was authorized.
func (r *Reconciler) authorizeClone(ctx context.Context, image rootImage, dv *cdiv1.DataVolume) (*blocked, error) {
	if image.chosenBy == "" || image.source.Clone == nil {
		return nil, nil
	}
	err := r.Infrastructure.Client.Get(ctx, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{})
	if err == nil || !apierrors.IsNotFound(err) {
		return nil, err
	}
	decision, err := r.Clones.AsNamespace(ctx, dv)
	switch {
	case err != nil:
		return nil, err
	case decision.Missing:
		return refusedFor(infrav1.WaitingForCloneSourceReason, image.chosenBy+".clone: "+decision.Reason), nil
	case !decision.Allowed:
		ctrl.LoggerFrom(ctx).Info("The machine's namespace may not clone from the source its image names", "field", image.chosenBy+".clone", "reason", decision.Reason)
		return refusedFor(infrav1.CloneSourceForbiddenReason, image.chosenBy+".clone: "+decision.Reason), nil
	}
	return nil, nil
}

// bootstrapData reads the Machine's bootstrap data. Cluster API bootstrap
// Secrets carry the cluster-name label the Secret cache selects; one without
// it is read from the API server.
func (r *Reconciler) bootstrapData(ctx context.Context, machine *clusterv1.Machine) ([]byte, *blocked, error) {
	key := client.ObjectKey{Namespace: machine.Namespace, Name: *machine.Spec.Bootstrap.DataSecretName}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, secret)
	}
	if apierrors.IsNotFound(err) {
		return nil, waitingFor(infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("Bootstrap data Secret %s does not exist yet", key.Name)), nil
	}
	if err != nil {
		return nil, nil, err
	}
	value, ok := secret.Data[BootstrapDataKey]
	if !ok {
		return nil, waitingFor(infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("Bootstrap data Secret %s has no %q key", key.Name, BootstrapDataKey)), nil
	}
	return value, nil, nil
}

// ensureUserData creates the cloud-init Secret, or brings its user data back
// to the bootstrap data while the VM does not exist yet. A Secret of that
// name the machine does not control blocks it, as any other object would.
func (r *Reconciler) ensureUserData(ctx context.Context, kvm *infrav1.KubeVirtMachine, desired *corev1.Secret) (*blocked, error) {
	infra := r.Infrastructure
	existing := &corev1.Secret{}
	err := infra.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		_, blocker, err := ensureCreated(ctx, r, kvm, desired, "Secret")
		return blocker, err
	}
	if err != nil {
		return nil, err
	}
	if blocker := r.notControlled(existing, kvm, "Secret"); blocker != nil {
		return blocker, nil
	}
	if bytes.Equal(existing.Data[render.UserDataKey], desired.Data[render.UserDataKey]) {
		return nil, nil
	}
	original := existing.DeepCopy()
	existing.Data = desired.Data
	if err := infra.Client.Patch(ctx, existing, client.MergeFrom(original)); err != nil {
		return nil, fmt.Errorf("updating cloud-init Secret %s: %w", desired.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Updated the cloud-init user data Secret to the current bootstrap data", "Secret", klog.KObj(existing))
	return nil, nil
}

// ensureCreated creates desired unless it exists, and returns the live
// object. It never updates: a machine's VM and disks are immutable. An object
// of the same name that this machine does not control blocks provisioning.
func ensureCreated[T client.Object](ctx context.Context, r *Reconciler, kvm *infrav1.KubeVirtMachine, desired T, kind string) (T, *blocked, error) {
	var none T
	key := client.ObjectKeyFromObject(desired)
	infra := r.Infrastructure
	existing := desired.DeepCopyObject().(T)
	err := infra.Client.Get(ctx, key, existing)
	if err == nil {
		return existing, r.notControlled(existing, kvm, kind), nil
	}
	if !apierrors.IsNotFound(err) {
		return none, nil, err
	}
	if err := infra.Client.Create(ctx, desired); err != nil {
		if refused(err) {
			// Asking again at once would be refused again.
			ctrl.LoggerFrom(ctx).Info("The API server refused the machine's "+kind, kind, klog.KObj(desired), "reason", err.Error())
			return none, refusal(kind, key.Name, err), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return none, nil, fmt.Errorf("creating %s %s: %w", kind, key.Name, err)
		}
		// Not in the cache yet, or not ours: the API server decides.
		if err := infra.Reader.Get(ctx, key, existing); err != nil {
			return none, nil, err
		}
		return existing, r.notControlled(existing, kvm, kind), nil
	}
	ctrl.LoggerFrom(ctx).Info("Created the machine's "+kind, kind, klog.KObj(desired))
	return desired, nil, nil
}

// refused reports whether the API server refused a create for what it is
// (an admission webhook's or policy's denial, a schema violation, a
// namespace missing from an infrastructure cluster of its own), as
// opposed to failing to answer.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsRequestEntityTooLargeError(err) ||
		apierrors.IsNotFound(err)
}

// refusal is what blocks a machine whose object the API server refused,
// with the refusal's own words (KubeVirt's admission messages name fields
// of the VM, never the bootstrap data, which stays in its Secret).
func refusal(kind, name string, err error) *blocked {
	message := err.Error()
	if status, ok := err.(apierrors.APIStatus); ok {
		message = status.Status().Message
	}
	return refusedFor(infrav1.CreateRefusedReason, fmt.Sprintf("The API server refused %s %s: %s", kind, name, message))
}

// notControlled blocks a machine on an object of its name that it does not
// control: the leftover of an earlier machine is waited for; anyone else's
// is never adopted or touched.
func (r *Reconciler) notControlled(o client.Object, kvm *infrav1.KubeVirtMachine, kind string) *blocked {
	if r.Infrastructure.Controls(o, kvm) {
		return nil
	}
	if !o.GetDeletionTimestamp().IsZero() {
		return waitingFor(infrav1.WaitingForOldVirtualMachineReason,
			fmt.Sprintf("%s %s of an earlier machine is being deleted", kind, o.GetName()))
	}
	return &blocked{status: metav1.ConditionFalse, reason: infrav1.NameConflictReason,
		message: fmt.Sprintf("%s %s exists and is not controlled by this KubeVirtMachine", kind, o.GetName())}
}

// observe reports the VM, its instance and its root disk.
func (r *Reconciler) observe(ctx context.Context, s *scope, vm *kubevirtv1.VirtualMachine) (ctrl.Result, error) {
	kvm, machine := s.kubeVirtMachine, s.machine
	o := &observation{
		provisioned:            ptr.Deref(kvm.Status.Initialization.Provisioned, false),
		provisionedInstanceUID: kvm.Status.ProvisionedInstanceUID,
		vm:                     vm,
		importFailureRestarts:  r.ImportFailureRestarts,
	}
	if vm != nil {
		kvm.Spec.ProviderID = infrav1.ProviderID(kvm.Name)
		o.containerDisk = rootContainerDisk(vm)
		o.rootDataVolumeName = rootDataVolume(vm)
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := r.Infrastructure.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err == nil {
			o.vmi = vmi
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	if err := r.observeEvacuation(ctx, o); err != nil {
		return ctrl.Result{}, err
	}
	if o.rootDataVolumeName != "" {
		dv := &cdiv1.DataVolume{}
		if err := r.Infrastructure.Client.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: o.rootDataVolumeName}, dv); err == nil {
			o.rootDataVolume = dv
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}

	disk := bootDiskCondition(o)
	virtualMachine := virtualMachineCondition(o)
	setConditions(kvm, disk, virtualMachine)
	if virtualMachine.Reason == infrav1.EvacuationRequestedReason {
		// KubeVirt denied the eviction and leaves it to us (External): the
		// drain ends once the instance is gone, and the run strategy starts
		// the next one on another node.
		if err := r.Infrastructure.Client.Delete(ctx, o.vmi, client.Preconditions{UID: &o.vmi.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("stopping VirtualMachineInstance %s of a drained node: %w", o.vmi.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Stopped the instance on a drained infrastructure node so that KubeVirt starts it elsewhere", "VirtualMachineInstance", klog.KObj(o.vmi), "node", o.vmi.Status.EvacuationNodeName)
	}

	if o.vmi != nil && virtualMachine.Status == metav1.ConditionTrue {
		kvm.Status.Addresses = machineAddresses(o.vmi)
		kvm.Status.NodeName = o.vmi.Status.NodeName
		if !o.provisioned {
			// The failure domain goes out with the other fields of the
			// provisioned machine, in one status patch; Cluster API reads
			// it only from a provisioned machine.
			kvm.Status.FailureDomain = machine.Spec.FailureDomain
			kvm.Status.Initialization.Provisioned = ptr.To(true)
			kvm.Status.ProvisionedInstanceUID = string(o.vmi.UID)
			ctrl.LoggerFrom(ctx).Info("The machine's VirtualMachine is provisioned", "VirtualMachineInstance", klog.KObj(o.vmi), "node", o.vmi.Status.NodeName)
		}
	}
	if o.liveMigrating() {
		// KubeVirt's migrations carry no label of this provider's, so
		// they are not in its label-selected cache, and the instance
		// shows a local migration only once its target runs: while
		// KubeVirt live-migrates the instance, which a drain makes rare
		// and short, the machine looks again.
		return ctrl.Result{RequeueAfter: liveMigrationRecheck}, nil
	}
	return ctrl.Result{}, nil
}

// liveMigrationRecheck is how often a machine whose instance KubeVirt
// live-migrates off a drained node looks at the migration again.
const liveMigrationRecheck = 10 * time.Second

// observeEvacuation reads what decides and shows an evacuating instance's
// fate: the KubeVirt CR's cluster-wide eviction strategy when the instance
// names none (from the cache the template resolution keeps), and
// KubeVirt's migration of it (from the API server: migrations are not
// cached, and only read while KubeVirt evacuates the instance, which is
// rare).
func (r *Reconciler) observeEvacuation(ctx context.Context, o *observation) error {
	if !o.evacuating() {
		return nil
	}
	if o.vmi.Spec.EvictionStrategy == nil {
		kv, err := kubevirtconfig.Installed(ctx, r.Infrastructure.Client)
		if err != nil {
			return fmt.Errorf("reading the cluster-wide eviction strategy of KubeVirt: %w", err)
		}
		if kv != nil {
			o.clusterEvictionStrategy = kv.Spec.Configuration.EvictionStrategy
		}
	}
	if !o.liveMigrating() {
		return nil
	}
	migrations := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := r.Infrastructure.Reader.List(ctx, migrations, client.InNamespace(o.vmi.Namespace)); err != nil {
		return fmt.Errorf("reading the migrations of VirtualMachineInstance %s: %w", o.vmi.Name, err)
	}
	for i := range migrations.Items {
		m := &migrations.Items[i]
		if m.Spec.VMIName != o.vmi.Name || m.CreationTimestamp.Before(&o.vmi.CreationTimestamp) {
			continue
		}
		if o.migration == nil || o.migration.CreationTimestamp.Before(&m.CreationTimestamp) ||
			(o.migration.CreationTimestamp.Equal(&m.CreationTimestamp) && o.migration.Name < m.Name) {
			o.migration = m
		}
	}
	return nil
}

// rootDataVolume returns the DataVolume a VM boots from, or "".
func rootDataVolume(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template == nil {
		return ""
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume != nil {
			return v.DataVolume.Name
		}
	}
	return ""
}

// reconcileDelete deletes the machine's VM, instance and disks and keeps the
// finalizer until all of them are gone. The watches on them bring the
// machine back here when each one disappears.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) error {
	log := ctrl.LoggerFrom(ctx)
	kvm := s.kubeVirtMachine
	key := client.ObjectKeyFromObject(kvm)
	infra := r.Infrastructure
	var pending []string
	waitFor := func(reader client.Reader, obj client.Object, kind string, ours func(client.Object) bool) error {
		if err := reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: obj.GetName()}, obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !ours(obj) {
			return nil
		}
		pending = append(pending, fmt.Sprintf("%s %s", kind, obj.GetName()))
		if !obj.GetDeletionTimestamp().IsZero() {
			return nil
		}
		if err := infra.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", kind, obj.GetName(), err)
		}
		log.Info("Deleting the machine's "+kind, kind, klog.KObj(obj))
		return nil
	}
	controlled := func(o client.Object) bool { return infra.Controls(o, kvm) }
	labelled := func(o client.Object) bool { return o.GetLabels()[infrav1.MachineNameLabel] == kvm.Name }

	waitForAll := func(reader client.Reader) error {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
		vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
		dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: render.RootDataVolumeName(key.Name)}}
		return kerrors.NewAggregate([]error{
			waitFor(reader, vm, "VirtualMachine", controlled),
			waitFor(reader, vmi, "VirtualMachineInstance", labelled),
			waitFor(reader, dv, "DataVolume", controlled),
		})
	}
	if err := waitForAll(infra.Client); err != nil {
		return err
	}
	if len(pending) == 0 {
		// The cache says all is gone; the finalizer is the last guard of
		// the VM and its disks, so the API server confirms it (a VM created
		// moments ago may not be in the cache yet).
		if err := waitForAll(infra.Reader); err != nil {
			return err
		}
	}
	setConditions(kvm, deletingConditions(pending)...)
	if len(pending) > 0 {
		return nil
	}

	// The VM is gone: its bootstrap data and CA go now rather than with
	// garbage collection.
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: render.UserDataSecretName(key.Name)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: render.ImportCAConfigMapName(key.Name)}},
	} {
		if err := r.deleteIfControlled(ctx, kvm, obj); err != nil {
			return err
		}
	}
	controllerutil.RemoveFinalizer(kvm, infrav1.MachineFinalizer)
	log.Info("The machine's VirtualMachine and disks are deleted; releasing the finalizer")
	return nil
}

func (r *Reconciler) deleteIfControlled(ctx context.Context, kvm *infrav1.KubeVirtMachine, obj client.Object) error {
	infra := r.Infrastructure
	if err := infra.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !infra.Controls(obj, kvm) {
		return nil
	}
	return client.IgnoreNotFound(infra.Client.Delete(ctx, obj))
}
