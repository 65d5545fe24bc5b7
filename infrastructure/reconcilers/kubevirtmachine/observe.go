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
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/kubevirtconfig"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/metrics"
)

// Observing a created machine: its VM, instance and disks as the caches
// show them become its conditions, addresses and provisioned state.

// observe reports the VM, its instance and its root disk.
func (r *Reconciler) observe(ctx context.Context, s *scope, vm *kubevirtv1.VirtualMachine) (ctrl.Result, error) {
	kvm, machine := s.kubeVirtMachine, s.machine
	o := &observation{
		provisioned:            ptr.Deref(kvm.Status.Initialization.Provisioned, false),
		provisionedInstanceUID: kvm.Status.ProvisionedInstanceUID,
		nodeJoined:             machine.Status.NodeRef.IsDefined(),
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
			metrics.ObserveProvisioned(machine.CreationTimestamp, time.Now())
		} else if o.ephemeral() && !o.nodeJoined && string(o.vmi.UID) != o.provisionedInstanceUID {
			// A container-disk instance that stopped before the node
			// joined lost nothing (virtualMachineGone): the new one is
			// the instance whose disk the node will keep.
			kvm.Status.ProvisionedInstanceUID = string(o.vmi.UID)
			ctrl.LoggerFrom(ctx).Info("A new instance of the machine's container disk runs before the node joined; it is the provisioned instance now", "VirtualMachineInstance", klog.KObj(o.vmi), "previous", o.provisionedInstanceUID)
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
