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

// Package kubevirtmachinetemplate resolves KubeVirtMachineTemplates once and
// freezes the result in status: the image every machine boots, the Kubernetes
// and Talos versions, the datasource, a content hash, and the capacity and
// node info the cluster autoscaler scales from zero with. A resolved template
// is never resolved again, so later changes to a class's platform
// configuration never reach running machines.
package kubevirtmachinetemplate

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/capacity"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/instancetype"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/kubevirtconfig"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/migration"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/internal/redact"
)

const (
	// instancetypeIndex indexes templates by "<kind>/<name>" of their
	// instancetype and preference.
	instancetypeIndex = "infrastructure.cozystack.io/instancetype-and-preference"
)

// Only the status is written (Cluster API's patch helper patches it).
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates/status,verbs=patch
// +kubebuilder:rbac:groups=cozystack.io,resources=workerclasses;workerplatforms,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=instancetype.kubevirt.io,resources=virtualmachineclusterinstancetypes;virtualmachineinstancetypes;virtualmachineclusterpreferences;virtualmachinepreferences,verbs=get;list;watch

// Reconciler resolves KubeVirtMachineTemplates.
type Reconciler struct {
	Client client.Client
	// Infrastructure is where KubeVirt's instancetypes and preferences are
	// read and watched: the cluster the VMs run in.
	Infrastructure *infracluster.Cluster
	// WatchFilterValue restricts the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// WorkerClasses is the WorkerClass feature gate. Off, the WorkerClass
	// API is not read and a class-based template reports that.
	WorkerClasses bool
}

// SetupWithManager registers the controller. Templates that wait for a
// class, the platform configuration, an instancetype, a preference or the
// KubeVirt CR's configuration are reconciled again when that object
// changes.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.Infrastructure == nil {
		return fmt.Errorf("the KubeVirtMachineTemplate reconciler needs a Client and the infrastructure cluster")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.KubeVirtMachineTemplate{}, instancetypeIndex, referencedKinds); err != nil {
		return fmt.Errorf("indexing KubeVirtMachineTemplates by instancetype: %w", err)
	}
	predicateLog := ctrl.LoggerFrom(ctx).WithValues("controller", "kubevirtmachinetemplate")
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), predicateLog, r.WatchFilterValue)
	referencing := func(o client.Object, kind string) source.Source {
		return source.Kind[client.Object](r.Infrastructure.Cache, o, handler.EnqueueRequestsFromMapFunc(r.referencingTemplates(kind)))
	}
	b := capicontrollerutil.NewControllerManagedBy(mgr, predicateLog).
		For(&infrav1.KubeVirtMachineTemplate{}, builder.WithPredicates(filter)).
		WithOptions(options).
		// A template created while its Cluster is paused (clusterctl move
		// creates everything so) is resolved when the Cluster resumes.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterTemplates),
			predicates.ClusterPausedTransitions(mgr.GetScheme(), predicateLog), filter).
		WatchesRawSource(referencing(&instancetypev1beta1.VirtualMachineClusterInstancetype{}, string(infrav1.ClusterInstancetypeKind))).
		WatchesRawSource(referencing(&instancetypev1beta1.VirtualMachineInstancetype{}, string(infrav1.NamespacedInstancetypeKind))).
		WatchesRawSource(referencing(&instancetypev1beta1.VirtualMachineClusterPreference{}, string(infrav1.ClusterPreferenceKind))).
		WatchesRawSource(referencing(&instancetypev1beta1.VirtualMachinePreference{}, string(infrav1.NamespacedPreferenceKind))).
		// A hoster enabling a feature gate or permitting a device resolves
		// the templates that waited for it; resolved ones stay frozen.
		WatchesRawSource(source.Kind[client.Object](r.Infrastructure.Cache, &kubevirtv1.KubeVirt{},
			handler.EnqueueRequestsFromMapFunc(r.unresolvedTemplates), kubeVirtConfigChanged))
	if r.WorkerClasses {
		b = b.
			Watches(&workerclassv1.WorkerClass{}, handler.EnqueueRequestsFromMapFunc(r.classTemplates)).
			Watches(&workerclassv1.WorkerPlatform{}, handler.EnqueueRequestsFromMapFunc(r.unresolvedTemplates))
	}
	return b.Complete(ctx, r)
}

