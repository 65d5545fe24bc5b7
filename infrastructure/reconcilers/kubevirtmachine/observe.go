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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/kubevirtconfig"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/metrics"
)

// Observing a created machine: its VM, instance and disks as the caches
// show them become its conditions, addresses and provisioned state.

// observation is what the controller sees of a machine's KubeVirt objects.
// The condition ladder (conditions.go) turns it into conditions; it and the
// methods below are pure, so every rule has a table test.
type observation struct {
	// provisioned is the machine's status.initialization.provisioned.
	provisioned bool
	// provisionedInstanceUID is the machine's recorded first ready instance.
	provisionedInstanceUID string
	// nodeJoined is whether the Machine has its Node (status.nodeRef): only
	// then does a container disk hold state a new instance would lose.
	nodeJoined bool
	// machineDeleting is whether the Machine is being deleted: Cluster API
	// drains its Node, then deletes this machine.
	machineDeleting bool
	// replaceable is whether a MachineSet controls the Machine, and so
	// replaces it when it is deleted.
	replaceable bool
	vm          *kubevirtv1.VirtualMachine
	vmi         *kubevirtv1.VirtualMachineInstance
	// rootDataVolume is nil for container disks, and before it is created.
	rootDataVolume *cdiv1.DataVolume
	// rootDataVolumeName is empty for container disks.
	rootDataVolumeName string
	// containerDisk is the root container disk's image; empty otherwise.
	containerDisk string
	// importFailureRestarts is how many importer pod restarts count as a
	// failed import.
	importFailureRestarts int32
	// bootDisk is the BootDiskReady condition as last written: a failed
	// import keeps CDI's words from it while CDI's restarted importer runs.
	bootDisk *metav1.Condition
	// clusterEvictionStrategy is the KubeVirt CR's cluster-wide eviction
	// strategy, read only for an evacuating instance that names none.
	clusterEvictionStrategy *kubevirtv1.EvictionStrategy
	// migration is KubeVirt's newest migration of an instance it
	// live-migrates off a drained node; nil otherwise.
	migration *kubevirtv1.VirtualMachineInstanceMigration
}

func (o *observation) ephemeral() bool { return o.containerDisk != "" }

// evacuating reports whether KubeVirt marked the instance for evacuation
// from the node it runs on: its eviction admitter sets
// status.evacuationNodeName for the strategies it acts on (External,
// LiveMigrate, LiveMigrateIfPossible) and denies the eviction. A migrated
// instance runs elsewhere and is no longer evacuating.
func (o *observation) evacuating() bool {
	vmi := o.vmi
	return vmi != nil && vmi.Status.EvacuationNodeName != "" && vmi.Status.EvacuationNodeName == vmi.Status.NodeName &&
		vmi.DeletionTimestamp.IsZero() && !vmi.IsFinal()
}

// evictionStrategy is the strategy KubeVirt applies to the instance, as its
// eviction admitter chooses it: the instance's own (virt-api fills it in
// from the KubeVirt CR when the VM names none), else the cluster-wide one,
// else None.
func (o *observation) evictionStrategy() kubevirtv1.EvictionStrategy {
	switch {
	case o.vmi != nil && o.vmi.Spec.EvictionStrategy != nil:
		return *o.vmi.Spec.EvictionStrategy
	case o.clusterEvictionStrategy != nil:
		return *o.clusterEvictionStrategy
	}
	return kubevirtv1.EvictionStrategyNone
}

// stopsForEvacuation reports whether KubeVirt leaves the evacuation of the
// instance to this provider: only eviction strategy External does. Under
// LiveMigrate and LiveMigrateIfPossible KubeVirt live-migrates it itself,
// and stopping it would kill a VM on the move.
func (o *observation) stopsForEvacuation() bool {
	return o.evacuating() && o.evictionStrategy() == kubevirtv1.EvictionStrategyExternal
}

// liveMigrating reports whether KubeVirt live-migrates the instance off a
// drained node.
func (o *observation) liveMigrating() bool {
	switch o.evictionStrategy() {
	case kubevirtv1.EvictionStrategyLiveMigrate, kubevirtv1.EvictionStrategyLiveMigrateIfPossible:
		return o.evacuating()
	}
	return false
}

