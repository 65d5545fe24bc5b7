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

package kubevirt

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

// PodScheduledCondition is the VirtualMachine condition KubeVirt copies
// from an instance whose pod cannot be scheduled.
const PodScheduledCondition kubevirtv1.VirtualMachineConditionType = "PodScheduled"

// reconcileVirtualMachine plays virt-controller for one VirtualMachine.
func (s *Simulator) reconcileVirtualMachine(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := s.client.Get(ctx, req.NamespacedName, vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, req.NamespacedName, vmi); apierrors.IsNotFound(err) {
		vmi = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if vmi != nil && !metav1.IsControlledBy(vmi, vm) {
		// An instance of an earlier VM of the same name, still shutting down.
		return reconcile.Result{RequeueAfter: s.opts.ShutdownDelay}, nil
	}

	if !vm.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, s.deleteVirtualMachine(ctx, vm, vmi)
	}
	if controllerutil.AddFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		// Update, not patch: the finalizer must not be added to a VM that
		// changed (or started deleting) since it was read.
		return reconcile.Result{}, client.IgnoreNotFound(s.client.Update(ctx, vm))
	}
	if err := s.ensureDataVolumeTemplates(ctx, vm); err != nil {
		return reconcile.Result{}, err
	}
	disks, err := s.diskState(ctx, vm)
	if err != nil {
		return reconcile.Result{}, err
	}

	var requeue time.Duration
	strategy := kubevirtstatus.RunStrategy(vm)
	var startProblem string
	switch {
	case vmi != nil && !vmi.DeletionTimestamp.IsZero():
		// Wait for the old instance to shut down.
	case vmi != nil && strategy == kubevirtv1.RunStrategyHalted:
		if err := s.deleteInstance(ctx, vmi); err != nil {
			return reconcile.Result{}, err
		}
	case vmi != nil && kubevirtstatus.Finished(vmi):
		if kubevirtstatus.Restarts(strategy, vmi.Status.Phase == kubevirtv1.Failed) {
			stopped := s.stoppedTime(vmi)
			if time.Since(stopped) < s.opts.RestartDelay {
				requeue = after(stopped, s.opts.RestartDelay)
				break
			}
			if err := s.deleteInstance(ctx, vmi); err != nil {
				return reconcile.Result{}, err
			}
		}
	case vmi == nil && s.shouldStart(vm, strategy) && disks.ready:
		vmi, startProblem, err = s.startInstance(ctx, vm)
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, s.updateVirtualMachineStatus(ctx, vm, vmi, disks, startProblem)
}

func (s *Simulator) deleteVirtualMachine(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vmi != nil {
		if vmi.DeletionTimestamp.IsZero() {
			if err := s.deleteInstance(ctx, vmi); err != nil {
				return err
			}
		}
		// The instance's deletion brings the VM back here.
		return s.updateVirtualMachineStatus(ctx, vm, vmi, diskReadiness{ready: true}, "")
	}
	if controllerutil.RemoveFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		if err := s.client.Update(ctx, vm); err != nil {
			return client.IgnoreNotFound(err)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Simulated KubeVirt released the deleted VirtualMachine")
	}
	s.mu.Lock()
	delete(s.started, vm.UID)
	s.mu.Unlock()
	return nil
}

func (s *Simulator) deleteInstance(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	err := s.client.Delete(ctx, vmi, client.Preconditions{UID: ptr.To(vmi.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting VirtualMachineInstance %s: %w", vmi.Name, err)
	}
	return nil
}

func (s *Simulator) shouldStart(vm *kubevirtv1.VirtualMachine, strategy kubevirtv1.VirtualMachineRunStrategy) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch strategy {
	case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure:
		return true
	case kubevirtv1.RunStrategyOnce:
		return !s.started[vm.UID]
	default:
		return false
	}
}

func (s *Simulator) stoppedTime(vmi *kubevirtv1.VirtualMachineInstance) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.instances[vmi.UID]; ok && !p.stopped.IsZero() {
		return p.stopped
	}
	return time.Time{}
}

// ensureDataVolumeTemplates creates the DataVolumes a VM declares, owned by
// it so the garbage collector removes them with it.
func (s *Simulator) ensureDataVolumeTemplates(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	for _, t := range vm.Spec.DataVolumeTemplates {
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   vm.Namespace,
				Name:        t.Name,
				Labels:      t.Labels,
				Annotations: t.Annotations,
				OwnerReferences: []metav1.OwnerReference{
					*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind),
				},
			},
			Spec: *t.Spec.DeepCopy(),
		}
		if err := s.client.Create(ctx, dv); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DataVolume %s from the template of VirtualMachine %s: %w", t.Name, vm.Name, err)
		}
	}
	return nil
}

