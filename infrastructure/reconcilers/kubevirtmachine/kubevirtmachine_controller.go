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
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
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

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/pkg/instancetype"
	"github.com/cozystack/cluster-api-workers/infrastructure/pkg/render"
	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
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
	// without the cluster-name label, and objects in the way of a create.
	APIReader client.Reader
	// WatchFilterValue restricts the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// ImportFailureRestarts is how many importer pod restarts count as a
	// failed import; DefaultImportFailureRestarts when zero.
	ImportFailureRestarts int32
	// Clones authorizes a clone source the machine's spec names as the
	// machine's namespace before its DataVolume is created.
	Clones *cloneauth.Authorizer

	ownWrites *ownwrites.Versions
}

// SetupWithManager registers the controller and its watches. VirtualMachines,
// VirtualMachineInstances and DataVolumes map back to their machine by the
// machine-name label, so nothing is polled; their updates pass only when
// they change what the controller reads (predicates.go).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Clones == nil {
		return fmt.Errorf("the KubeVirtMachine reconciler needs a Client, an APIReader and a clone Authorizer")
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
	return capicontrollerutil.NewControllerManagedBy(mgr, predicateLog).
		For(&infrav1.KubeVirtMachine{}, builder.WithPredicates(filter)).
		WithOptions(options).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("KubeVirtMachine"))),
			filter).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), predicateLog),
			filter).
		Watches(&kubevirtv1.VirtualMachine{}, byMachineLabel, viewChanged(viewOfVirtualMachine)).
		Watches(&kubevirtv1.VirtualMachineInstance{}, byMachineLabel, viewChanged(viewOfInstance)).
		Watches(&cdiv1.DataVolume{}, byMachineLabel, viewChanged(viewOfDataVolume)).
		Watches(&infrav1.KubeVirtMachineTemplate{},
			handler.EnqueueRequestsFromMapFunc(r.templateToMachines),
			templateResolved()).
		Complete(ctx, r)
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