func (o *observation) runStrategy() kubevirtv1.VirtualMachineRunStrategy {
	if o.vm != nil && o.vm.Spec.RunStrategy != nil {
		return *o.vm.Spec.RunStrategy
	}
	return kubevirtv1.RunStrategyAlways
}

// restartsInstances reports whether KubeVirt starts a new instance after the
// current one stopped or failed.
func (o *observation) restartsInstances(failed bool) bool {
	switch o.runStrategy() {
	case kubevirtv1.RunStrategyAlways:
		return true
	case kubevirtv1.RunStrategyRerunOnFailure:
		return failed
	default:
		return false
	}
}

// restartedInstance reports whether the instance is not the one that first
// became ready on the machine's persistent disk.
func (o *observation) restartedInstance() bool {
	return o.provisioned && o.vmi != nil && o.provisionedInstanceUID != "" && string(o.vmi.UID) != o.provisionedInstanceUID
}

// containerDiskVerdict is what a container-disk machine's instance means
// for its node, whose state lives on the instance's disk alone.
type containerDiskVerdict int

const (
	// containerDiskKept: nothing was lost (no container disk, no
	// provisioned instance yet, the provisioned instance runs on, or it
	// stopped before the node joined); the rest of the ladder reports the
	// instance as any other.
	containerDiskKept containerDiskVerdict = iota
	// containerDiskLost: the instance that booted the disk stopped, or
	// another replaced it, after the node joined: a new instance boots a
	// blank disk and the node cannot rejoin (EphemeralDiskLost).
	containerDiskLost
	// containerDiskReplaced: another instance than the provisioned one
	// runs or starts before the node joined. It boots the same image with
	// the same, still valid, bootstrap data, so nothing was lost: the
	// ladder reports it restarting (InstanceRestarting) until it is ready,
	// and observe then records it as the provisioned instance.
	containerDiskReplaced
)

// containerDiskRule decides, in one place, whether the loss of a
// container-disk machine's instance lost its node: only once the Machine
// has its Node does the disk hold state a new instance would lose. Before
// that, KubeVirt's new instance (it restarts one whose QEMU crashed early
// in its boot) simply takes over.
func containerDiskRule(o *observation) containerDiskVerdict {
	vmi := o.vmi
	switch {
	case !o.ephemeral():
		return containerDiskKept
	case o.nodeJoined:
		if o.provisionedInstanceUID != "" && (vmi == nil || string(vmi.UID) != o.provisionedInstanceUID ||
			vmi.Status.Phase == kubevirtv1.Failed || vmi.Status.Phase == kubevirtv1.Succeeded) {
			return containerDiskLost
		}
	case o.provisioned && vmi != nil && string(vmi.UID) != o.provisionedInstanceUID:
		return containerDiskReplaced
	}
	return containerDiskKept
}

