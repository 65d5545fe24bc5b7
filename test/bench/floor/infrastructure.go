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

package floor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// Infrastructure reconciles KubeVirtMachines with the infrastructure
// contract's floor: the VirtualMachine (and the user data Secret it
// boots with), spec.providerID, and status.initialization.provisioned with
// Ready once the VirtualMachine is ready.
type Infrastructure struct {
	// Client reads KubeVirtMachines, Machines, their templates and
	// VirtualMachines from the cache and writes.
	Client client.Client
	// APIReader reads the bootstrap data Secret uncached, once per machine,
	// so no Secret is cached.
	APIReader client.Reader

	// created and provisioned are the machines whose VirtualMachine or
	// provisioned status this process wrote and the cache may not show
	// yet: they are not written again.
	created, provisioned sync.Map
}

// SetupWithManager registers the reconciler with its watches: the
// machines, their Machines (bootstrap data) and the VirtualMachines they own.
func (r *Infrastructure) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "floor-infrastructure")
	return capicontrollerutil.NewControllerManagedBy(mgr, log).
		For(&infrav1.KubeVirtMachine{}).
		Named("floor-infrastructure").
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("KubeVirtMachine")))).
		Owns(&kubevirtv1.VirtualMachine{}).
		Complete(ctx, r)
}

// Reconcile creates the machine's VirtualMachine once its bootstrap data
// exists, and reports it provisioned once the VirtualMachine is ready.
func (r *Infrastructure) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kvm := &infrav1.KubeVirtMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, kvm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ptr.Deref(kvm.Status.Initialization.Provisioned, false) || !kvm.DeletionTimestamp.IsZero() {
		r.created.Delete(kvm.UID)
		r.provisioned.Delete(kvm.UID)
		return ctrl.Result{}, nil
	}
	if _, ok := r.provisioned.Load(kvm.UID); ok {
		return ctrl.Result{}, nil
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, kvm.ObjectMeta)
	if err != nil || machine == nil {
		return ctrl.Result{}, err
	}

	vm := &kubevirtv1.VirtualMachine{}
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(kvm), vm)
	switch {
	case apierrors.IsNotFound(err):
		if _, ok := r.created.Load(kvm.UID); ok {
			// The VirtualMachine's event brings the machine back.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.createVirtualMachine(ctx, kvm, machine)
	case err != nil:
		return ctrl.Result{}, err
	}
	if kvm.Spec.ProviderID == "" {
		if _, ok := r.created.Load(kvm.UID); ok {
			// The event of our spec patch brings the machine back.
			return ctrl.Result{}, nil
		}
		// A reconcile created the VirtualMachine but failed to set it.
		return ctrl.Result{}, r.setProviderID(ctx, kvm)
	}
	if !vm.Status.Ready {
		return ctrl.Result{}, nil
	}
	// One status patch: Cluster API's patch helper would write the
	// conditions and the rest of the status in two.
	before := kvm.DeepCopy()
	kvm.Status.Initialization.Provisioned = ptr.To(true)
	conditions.Set(kvm, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
	if err := r.Client.Status().Patch(ctx, kvm, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching the KubeVirtMachine status: %w", err)
	}
	r.provisioned.Store(kvm.UID, struct{}{})
	return ctrl.Result{}, nil
}

// createVirtualMachine renders the machine's objects as ours does and
// creates them, and sets the providerID the kubelet registers with.
func (r *Infrastructure) createVirtualMachine(ctx context.Context, kvm *infrav1.KubeVirtMachine, machine *clusterv1.Machine) error {
	dataSecretName := ptr.Deref(machine.Spec.Bootstrap.DataSecretName, "")
	if dataSecretName == "" {
		// The Machine's event brings the machine back once it has data.
		return nil
	}
	image, datasource, err := r.image(ctx, kvm)
	if err != nil || image == nil {
		return err
	}
	data := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: dataSecretName}, data); err != nil {
		return fmt.Errorf("reading the bootstrap data Secret: %w", err)
	}
	objs, errs := vmspec.Render(vmspec.Input{
		Machine:       kvm,
		ClusterName:   machine.Spec.ClusterName,
		Image:         *image,
		Datasource:    datasource,
		FailureDomain: machine.Spec.FailureDomain,
		UserData:      data.Data["value"],
	})
	if len(errs) > 0 {
		return fmt.Errorf("rendering the VirtualMachine: %w", errs.ToAggregate())
	}
	for _, o := range []client.Object{objs.UserData, objs.ImportCA, objs.RootDataVolume, objs.VirtualMachine} {
		if util.IsNil(o) {
			continue
		}
		if err := r.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	ctrl.LoggerFrom(ctx).Info("Created the VirtualMachine", "VirtualMachine", klog.KObj(objs.VirtualMachine))
	return r.setProviderID(ctx, kvm)
}

// setProviderID sets the providerID the kubelet registers with, and
// remembers the machine as created until its cache shows it provisioned.
func (r *Infrastructure) setProviderID(ctx context.Context, kvm *infrav1.KubeVirtMachine) error {
	before := kvm.DeepCopy()
	kvm.Spec.ProviderID = providerIDPrefix + kvm.Name
	if err := r.Client.Patch(ctx, kvm, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("setting spec.providerID: %w", err)
	}
	r.created.Store(kvm.UID, struct{}{})
	return nil
}

// image is the machine's own image, or its template's resolved one; nil
// while the template is not resolved (the floor runs on resolved templates
// only, so nothing watches them).
func (r *Infrastructure) image(ctx context.Context, kvm *infrav1.KubeVirtMachine) (*infrav1.ImageSource, infrav1.CloudInitDatasource, error) {
	if kvm.Spec.Image != nil {
		return kvm.Spec.Image, kvm.Spec.CloudInitDatasource, nil
	}
	name := kvm.Annotations[clusterv1.TemplateClonedFromNameAnnotation]
	if name == "" {
		return nil, "", errors.New("the machine has no spec.image and was not cloned from a template")
	}
	template := &infrav1.KubeVirtMachineTemplate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: name}, template); err != nil {
		return nil, "", err
	}
	if template.Status.Resolved == nil {
		return nil, "", fmt.Errorf("KubeVirtMachineTemplate %s is not resolved", name)
	}
	return &template.Status.Resolved.Image, template.Status.Resolved.CloudInitDatasource, nil
}