// Reconcile reconciles one KubeVirtMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	kvm := &infrav1.KubeVirtMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, kvm); err != nil {
		if apierrors.IsNotFound(err) {
			r.ownWrites.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.ownWrites.CacheBehind(req.NamespacedName, kvm.ResourceVersion) {
		log.V(4).Info("The cache has not seen the last write to the KubeVirtMachine yet; its event reconciles it again")
		return ctrl.Result{}, nil
	}
	deleting := !kvm.DeletionTimestamp.IsZero()

	machine, err := util.GetOwnerMachine(ctx, r.Client, kvm.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if machine == nil && !deleting {
		log.V(4).Info("Waiting for the Machine controller to set an owner reference")
		return ctrl.Result{}, nil
	}
	if machine != nil {
		log = log.WithValues("Machine", klog.KObj(machine))
	}
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, kvm.ObjectMeta)
	if err != nil && !deleting {
		log.Info("Waiting for the machine's Cluster", "reason", err.Error())
		return ctrl.Result{}, r.markClusterMissing(ctx, req, kvm, err)
	}
	if cluster != nil {
		log = log.WithValues("Cluster", klog.KObj(cluster))
	}
	ctx = ctrl.LoggerInto(ctx, log)

	// The machine's own patches go through writes, so that a later
	// reconcile on a cache that has not seen them can be told apart.
	before, writes := kvm.ResourceVersion, ownwrites.NewRecorder(r.Client)
	defer func() { r.ownWrites.Wrote(req.NamespacedName, before, writes.Written()) }()
	if !deleting && (!controllerutil.ContainsFinalizer(kvm, infrav1.MachineFinalizer) || kvm.Spec.ProviderID == "") {
		return ctrl.Result{}, claim(ctx, writes, kvm)
	}
	if (cluster != nil && ptr.Deref(cluster.Spec.Paused, false)) || annotations.HasPaused(kvm) {
		// Record that, and nothing else, as Cluster API's controllers do.
		_, _, err := paused.EnsurePausedCondition(ctx, writes, cluster, kvm)
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(kvm, writes)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Not paused: the condition goes out with this reconcile's patch rather
	// than in a patch of its own.
	setConditions(kvm, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
	defer func() {
		if err := patchHelper.Patch(ctx, kvm, patch.WithOwnedConditions{Conditions: []string{
			infrav1.ReadyCondition,
			infrav1.VirtualMachineProvisionedCondition,
			infrav1.BootDiskReadyCondition,
			clusterv1.PausedCondition,
		}}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if deleting {
		return ctrl.Result{}, r.reconcileDelete(ctx, kvm)
	}
	return r.reconcileNormal(ctx, cluster, machine, kvm)
}

// markClusterMissing says on the machine, once, why it has no Cluster: it
// does not exist (the Cluster watch reconciles the machine once its
// infrastructure is provisioned), or the machine names none. Any other
// error is returned for a retry.
func (r *Reconciler) markClusterMissing(ctx context.Context, req ctrl.Request, kvm *infrav1.KubeVirtMachine, err error) error {
	var message string
	switch name := kvm.Labels[clusterv1.ClusterNameLabel]; {
	case name == "":
		message = fmt.Sprintf("The machine has no %s label", clusterv1.ClusterNameLabel)
	case apierrors.IsNotFound(err):
		message = fmt.Sprintf("Cluster %s does not exist", klog.KRef(kvm.Namespace, name))
	default:
		return err
	}
	if c := conditions.Get(kvm, infrav1.ReadyCondition); c != nil && c.Reason == infrav1.WaitingForClusterReason && c.Message == message {
		return nil
	}
	before, writes := kvm.ResourceVersion, ownwrites.NewRecorder(r.Client)
	defer func() { r.ownWrites.Wrote(req.NamespacedName, before, writes.Written()) }()
	h, err := patch.NewHelper(kvm, writes)
	if err != nil {
		return err
	}
	setConditions(kvm, waitingConditions(infrav1.WaitingForClusterReason, message)...)
	return h.Patch(ctx, kvm, patch.WithOwnedConditions{Conditions: []string{
		infrav1.ReadyCondition, infrav1.VirtualMachineProvisionedCondition, infrav1.BootDiskReadyCondition,
	}})
}

// claim adds the finalizer and fills in the providerID, in one patch and in
// a reconcile of its own, before anything is created: the finalizer must be
// stored before the VM and disks exist so that deletion always waits for
// them. The providerID (kubevirt://<name>) is known before the VM exists
// and Cluster API reads it only once the machine is provisioned, so it
// costs no write of its own; and as the only spec change it bumps the
// generation before any condition records one.
func claim(ctx context.Context, c client.Client, kvm *infrav1.KubeVirtMachine) error {
	patchHelper, err := patch.NewHelper(kvm, c)
	if err != nil {
		return err
	}
	controllerutil.AddFinalizer(kvm, infrav1.MachineFinalizer)
	kvm.Spec.ProviderID = infrav1.ProviderID(kvm.Name)
	return patchHelper.Patch(ctx, kvm)
}

func setConditions(kvm *infrav1.KubeVirtMachine, conds ...metav1.Condition) {
	for _, c := range conds {
		c.ObservedGeneration = kvm.Generation
		conditions.Set(kvm, c)
	}
}

func (r *Reconciler) reconcileNormal(ctx context.Context, cluster *clusterv1.Cluster, machine *clusterv1.Machine, kvm *infrav1.KubeVirtMachine) (ctrl.Result, error) {
	vm := &kubevirtv1.VirtualMachine{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(kvm), vm)
	switch {
	case err == nil:
		// The VM exists: everything else is observed from it, so a deleted
		// template or bootstrap Secret no longer matters.
		if blocked := r.notControlled(vm, kvm, "VirtualMachine"); blocked != nil {
			setConditions(kvm, *blocked)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.observe(ctx, kvm, machine, vm)
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}

	if ptr.Deref(kvm.Status.Initialization.Provisioned, false) {
		// A provisioned machine whose VM is gone is reported, not recreated:
		// the node it ran is gone with it.
		return ctrl.Result{}, r.observe(ctx, kvm, machine, nil)
	}
	if !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		setConditions(kvm, waitingConditions(infrav1.WaitingForClusterInfrastructureReason, "Cluster infrastructure is not provisioned yet")...)
		return ctrl.Result{}, nil
	}
	if machine.Spec.Bootstrap.DataSecretName == nil {
		setConditions(kvm, waitingConditions(infrav1.WaitingForBootstrapDataReason, "Machine has no bootstrap data Secret yet")...)
		return ctrl.Result{}, nil
	}
	image, datasource, waiting, err := r.machineImage(ctx, kvm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting != nil {
		setConditions(kvm, waitingConditions(waiting.Reason, waiting.Message)...)
		return ctrl.Result{}, nil
	}
	userData, waiting, err := r.bootstrapData(ctx, machine)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting != nil {
		setConditions(kvm, waitingConditions(waiting.Reason, waiting.Message)...)
		return ctrl.Result{}, nil
	}

	var preference *instancetypev1beta1.VirtualMachinePreferenceSpec
	if ref := kvm.Spec.Preference; ref != nil {
		// A preference that does not exist is KubeVirt's to refuse; the VM is
		// rendered as without one.
		if preference, _, err = instancetype.Preference(ctx, r.Client, kvm.Namespace, ref, field.NewPath("spec", "preference")); err != nil {
			return ctrl.Result{}, err
		}
	}
	objs, errs := render.Render(render.Input{
		Machine:       kvm,
		ClusterName:   cluster.Name,
		Image:         image,
		Datasource:    datasource,
		FailureDomain: machine.Spec.FailureDomain,
		UserData:      userData,
		Preference:    preference,
	})
	if len(errs) > 0 {
		setConditions(kvm, waitingConditions(infrav1.InvalidSpecReason, errs.ToAggregate().Error())...)
		return ctrl.Result{}, nil
	}

	if err := r.ensureUserData(ctx, kvm, objs.UserData); err != nil {
		return ctrl.Result{}, err
	}
	if objs.ImportCA != nil {
		if _, blocked, err := ensureCreated(ctx, r, kvm, objs.ImportCA, "ConfigMap"); err != nil || blocked != nil {
			return r.blocked(kvm, blocked, err)
		}
	}
	if objs.RootDataVolume != nil {
		if result, blocked, err := r.authorizeClone(ctx, kvm, objs.RootDataVolume); err != nil || blocked {
			return result, err
		}
		if _, blocked, err := ensureCreated(ctx, r, kvm, objs.RootDataVolume, "DataVolume"); err != nil || blocked != nil {
			return r.blocked(kvm, blocked, err)
		}
	}
	vm, blocked, err := ensureCreated(ctx, r, kvm, objs.VirtualMachine, "VirtualMachine")
	if err != nil || blocked != nil {
		return r.blocked(kvm, blocked, err)
	}
	return ctrl.Result{}, r.observe(ctx, kvm, machine, vm)
}

// authorizeClone authorizes the clone of a root DataVolume that does not
// exist yet as the machine's namespace (cloneauth), when the machine's own
// spec names the source. A class's image comes from the hoster's catalog
// and is not the tenant's to choose. A DataVolume that exists was
// authorized when it was created.
func (r *Reconciler) authorizeClone(ctx context.Context, kvm *infrav1.KubeVirtMachine, dv *cdiv1.DataVolume) (ctrl.Result, bool, error) {
	if kvm.Spec.Image == nil || kvm.Spec.Image.Clone == nil {
		return ctrl.Result{}, false, nil
	}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{})
	if err == nil || !apierrors.IsNotFound(err) {
		return ctrl.Result{}, false, err
	}
	decision, err := r.Clones.AsNamespace(ctx, dv)
	switch {
	case err != nil:
		return ctrl.Result{}, false, err
	case decision.Missing:
		setConditions(kvm, waitingConditions(infrav1.WaitingForCloneSourceReason, "spec.image.clone: "+decision.Reason)...)
	case !decision.Allowed:
		ctrl.LoggerFrom(ctx).Info("The machine's namespace may not clone from the source of spec.image.clone", "reason", decision.Reason)
		setConditions(kvm, waitingConditions(infrav1.CloneSourceForbiddenReason, "spec.image.clone: "+decision.Reason)...)
	default:
		return ctrl.Result{}, false, nil
	}
	return ctrl.Result{RequeueAfter: refusedRetry}, true, nil
}

// refusedRetry is how long a machine whose object the API server refused
// waits before it asks again.
const refusedRetry = time.Minute

// blocked reports what keeps the machine from creating its objects: a
// refusal on every condition, retried after refusedRetry; a name conflict
// on Ready.
func (r *Reconciler) blocked(kvm *infrav1.KubeVirtMachine, blocked *metav1.Condition, err error) (ctrl.Result, error) {
	if blocked == nil {
		return ctrl.Result{}, err
	}
	if blocked.Reason == infrav1.CreateRefusedReason {
		setConditions(kvm, waitingConditions(blocked.Reason, blocked.Message)...)
		return ctrl.Result{RequeueAfter: refusedRetry}, err
	}
	setConditions(kvm, *blocked)
	return ctrl.Result{}, err
}

// machineImage returns the root disk source and datasource: the machine's
// own spec.image, or the frozen resolution of the KubeVirtMachineTemplate it
// was cloned from. A returned condition says what the machine waits for.
func (r *Reconciler) machineImage(ctx context.Context, kvm *infrav1.KubeVirtMachine) (infrav1.ImageSource, infrav1.CloudInitDatasource, *metav1.Condition, error) {
	if kvm.Spec.Image != nil {
		datasource := kvm.Spec.CloudInitDatasource
		if datasource == "" {
			datasource = infrav1.NoCloudDatasource
		}
		return *kvm.Spec.Image, datasource, nil, nil
	}
	names := clonedFromTemplate(kvm)
	if len(names) == 0 {
		c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.InvalidSpecReason,
			"spec.image: Required value: a KubeVirtMachine that is not cloned from a KubeVirtMachineTemplate needs an image")
		return infrav1.ImageSource{}, "", &c, nil
	}
	template := &infrav1.KubeVirtMachineTemplate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: names[0]}, template); err != nil {
		if !apierrors.IsNotFound(err) {
			return infrav1.ImageSource{}, "", nil, err
		}
		c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForTemplateReason,
			fmt.Sprintf("KubeVirtMachineTemplate %s does not exist", names[0]))
		return infrav1.ImageSource{}, "", &c, nil
	}
	resolved := template.Status.Resolved
	if resolved == nil {
		message := fmt.Sprintf("KubeVirtMachineTemplate %s is not resolved yet", template.Name)
		if c := conditions.Get(template, infrav1.ResolvedCondition); c != nil && c.Message != "" {
			message += ": " + c.Message
		}
		c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForTemplateReason, message)
		return infrav1.ImageSource{}, "", &c, nil
	}
	return resolved.Image, resolved.CloudInitDatasource, nil, nil
}