// kubeVirtConfigChanged passes the KubeVirt CR's events that can change
// what kubevirtconfig.Validate decides: its creation and deletion, and
// updates of its configuration, phase or default architecture, not its
// status' conditions and versions.
var kubeVirtConfigChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldKV, okOld := e.ObjectOld.(*kubevirtv1.KubeVirt)
		newKV, okNew := e.ObjectNew.(*kubevirtv1.KubeVirt)
		if !okOld || !okNew {
			return true
		}
		return !equality.Semantic.DeepEqual(oldKV.Spec.Configuration, newKV.Spec.Configuration) ||
			oldKV.Status.Phase != newKV.Status.Phase ||
			oldKV.Status.DefaultArchitecture != newKV.Status.DefaultArchitecture ||
			oldKV.DeletionTimestamp.IsZero() != newKV.DeletionTimestamp.IsZero()
	},
}

func referencedKinds(o client.Object) []string {
	t := o.(*infrav1.KubeVirtMachineTemplate)
	spec := t.Spec.Template.Spec
	var keys []string
	if spec.Instancetype != nil {
		keys = append(keys, string(spec.Instancetype.EffectiveKind())+"/"+spec.Instancetype.Name)
	}
	if spec.Preference != nil {
		keys = append(keys, string(spec.Preference.EffectiveKind())+"/"+spec.Preference.Name)
	}
	return keys
}

// referencingTemplates maps an instancetype or preference to the unresolved
// templates that reference it.
func (r *Reconciler) referencingTemplates(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		opts := []client.ListOption{client.MatchingFields{instancetypeIndex: kind + "/" + o.GetName()}}
		if o.GetNamespace() != "" {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		return r.unresolved(ctx, opts...)
	}
}

// clusterTemplates maps a Cluster to its templates, which pause and resume
// with it.
func (r *Reconciler) clusterTemplates(ctx context.Context, o client.Object) []reconcile.Request {
	templates := &infrav1.KubeVirtMachineTemplateList{}
	if err := r.Client.List(ctx, templates, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list the KubeVirtMachineTemplates of a Cluster", "Cluster", klog.KObj(o))
		return nil
	}
	requests := make([]reconcile.Request, 0, len(templates.Items))
	for i := range templates.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&templates.Items[i])})
	}
	return requests
}

func (r *Reconciler) classTemplates(ctx context.Context, o client.Object) []reconcile.Request {
	return r.unresolved(ctx, client.MatchingLabels{infrav1.WorkerClassLabel: o.GetName()})
}

func (r *Reconciler) unresolvedTemplates(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.unresolved(ctx)
}

func (r *Reconciler) unresolved(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	templates := &infrav1.KubeVirtMachineTemplateList{}
	if err := r.Client.List(ctx, templates, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list KubeVirtMachineTemplates")
		return nil
	}
	var requests []reconcile.Request
	for i := range templates.Items {
		if templates.Items[i].Status.Resolved == nil {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&templates.Items[i])})
		}
	}
	return requests
}

// Reconcile resolves one template, once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	t := &infrav1.KubeVirtMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Templates of a Cluster pause with it; standalone templates have none.
	var cluster *clusterv1.Cluster
	if t.Labels[clusterv1.ClusterNameLabel] != "" {
		c, err := util.GetClusterFromMetadata(ctx, r.Client, t.ObjectMeta)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if c != nil {
			cluster = c
			log = log.WithValues("Cluster", klog.KObj(c))
			ctx = ctrl.LoggerInto(ctx, log)
		}
	}
	patchHelper, err := patch.NewHelper(t, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, t); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if !t.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	defer func() {
		opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
			infrav1.ResolvedCondition, clusterv1.PausedCondition,
		}}}
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := patchHelper.Patch(ctx, t, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if t.Status.Resolved != nil {
		setResolved(t, metav1.ConditionTrue, infrav1.ResolvedReason, resolvedMessage(t.Status.Resolved))
		return ctrl.Result{}, nil
	}

	resolved, errs, err := r.resolve(ctx, t)
	if err != nil {
		return ctrl.Result{}, err
	}
	reason := infrav1.ResolutionFailedReason
	if len(errs) == 0 {
		var node capacity.Node
		node, errs, reason, err = r.capacity(ctx, t, resolved.Image)
		if err != nil {
			return ctrl.Result{}, err
		}
		t.Status.Capacity, t.Status.NodeInfo, t.Status.NodeLabels = node.Capacity, node.Info, node.Labels
	}
	if len(errs) > 0 {
		t.Status.Capacity, t.Status.NodeInfo, t.Status.NodeLabels = nil, infrav1.NodeInfo{}, nil
		setResolved(t, metav1.ConditionFalse, reason, errs.ToAggregate().Error())
		return ctrl.Result{}, nil
	}
	t.Status.Resolved = resolved
	setResolved(t, metav1.ConditionTrue, infrav1.ResolvedReason, resolvedMessage(resolved))
	log.Info("Resolved and froze the template", "workerClass", resolved.WorkerClassName,
		"kubernetesVersion", resolved.KubernetesVersion, "contentHash", resolved.ContentHash)
	return ctrl.Result{}, nil
}