// diskReadiness is whether a VM's volumes let it start, and if not, the
// printable status KubeVirt shows.
type diskReadiness struct {
	ready     bool
	printable kubevirtv1.VirtualMachinePrintableStatus
	message   string
}

func dataVolumeNames(vm *kubevirtv1.VirtualMachine) []string {
	if vm.Spec.Template == nil {
		return nil
	}
	var names []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume != nil {
			names = append(names, v.DataVolume.Name)
		}
	}
	return names
}

func (s *Simulator) diskState(ctx context.Context, vm *kubevirtv1.VirtualMachine) (diskReadiness, error) {
	if vm.Spec.Template == nil {
		return diskReadiness{printable: kubevirtv1.VirtualMachineStatusUnknown, message: "the VirtualMachine has no template"}, nil
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		switch {
		case v.DataVolume != nil:
			dv := &cdiv1.DataVolume{}
			err := s.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: v.DataVolume.Name}, dv)
			if apierrors.IsNotFound(err) {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusProvisioning, message: fmt.Sprintf("DataVolume %s does not exist", v.DataVolume.Name)}, nil
			}
			if err != nil {
				return diskReadiness{}, err
			}
			if dv.Status.Phase == cdiv1.Failed || runningFailed(dv) {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusDataVolumeError, message: fmt.Sprintf("DataVolume %s has an error", dv.Name)}, nil
			}
			if dv.Status.Phase != cdiv1.Succeeded {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusProvisioning, message: fmt.Sprintf("DataVolume %s is %s", dv.Name, dv.Status.Phase)}, nil
			}
		case v.PersistentVolumeClaim != nil:
			err := s.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &corev1.PersistentVolumeClaim{})
			if apierrors.IsNotFound(err) {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusPvcNotFound, message: fmt.Sprintf("PersistentVolumeClaim %s does not exist", v.PersistentVolumeClaim.ClaimName)}, nil
			}
			if err != nil {
				return diskReadiness{}, err
			}
		case v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil:
			ref := kubevirtstatus.UserDataSecretRef(v)
			if ref == nil {
				continue
			}
			// virt-controller refuses to start a VM whose cloud-init Secret
			// is missing.
			err := s.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: ref.Name}, &corev1.Secret{})
			if apierrors.IsNotFound(err) {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusStopped, message: fmt.Sprintf("Secret %s of the cloud-init volume does not exist", ref.Name)}, nil
			}
			if err != nil {
				return diskReadiness{}, err
			}
		}
	}
	return diskReadiness{ready: true}, nil
}

func runningFailed(dv *cdiv1.DataVolume) bool {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeRunning && c.Status == corev1.ConditionFalse && c.Reason == "Error" {
			return true
		}
	}
	return false
}

// startInstance creates the VM's instance from its template, with the
// instancetype applied as virt-controller does. A problem that keeps the VM
// from starting is returned as a message.
func (s *Simulator) startInstance(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, string, error) {
	t := vm.Spec.Template
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       vm.Namespace,
			Name:            vm.Name,
			Labels:          maps.Clone(t.ObjectMeta.Labels),
			Annotations:     maps.Clone(t.ObjectMeta.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
			Finalizers:      []string{kubevirtv1.VirtualMachineControllerFinalizer, kubevirtv1.VirtualMachineInstanceFinalizer},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	if vm.Spec.Instancetype != nil {
		spec, err := s.instancetype(ctx, vm)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("%s %s does not exist", vm.Spec.Instancetype.Kind, vm.Spec.Instancetype.Name), nil
		}
		if err != nil {
			return nil, "", err
		}
		vmi.Spec.Domain.CPU = &kubevirtv1.CPU{Sockets: spec.CPU.Guest, Cores: 1, Threads: 1, Model: ptr.Deref(spec.CPU.Model, ""), DedicatedCPUPlacement: ptr.Deref(spec.CPU.DedicatedCPUPlacement, false)}
		vmi.Spec.Domain.Memory = &kubevirtv1.Memory{Guest: ptr.To(spec.Memory.Guest.DeepCopy())}
		vmi.Spec.Domain.Devices.GPUs = append(vmi.Spec.Domain.Devices.GPUs, spec.GPUs...)
		vmi.Spec.Domain.Devices.HostDevices = append(vmi.Spec.Domain.Devices.HostDevices, spec.HostDevices...)
		if len(spec.NodeSelector) > 0 {
			if vmi.Spec.NodeSelector == nil {
				vmi.Spec.NodeSelector = map[string]string{}
			}
			for k, v := range spec.NodeSelector {
				vmi.Spec.NodeSelector[k] = v
			}
		}
	}
	if err := s.client.Create(ctx, vmi); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("creating the VirtualMachineInstance of %s: %w", vm.Name, err)
	}
	s.mu.Lock()
	s.started[vm.UID] = true
	s.mu.Unlock()
	ctrl.LoggerFrom(ctx).V(2).Info("Simulated KubeVirt started a VirtualMachineInstance", "uid", vmi.UID)
	return vmi, "", nil
}