// bootstrapData reads the Machine's bootstrap data. Cluster API bootstrap
// Secrets carry the cluster-name label the Secret cache selects; one without
// it is read from the API server.
func (r *Reconciler) bootstrapData(ctx context.Context, machine *clusterv1.Machine) ([]byte, *metav1.Condition, error) {
	key := client.ObjectKey{Namespace: machine.Namespace, Name: *machine.Spec.Bootstrap.DataSecretName}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, secret)
	}
	if apierrors.IsNotFound(err) {
		c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("Bootstrap data Secret %s does not exist yet", key.Name))
		return nil, &c, nil
	}
	if err != nil {
		return nil, nil, err
	}
	value, ok := secret.Data[BootstrapDataKey]
	if !ok {
		c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("Bootstrap data Secret %s has no %q key", key.Name, BootstrapDataKey))
		return nil, &c, nil
	}
	return value, nil, nil
}

// ensureUserData creates the cloud-init Secret, or brings its user data back
// to the bootstrap data while the VM does not exist yet.
func (r *Reconciler) ensureUserData(ctx context.Context, kvm *infrav1.KubeVirtMachine, desired *corev1.Secret) error {
	existing := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, desired); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating cloud-init Secret %s: %w", desired.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Created the cloud-init user data Secret", "Secret", klog.KObj(desired))
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(existing, kvm) {
		return fmt.Errorf("secret %s exists and is not controlled by KubeVirtMachine %s", desired.Name, kvm.Name)
	}
	if bytes.Equal(existing.Data[render.UserDataKey], desired.Data[render.UserDataKey]) {
		return nil
	}
	original := existing.DeepCopy()
	existing.Data = desired.Data
	if err := r.Client.Patch(ctx, existing, client.MergeFrom(original)); err != nil {
		return fmt.Errorf("updating cloud-init Secret %s: %w", desired.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Updated the cloud-init user data Secret to the current bootstrap data", "Secret", klog.KObj(existing))
	return nil
}

// ensureCreated creates desired unless it exists, and returns the live
// object. It never updates: a machine's VM and disks are immutable. An object
// of the same name that this machine does not control blocks provisioning
// with a condition.
func ensureCreated[T client.Object](ctx context.Context, r *Reconciler, kvm *infrav1.KubeVirtMachine, desired T, kind string) (T, *metav1.Condition, error) {
	var none T
	key := client.ObjectKeyFromObject(desired)
	existing := desired.DeepCopyObject().(T)
	err := r.Client.Get(ctx, key, existing)
	if err == nil {
		return existing, r.notControlled(existing, kvm, kind), nil
	}
	if !apierrors.IsNotFound(err) {
		return none, nil, err
	}
	if err := r.Client.Create(ctx, desired); err != nil {
		if refused(err) {
			// Asking again at once would be refused again.
			ctrl.LoggerFrom(ctx).Info("The API server refused the machine's "+kind, kind, klog.KObj(desired), "reason", err.Error())
			return none, refusal(kind, key.Name, err), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return none, nil, fmt.Errorf("creating %s %s: %w", kind, key.Name, err)
		}
		// Not in the cache yet, or not ours: the API server decides.
		if err := r.APIReader.Get(ctx, key, existing); err != nil {
			return none, nil, err
		}
		return existing, r.notControlled(existing, kvm, kind), nil
	}
	ctrl.LoggerFrom(ctx).Info("Created the machine's "+kind, kind, klog.KObj(desired))
	return desired, nil, nil
}

// refused reports whether the API server refused a create for what it is
// (an admission webhook's or policy's denial, a schema violation), as
// opposed to failing to answer.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// refusal is the condition of a machine whose object the API server
// refused, with the refusal's own words (KubeVirt's admission messages name
// fields of the VM, never the bootstrap data, which stays in its Secret).
func refusal(kind, name string, err error) *metav1.Condition {
	message := err.Error()
	if status, ok := err.(apierrors.APIStatus); ok {
		message = status.Status().Message
	}
	c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.CreateRefusedReason,
		fmt.Sprintf("The API server refused %s %s: %s", kind, name, message))
	return &c
}

