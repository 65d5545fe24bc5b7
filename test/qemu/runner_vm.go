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

package qemu

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

// podScheduledCondition is the VirtualMachine condition KubeVirt copies
// from an instance whose pod cannot be scheduled.
const podScheduledCondition kubevirtv1.VirtualMachineConditionType = "PodScheduled"

// reconcileVirtualMachine plays virt-controller for one VirtualMachine: its
// finalizer, the DataVolumes of its templates, an instance started when its
// disks are ready and the run strategy says so, a finished instance
// replaced, and the status.
func (r *Runner) reconcileVirtualMachine(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := r.client.Get(ctx, req.NamespacedName, vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.client.Get(ctx, req.NamespacedName, vmi); apierrors.IsNotFound(err) {
		vmi = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if vmi != nil && !metav1.IsControlledBy(vmi, vm) {
		// An instance of an earlier VM of the same name, still stopping;
		// its deletion requeues this VM.
		return reconcile.Result{}, nil
	}
	if !vm.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.deleteVirtualMachine(ctx, vm, vmi)
	}
	if controllerutil.AddFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		// Update, not patch: the finalizer must not be added to a VM that
		// changed (or started deleting) since it was read.
		return reconcile.Result{}, client.IgnoreNotFound(r.client.Update(ctx, vm))
	}
	if err := r.ensureDataVolumeTemplates(ctx, vm); err != nil {
		return reconcile.Result{}, err
	}
	disks, err := r.diskState(ctx, vm)
	if err != nil {
		return reconcile.Result{}, err
	}

	var requeue time.Duration
	strategy := kubevirtstatus.RunStrategy(vm)
	switch {
	case vmi != nil && !vmi.DeletionTimestamp.IsZero():
		// The old instance is stopping; its deletion requeues the VM.
	case vmi != nil && strategy == kubevirtv1.RunStrategyHalted:
		if err := deleteInstance(ctx, r.client, vmi); err != nil {
			return reconcile.Result{}, err
		}
	case vmi != nil && kubevirtstatus.Finished(vmi):
		if kubevirtstatus.Restarts(strategy, vmi.Status.Phase == kubevirtv1.Failed) {
			if wait := r.opts.RestartDelay - time.Since(stoppedAt(vmi)); wait > 0 {
				requeue = wait
				break
			}
			if err := deleteInstance(ctx, r.client, vmi); err != nil {
				return reconcile.Result{}, err
			}
		}
	case vmi == nil && r.shouldStart(vm, strategy) && disks.ready:
		if vmi, err = r.startInstance(ctx, vm); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, r.updateVirtualMachineStatus(ctx, vm, vmi, disks)
}

func (r *Runner) deleteVirtualMachine(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vmi != nil {
		if vmi.DeletionTimestamp.IsZero() {
			if err := deleteInstance(ctx, r.client, vmi); err != nil {
				return err
			}
		}
		// The instance's deletion (QEMU killed) brings the VM back here.
		return r.updateVirtualMachineStatus(ctx, vm, vmi, diskReadiness{ready: true})
	}
	if controllerutil.RemoveFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		if err := r.client.Update(ctx, vm); err != nil {
			return client.IgnoreNotFound(err)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("QEMU runner released the deleted VirtualMachine")
	}
	r.mu.Lock()
	delete(r.started, vm.UID)
	r.mu.Unlock()
	return nil
}

func deleteInstance(ctx context.Context, c client.Client, vmi *kubevirtv1.VirtualMachineInstance) error {
	err := c.Delete(ctx, vmi, client.Preconditions{UID: ptr.To(vmi.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting VirtualMachineInstance %s: %w", vmi.Name, err)
	}
	return nil
}

// stoppedAt is when a finished instance finished, from its phase
// transitions.
func stoppedAt(vmi *kubevirtv1.VirtualMachineInstance) time.Time {
	var t time.Time
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		if (p.Phase == kubevirtv1.Failed || p.Phase == kubevirtv1.Succeeded) && p.PhaseTransitionTimestamp.After(t) {
			t = p.PhaseTransitionTimestamp.Time
		}
	}
	return t
}

func (r *Runner) shouldStart(vm *kubevirtv1.VirtualMachine, strategy kubevirtv1.VirtualMachineRunStrategy) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch strategy {
	case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure:
		return true
	case kubevirtv1.RunStrategyOnce:
		return !r.started[vm.UID]
	default:
		return false
	}
}

// ensureDataVolumeTemplates creates the DataVolumes a VM declares, owned by
// it so the garbage collector removes them with it.
func (r *Runner) ensureDataVolumeTemplates(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	for _, t := range vm.Spec.DataVolumeTemplates {
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       vm.Namespace,
				Name:            t.Name,
				Labels:          t.Labels,
				Annotations:     t.Annotations,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
			},
			Spec: *t.Spec.DeepCopy(),
		}
		if err := r.client.Create(ctx, dv); err != nil && !apierrors.IsAlreadyExists(err) {
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

func (r *Runner) diskState(ctx context.Context, vm *kubevirtv1.VirtualMachine) (diskReadiness, error) {
	if vm.Spec.Template == nil {
		return diskReadiness{printable: kubevirtv1.VirtualMachineStatusUnknown, message: "the VirtualMachine has no template"}, nil
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		switch {
		case v.DataVolume != nil:
			dv := &cdiv1.DataVolume{}
			err := r.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: v.DataVolume.Name}, dv)
			if apierrors.IsNotFound(err) {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusProvisioning, message: fmt.Sprintf("DataVolume %s does not exist", v.DataVolume.Name)}, nil
			}
			if err != nil {
				return diskReadiness{}, err
			}
			if state := dataVolumeDiskState(dv); !state.ready {
				return state, nil
			}
		case v.PersistentVolumeClaim != nil:
			err := r.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &corev1.PersistentVolumeClaim{})
			if apierrors.IsNotFound(err) {
				return diskReadiness{printable: kubevirtv1.VirtualMachineStatusPvcNotFound, message: fmt.Sprintf("PersistentVolumeClaim %s does not exist", v.PersistentVolumeClaim.ClaimName)}, nil
			}
			if err != nil {
				return diskReadiness{}, err
			}
		case kubevirtstatus.UserDataSecretRef(v) != nil:
			// virt-controller does not start a VM whose cloud-init Secret
			// is missing.
			ref := kubevirtstatus.UserDataSecretRef(v)
			err := r.client.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: ref.Name}, &corev1.Secret{})
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