func (s *Simulator) instancetype(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*instancetypev1beta1.VirtualMachineInstancetypeSpec, error) {
	ref := vm.Spec.Instancetype
	if ref.Kind == "" || ref.Kind == "VirtualMachineClusterInstancetype" || ref.Kind == "virtualmachineclusterinstancetype" {
		it := &instancetypev1beta1.VirtualMachineClusterInstancetype{}
		if err := s.client.Get(ctx, client.ObjectKey{Name: ref.Name}, it); err != nil {
			return nil, err
		}
		return &it.Spec, nil
	}
	it := &instancetypev1beta1.VirtualMachineInstancetype{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: ref.Name}, it); err != nil {
		return nil, err
	}
	return &it.Spec, nil
}

// updateVirtualMachineStatus writes the status virt-controller derives from
// the VM, its instance and its disks.
func (s *Simulator) updateVirtualMachineStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, disks diskReadiness, startProblem string) error {
	desired := vm.DeepCopy()
	st := &desired.Status
	st.RunStrategy = kubevirtstatus.RunStrategy(vm)
	st.ObservedGeneration, st.DesiredGeneration = vm.Generation, vm.Generation
	st.Created = vmi != nil
	st.Ready = vmi != nil && vmi.Status.Phase == kubevirtv1.Running && kubevirtstatus.InstanceReady(vmi)
	ready := vmCondition(kubevirtv1.VirtualMachineReady, corev1.ConditionFalse, "VMINotExists", "VMI does not exist")
	conds := []kubevirtv1.VirtualMachineCondition{}
	switch {
	case !vm.DeletionTimestamp.IsZero():
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusTerminating
	case startProblem != "":
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
		conds = append(conds, vmCondition(kubevirtv1.VirtualMachineFailure, corev1.ConditionTrue, "FailedCreate", startProblem))
	case vmi == nil && !disks.ready:
		st.PrintableStatus = disks.printable
		ready.Message = disks.message
	case vmi == nil && !s.wouldRun(vm):
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	case vmi == nil:
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStarting
	case !vmi.DeletionTimestamp.IsZero():
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStopping
		ready.Reason, ready.Message = "VMIStopping", "VMI is shutting down"
	default:
		if c := kubevirtstatus.InstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil && c.Status == corev1.ConditionFalse {
			st.PrintableStatus = kubevirtv1.VirtualMachineStatusUnschedulable
			conds = append(conds, vmCondition(PodScheduledCondition, corev1.ConditionFalse, c.Reason, c.Message))
			ready.Reason, ready.Message = "VMINotReady", "VMI is not scheduled"
			break
		}
		switch vmi.Status.Phase {
		case kubevirtv1.Running:
			st.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
			if st.Ready {
				ready = vmCondition(kubevirtv1.VirtualMachineReady, corev1.ConditionTrue, "", "")
			}
		case kubevirtv1.Failed, kubevirtv1.Succeeded:
			st.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
			if kubevirtstatus.Restarts(kubevirtstatus.RunStrategy(vm), vmi.Status.Phase == kubevirtv1.Failed) {
				st.PrintableStatus = kubevirtv1.VirtualMachineStatusStarting
			}
			ready.Reason, ready.Message = "VMINotReady", fmt.Sprintf("VMI is %s", vmi.Status.Phase)
		default:
			st.PrintableStatus = kubevirtv1.VirtualMachineStatusStarting
			ready.Reason, ready.Message = "VMINotReady", fmt.Sprintf("VMI is %s", vmi.Status.Phase)
		}
	}
	st.Conditions = append([]kubevirtv1.VirtualMachineCondition{ready}, conds...)
	for i := range st.Conditions {
		for _, old := range vm.Status.Conditions {
			c := &st.Conditions[i]
			if old.Type == c.Type && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
				c.LastTransitionTime, c.LastProbeTime = old.LastTransitionTime, old.LastProbeTime
			}
		}
	}
	if equality.Semantic.DeepEqual(vm.Status, desired.Status) {
		return nil
	}
	return client.IgnoreNotFound(s.client.Status().Patch(ctx, desired, client.MergeFrom(vm)))
}

func (s *Simulator) wouldRun(vm *kubevirtv1.VirtualMachine) bool {
	return s.shouldStart(vm, kubevirtstatus.RunStrategy(vm))
}

func vmCondition(t kubevirtv1.VirtualMachineConditionType, status corev1.ConditionStatus, reason, message string) kubevirtv1.VirtualMachineCondition {
	return kubevirtv1.VirtualMachineCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now(), LastProbeTime: metav1.Time{}}
}