// observe reports the VM, its instance and its root disk.
func (r *Reconciler) observe(ctx context.Context, s *scope, vm *kubevirtv1.VirtualMachine) (ctrl.Result, error) {
	kvm, machine := s.kubeVirtMachine, s.machine
	o := &observation{
		provisioned:            ptr.Deref(kvm.Status.Initialization.Provisioned, false),
		provisionedInstanceUID: kvm.Status.ProvisionedInstanceUID,
		nodeJoined:             machine.Status.NodeRef.IsDefined(),
		machineDeleting:        !machine.DeletionTimestamp.IsZero(),
		replaceable:            controlledByMachineSet(machine),
		vm:                     vm,
		importFailureRestarts:  r.ImportFailureRestarts,
		bootDisk:               apimeta.FindStatusCondition(kvm.Status.Conditions, infrav1.BootDiskReadyCondition),
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
		if err := r.replaceEvacuatedMachine(ctx, kvm, machine, o); err != nil {
			return ctrl.Result{}, err
		}
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
		} else if containerDiskRule(o) == containerDiskReplaced {
			// A container-disk instance that stopped before the node
			// joined lost nothing: the new one is the instance whose
			// disk the node will keep.
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

// replaceEvacuatedMachine hands an instance KubeVirt leaves to this
// provider (eviction strategy External on a drained infrastructure node)
// to Cluster API: it deletes the Machine, whose deletion drains the
// guest's Node first (cordon, evictions that honour PodDisruptionBudgets,
// the Machine's nodeDrainTimeoutSeconds), then deletes this machine and
// with it the VM, which ends the infrastructure node's drain; the
// MachineSet creates the replacement on another node. Stopping the
// instance instead, as the provider did, killed every pod on the worker
// without its disruption budget. A Machine no MachineSet controls is not
// deleted, since nothing would replace it: it reports that its owner must
// delete or move it, and the infrastructure node's drain waits.
func (r *Reconciler) replaceEvacuatedMachine(ctx context.Context, kvm *infrav1.KubeVirtMachine, machine *clusterv1.Machine, o *observation) error {
	if o.machineDeleting || !o.replaceable {
		return nil
	}
	err := r.Client.Delete(ctx, machine, client.Preconditions{UID: &machine.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting Machine %s of an instance on a drained infrastructure node: %w", machine.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted the Machine of an instance on a drained infrastructure node, so that Cluster API drains its Node before the instance stops",
		"Machine", klog.KObj(machine), "VirtualMachineInstance", klog.KObj(o.vmi), "node", o.vmi.Status.EvacuationNodeName)
	r.recordEvacuationHandedOver(kvm, machine, o.vmi.Status.EvacuationNodeName)
	return nil
}

// controlledByMachineSet says whether a MachineSet controls the Machine.
func controlledByMachineSet(machine *clusterv1.Machine) bool {
	owner := metav1.GetControllerOfNoCopy(machine)
	return owner != nil && owner.Kind == "MachineSet" && strings.HasPrefix(owner.APIVersion, clusterv1.GroupVersion.Group+"/")
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

// rootContainerDisk returns the container disk image a VM boots, or "".
func rootContainerDisk(vm *kubevirtv1.VirtualMachine) string {
	if vm == nil || vm.Spec.Template == nil {
		return ""
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.ContainerDisk != nil {
			return v.ContainerDisk.Image
		}
	}
	return ""
}

func dataVolumeCondition(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType) *cdiv1.DataVolumeCondition {
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == t {
			return &dv.Status.Conditions[i]
		}
	}
	return nil
}

func instanceCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func instanceReady(vmi *kubevirtv1.VirtualMachineInstance) bool {
	c := instanceCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// instanceIPs lists the instance's addresses in interface order, without
// duplicates.
func instanceIPs(vmi *kubevirtv1.VirtualMachineInstance) []string {
	var ips []string
	seen := map[string]bool{}
	add := func(ip string) {
		if ip != "" && !seen[ip] {
			seen[ip] = true
			ips = append(ips, ip)
		}
	}
	for _, iface := range vmi.Status.Interfaces {
		add(iface.IP)
		for _, ip := range iface.IPs {
			add(ip)
		}
	}
	return ips
}

// machineAddresses are the instance's addresses and hostname.
func machineAddresses(vmi *kubevirtv1.VirtualMachineInstance) []clusterv1.MachineAddress {
	if vmi == nil {
		return nil
	}
	var out []clusterv1.MachineAddress
	if vmi.Spec.Hostname != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: vmi.Spec.Hostname})
	}
	for _, ip := range instanceIPs(vmi) {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: ip})
	}
	return out
}

// failedCreateReason is virt-controller's reason on an instance's
// Synchronized condition when it cannot create the launcher Pod: it cannot
// render it (a GPU or host device missing from permittedHostDevices) or the
// API server refuses it (a quota). The VM meanwhile only says Starting.
const failedCreateReason = "FailedCreate"

// launchRefusal is the pending instance's Synchronized condition when
// virt-controller cannot create its launcher Pod, nil otherwise.
func launchRefusal(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstanceCondition {
	c := instanceCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != failedCreateReason {
		return nil
	}
	return c
}