// dataVolumeDiskState is what a DataVolume the VM boots from means for
// starting it.
func dataVolumeDiskState(dv *cdiv1.DataVolume) diskReadiness {
	switch {
	case dv.Status.Phase == cdiv1.Failed || importerFailing(dv):
		return diskReadiness{printable: kubevirtv1.VirtualMachineStatusDataVolumeError, message: fmt.Sprintf("DataVolume %s has an error", dv.Name)}
	case dv.Status.Phase != cdiv1.Succeeded:
		return diskReadiness{printable: kubevirtv1.VirtualMachineStatusProvisioning, message: fmt.Sprintf("DataVolume %s is %s", dv.Name, dv.Status.Phase)}
	}
	return diskReadiness{ready: true}
}

// importerFailing reports CDI's sign of an importer pod that fails.
func importerFailing(dv *cdiv1.DataVolume) bool {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeRunning && c.Status == corev1.ConditionFalse && c.Reason == importErrorReason {
			return true
		}
	}
	return false
}

// startInstance creates the VM's instance from its template.
func (r *Runner) startInstance(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
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
	if err := r.client.Create(ctx, vmi); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("creating the VirtualMachineInstance of %s: %w", vm.Name, err)
	}
	r.mu.Lock()
	r.started[vm.UID] = true
	r.mu.Unlock()
	ctrl.LoggerFrom(ctx).V(2).Info("QEMU runner created a VirtualMachineInstance", "uid", vmi.UID)
	return vmi, nil
}

// updateVirtualMachineStatus writes the status virt-controller derives from
// the VM, its instance and its disks.
func (r *Runner) updateVirtualMachineStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, disks diskReadiness) error {
	desired := vm.DeepCopy()
	desired.Status = virtualMachineStatus(vm, vmi, disks, r.shouldStart(vm, kubevirtstatus.RunStrategy(vm)))
	keepVMTransitionTimes(vm.Status.Conditions, desired.Status.Conditions)
	if equality.Semantic.DeepEqual(vm.Status, desired.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.client.Status().Patch(ctx, desired, client.MergeFrom(vm)))
}