func setResolved(t *infrav1.KubeVirtMachineTemplate, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(t, metav1.Condition{Type: infrav1.ResolvedCondition, Status: status, Reason: reason, Message: redact.URLCredentials(message)})
}

func resolvedMessage(r *infrav1.ResolvedMachine) string {
	if r.WorkerClassName == "" {
		return fmt.Sprintf("Classless template resolved; content hash %s", r.ContentHash)
	}
	return fmt.Sprintf("Resolved from WorkerClass %s: %s, Kubernetes %s (%s match); content hash %s",
		r.WorkerClassName, r.Bootstrap, r.KubernetesVersion, r.KubernetesVersionMatch, r.ContentHash)
}

// resolve returns the frozen result, or the field errors that prevent it.
func (r *Reconciler) resolve(ctx context.Context, t *infrav1.KubeVirtMachineTemplate) (*infrav1.ResolvedMachine, field.ErrorList, error) {
	machine := &t.Spec.Template.Spec
	machinePath := field.NewPath("spec", "template", "spec")
	selection := machine.WorkerClass
	if selection == nil {
		if machine.Image == nil {
			return nil, field.ErrorList{field.Required(machinePath.Child("image"), "a template without a workerClass needs an explicit image")}, nil
		}
		if errs := migration.Validate(machine, *machine.Image, machinePath); len(errs) > 0 {
			return nil, errs, nil
		}
		return Classless(machine), nil, nil
	}
	selectionPath := machinePath.Child("workerClass")
	classPath := selectionPath.Child("name")
	if !r.WorkerClasses {
		return nil, field.ErrorList{field.Forbidden(classPath, "the infrastructure manager runs with the WorkerClass feature gate off")}, nil
	}
	class := &workerclassv1.WorkerClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: selection.Name}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, field.ErrorList{field.NotFound(classPath, selection.Name)}, nil
		}
		return nil, nil, err
	}
	if !class.DeletionTimestamp.IsZero() {
		return nil, field.ErrorList{field.Invalid(classPath, class.Name, "the WorkerClass is being deleted")}, nil
	}
	var platform *workerclassv1.WorkerPlatformSpec
	p := &workerclassv1.WorkerPlatform{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: workerclassv1.PlatformName}, p); {
	case err == nil:
		platform = &p.Spec
	case !apierrors.IsNotFound(err):
		return nil, nil, err
	}
	res, errs := resolve.Resolve(resolve.Input{
		Class:     class,
		Pool:      selection.PoolSettings,
		Platform:  platform,
		Substrate: resolve.KubeVirt,
		Path:      selectionPath,
	})
	if len(errs) > 0 {
		return nil, errs, nil
	}
	resolved, errs := FromResult(class.Name, res, machine.CloudInitDatasource)
	if len(errs) > 0 {
		return nil, errs, nil
	}
	if resolved.Image.HTTPImport != nil && (machine.RootDisk == nil || machine.RootDisk.Size == nil) {
		return nil, field.ErrorList{field.Required(machinePath.Child("rootDisk", "size"),
			"the class resolves to an HTTP import, which needs the size of the volume it imports into")}, nil
	}
	if errs := migration.Validate(machine, resolved.Image, machinePath); len(errs) > 0 {
		return nil, errs, nil
	}
	return resolved, nil, nil
}