func (r *Reconciler) notControlled(o client.Object, kvm *infrav1.KubeVirtMachine, kind string) *metav1.Condition {
	if metav1.IsControlledBy(o, kvm) {
		return nil
	}
	if !o.GetDeletionTimestamp().IsZero() {
		c := condition(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForOldVirtualMachineReason,
			fmt.Sprintf("%s %s of an earlier machine is being deleted", kind, o.GetName()))
		return &c
	}
	c := condition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NameConflictReason,
		fmt.Sprintf("%s %s exists and is not controlled by this KubeVirtMachine", kind, o.GetName()))
	return &c
}

// observe reports the VM, its instance and its root disk.
func (r *Reconciler) observe(ctx context.Context, kvm *infrav1.KubeVirtMachine, machine *clusterv1.Machine, vm *kubevirtv1.VirtualMachine) error {
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
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err == nil {
			o.vmi = vmi
		} else if !apierrors.IsNotFound(err) {
			return err
		}
	}
	if o.rootDataVolumeName != "" {
		dv := &cdiv1.DataVolume{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: o.rootDataVolumeName}, dv); err == nil {
			o.rootDataVolume = dv
		} else if !apierrors.IsNotFound(err) {
			return err
		}
	}

	disk := bootDiskCondition(o)
	virtualMachine := virtualMachineCondition(o)
	setConditions(kvm, disk, virtualMachine, readyCondition(disk, virtualMachine))
	if virtualMachine.Reason == infrav1.EvacuationRequestedReason {
		// KubeVirt denied the eviction and leaves it to us (External): the
		// drain ends once the instance is gone, and the run strategy starts
		// the next one on another node.
		if err := r.Client.Delete(ctx, o.vmi, client.Preconditions{UID: &o.vmi.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("stopping VirtualMachineInstance %s of a drained node: %w", o.vmi.Name, err)
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
func (r *Reconciler) reconcileDelete(ctx context.Context, kvm *infrav1.KubeVirtMachine) error {
	log := ctrl.LoggerFrom(ctx)
	key := client.ObjectKeyFromObject(kvm)
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
		if err := r.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", kind, obj.GetName(), err)
		}
		log.Info("Deleting the machine's "+kind, kind, klog.KObj(obj))
		return nil
	}
	controlled := func(o client.Object) bool { return metav1.IsControlledBy(o, kvm) }
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
	if err := waitForAll(r.Client); err != nil {
		return err
	}
	if len(pending) == 0 {
		// The cache says all is gone; the finalizer is the last guard of
		// the VM and its disks, so the API server confirms it (a VM created
		// moments ago may not be in the cache yet).
		if err := waitForAll(r.APIReader); err != nil {
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
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, kvm) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, obj))
}