// virtualMachineStatus is the VM status KubeVirt reports for a VM, its
// instance (nil when there is none), its disks, and whether its run
// strategy would start an instance.
func virtualMachineStatus(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, disks diskReadiness, wouldRun bool) kubevirtv1.VirtualMachineStatus {
	st := *vm.Status.DeepCopy()
	st.RunStrategy = kubevirtstatus.RunStrategy(vm)
	st.ObservedGeneration, st.DesiredGeneration = vm.Generation, vm.Generation
	st.Created = vmi != nil
	st.Ready = vmi != nil && vmi.Status.Phase == kubevirtv1.Running && kubevirtstatus.InstanceReady(vmi)
	ready := vmCondition(kubevirtv1.VirtualMachineReady, corev1.ConditionFalse, "VMINotExists", "VMI does not exist")
	var conds []kubevirtv1.VirtualMachineCondition
	switch {
	case !vm.DeletionTimestamp.IsZero():
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusTerminating
	case vmi == nil && !disks.ready:
		st.PrintableStatus = disks.printable
		ready.Message = disks.message
	case vmi == nil && !wouldRun:
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	case vmi == nil:
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStarting
	case !vmi.DeletionTimestamp.IsZero():
		st.PrintableStatus = kubevirtv1.VirtualMachineStatusStopping
		ready.Reason, ready.Message = "VMIStopping", "VMI is shutting down"
	default:
		if c := kubevirtstatus.InstanceCondition(vmi, kubevirtstatus.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
			st.PrintableStatus = kubevirtv1.VirtualMachineStatusUnschedulable
			conds = append(conds, vmCondition(podScheduledCondition, corev1.ConditionFalse, c.Reason, c.Message))
			ready.Reason, ready.Message = "VMINotReady", "VMI is not scheduled"
			break
		}
		if c := kubevirtstatus.InstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceReady); c != nil && c.Reason == errImagePullReason && !kubevirtstatus.Finished(vmi) {
			st.PrintableStatus = kubevirtv1.VirtualMachineStatusErrImagePull
			conds = append(conds, vmCondition(kubevirtv1.VirtualMachineFailure, corev1.ConditionTrue, errImagePullReason, c.Message))
			ready.Reason, ready.Message = "VMINotReady", c.Message
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
	return st
}

// keepVMTransitionTimes keeps the timestamps of conditions that did not
// change, so an unchanged status is not rewritten.
func keepVMTransitionTimes(old, updated []kubevirtv1.VirtualMachineCondition) {
	for i := range updated {
		for _, o := range old {
			c := &updated[i]
			if o.Type == c.Type && o.Status == c.Status && o.Reason == c.Reason && o.Message == c.Message {
				c.LastTransitionTime, c.LastProbeTime = o.LastTransitionTime, o.LastProbeTime
			}
		}
	}
}

func vmCondition(t kubevirtv1.VirtualMachineConditionType, status corev1.ConditionStatus, reason, message string) kubevirtv1.VirtualMachineCondition {
	return kubevirtv1.VirtualMachineCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now()}
}

func (r *Runner) vmsUsingDataVolume(ctx context.Context, o client.Object) []reconcile.Request {
	return r.vmsWithVolume(ctx, o.GetNamespace(), func(v kubevirtv1.Volume) bool {
		return v.DataVolume != nil && v.DataVolume.Name == o.GetName()
	})
}

func (r *Runner) vmsUsingSecret(ctx context.Context, o client.Object) []reconcile.Request {
	return r.vmsWithVolume(ctx, o.GetNamespace(), func(v kubevirtv1.Volume) bool {
		ref := kubevirtstatus.UserDataSecretRef(v)
		return ref != nil && ref.Name == o.GetName()
	})
}

// vmsWithVolume lists the VMs of a namespace that have a volume uses picks.
func (r *Runner) vmsWithVolume(ctx context.Context, namespace string, uses func(kubevirtv1.Volume) bool) []reconcile.Request {
	vms := &kubevirtv1.VirtualMachineList{}
	if err := r.client.List(ctx, vms, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range vms.Items {
		if t := vms.Items[i].Spec.Template; t != nil && slices.ContainsFunc(t.Spec.Volumes, uses) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vms.Items[i])})
		}
	}
	return out
}

// now is the time written into conditions.
func now() metav1.Time { return metav1.NewTime(time.Now()) }

func objectMeta(key client.ObjectKey) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
}