// capacity reads the template's instancetype and preference, refuses a
// template whose VMs KubeVirt would refuse, and computes one machine's
// capacity, node info and node labels. reason is the Resolved condition's reason for
// the errors: KubeVirtFeatureNotEnabled when the spec is sound but the
// installed KubeVirt does not run it (a hoster's configuration change
// resolves it), ResolutionFailed otherwise.
func (r *Reconciler) capacity(ctx context.Context, t *infrav1.KubeVirtMachineTemplate, image infrav1.ImageSource) (capacity.Node, field.ErrorList, string, error) {
	spec := &t.Spec.Template.Spec
	path := field.NewPath("spec", "template", "spec")
	in := capacity.Input{Spec: spec, Image: image}
	var prefSpec *instancetypev1beta1.VirtualMachinePreferenceSpec
	if ref := spec.Instancetype; ref != nil {
		itSpec, missing, err := instancetype.Instancetype(ctx, r.Infrastructure.Client, t.Namespace, ref, path.Child("instancetype"))
		if err != nil || missing != nil {
			return capacity.Node{}, fieldErrors(missing), infrav1.ResolutionFailedReason, err
		}
		in.Instancetype = itSpec
	}
	if ref := spec.Preference; ref != nil {
		var missing *field.Error
		var err error
		prefSpec, missing, err = instancetype.Preference(ctx, r.Infrastructure.Client, t.Namespace, ref, path.Child("preference"))
		if err != nil || missing != nil {
			return capacity.Node{}, fieldErrors(missing), infrav1.ResolutionFailedReason, err
		}
		in.PreferredArchitecture = ptr.Deref(prefSpec.PreferredArchitecture, "")
	}
	// The webhooks' rule, with what they may not have seen: the
	// instancetype or preference can have been created or changed since.
	errs := instancetype.Validate(spec, in.Instancetype, prefSpec, path)
	// The renderer's rule, for a template written past the webhook: no
	// machine of it would get a VM.
	errs = append(errs, vmspec.ValidateMetadataAndSpread(spec, path)...)
	if in.Instancetype != nil {
		errs = append(errs, gpuErrors(t, in.Instancetype)...)
	}
	if len(errs) > 0 {
		return capacity.Node{}, errs, infrav1.ResolutionFailedReason, nil
	}
	kv, err := kubevirtconfig.Installed(ctx, r.Infrastructure.Client)
	if err != nil {
		return capacity.Node{}, nil, "", err
	}
	if errs := kubevirtconfig.Validate(kubevirtconfig.Input{Spec: spec, Instancetype: in.Instancetype, Preference: prefSpec, KubeVirt: kv}, path); len(errs) > 0 {
		return capacity.Node{}, errs, infrav1.KubeVirtFeatureNotEnabledReason, nil
	}
	return capacity.Compute(in), nil, "", nil
}

// gpuErrors checks a class-based template's pool GPUs, which drive the
// class's GPU rules, against the GPUs its machines get: the instancetype's
// when it attaches any, else the VM's (instancetype.GPUs; that a VM lists
// none beside an instancetype's is instancetype.Conflicts').
func gpuErrors(t *infrav1.KubeVirtMachineTemplate, it *instancetypev1beta1.VirtualMachineInstancetypeSpec) field.ErrorList {
	selection := t.Spec.Template.Spec.WorkerClass
	if selection == nil {
		return nil
	}
	attached := instancetype.GPUs(&t.Spec.Template.Spec, it)
	pool := make([]string, 0, len(selection.GPUs))
	for _, g := range selection.GPUs {
		pool = append(pool, g.Name)
	}
	slices.Sort(pool)
	slices.Sort(attached)
	if slices.Equal(pool, attached) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec", "template", "spec", "workerClass", "gpus"), pool,
		fmt.Sprintf("must list the GPUs the machines get, from instancetype %s or spec.template.spec.gpus: %v", t.Spec.Template.Spec.Instancetype.Name, attached))}
}

// fieldErrors wraps a single field error, if any.
func fieldErrors(err *field.Error) field.ErrorList {
	if err == nil {
		return nil
	}
	return field.ErrorList{err}
}
