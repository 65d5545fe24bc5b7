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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

const (
	// errImagePullReason marks an instance whose container disk cannot be
	// pulled (its Ready condition's reason, which the VM status reads).
	errImagePullReason = "ErrImagePull"
	// guestMAC is the MAC address QEMU gives a guest's first NIC.
	guestMAC = "52:54:00:12:34:56"
)

// bootPlan is what a guest boots: the root disk, the seed, or why the
// instance cannot boot.
type bootPlan struct {
	disk      Disk
	rootImage string
	seed      SeedKind
	userData  []byte
	// pullFailure is set when the container disk cannot be pulled; the
	// instance waits, as its pod would in ErrImagePull.
	pullFailure string
	// failure is set when the instance cannot boot at all.
	failure string
}

// reconcileInstance plays virt-controller, the scheduler and virt-handler
// for one VirtualMachineInstance: it waits for a guest slot, boots QEMU,
// and reports the guest's state.
func (r *Runner) reconcileInstance(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	inst := r.instanceFor(vmi)
	desired := vmi.DeepCopy()
	switch {
	case !vmi.DeletionTimestamp.IsZero():
		r.release(vmi)
		if !kubevirtstatus.Finished(vmi) {
			stopInstance(desired, kubevirtv1.Succeeded, "", "VMI was deleted; QEMU was stopped")
		}
		controllerutil.RemoveFinalizer(desired, kubevirtv1.VirtualMachineControllerFinalizer)
		controllerutil.RemoveFinalizer(desired, kubevirtv1.VirtualMachineInstanceFinalizer)
		controllerutil.RemoveFinalizer(desired, kubevirtv1.DeprecatedVirtualMachineInstanceFinalizer)
	case kubevirtstatus.Finished(vmi):
		// A finished instance never runs again; the VM replaces it.
	case inst.vm != nil:
		if exited, err := inst.vm.Exited(); exited {
			phase, reason, message := exitPhase(err)
			stopInstance(desired, phase, reason, message)
			ctrl.LoggerFrom(ctx).Info("QEMU guest exited", "phase", phase, "reason", message)
		} else {
			runInstance(desired, r.opts.NodeName)
		}
	default:
		plan, err := r.planBoot(ctx, vmi)
		if err != nil {
			return reconcile.Result{}, err
		}
		switch {
		case plan.failure != "":
			r.dropWaiting(vmi)
			stopInstance(desired, kubevirtv1.Failed, "FailedCreate", plan.failure)
		case plan.pullFailure != "":
			r.dropWaiting(vmi)
			pullFailed(desired, r.opts.NodeName, plan.pullFailure)
		case !r.claimSlot(vmi):
			markUnschedulable(desired, r.opts.MaxGuests)
		default:
			if err := r.boot(ctx, vmi, inst, plan); err != nil {
				stopInstance(desired, kubevirtv1.Failed, "FailedCreate", err.Error())
				break
			}
			runInstance(desired, r.opts.NodeName)
		}
	}
	if equality.Semantic.DeepEqual(vmi, desired) {
		return reconcile.Result{}, nil
	}
	// VirtualMachineInstances have no status subresource: KubeVirt writes
	// the whole object.
	if err := r.client.Patch(ctx, desired, client.MergeFrom(vmi)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if desired.Status.Phase != vmi.Status.Phase {
		ctrl.LoggerFrom(ctx).V(2).Info("VirtualMachineInstance phase changed", "phase", desired.Status.Phase)
	}
	if len(desired.Finalizers) == 0 {
		r.mu.Lock()
		delete(r.instances, vmi.UID)
		r.mu.Unlock()
	}
	return reconcile.Result{}, nil
}

// instanceFor returns what the runner keeps of an instance, queueing it
// for a guest slot on first sight.
func (r *Runner) instanceFor(vmi *kubevirtv1.VirtualMachineInstance) *instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.instances[vmi.UID]; ok {
		return i
	}
	i := &instance{key: client.ObjectKeyFromObject(vmi)}
	r.instances[vmi.UID] = i
	if vmi.DeletionTimestamp.IsZero() && !kubevirtstatus.Finished(vmi) {
		r.waiting = append(r.waiting, vmi.UID)
	}
	return i
}

// claimSlot gives the instance a guest slot when fewer than MaxGuests run
// and no instance that waited longer is still waiting for one.
func (r *Runner) claimSlot(vmi *kubevirtv1.VirtualMachineInstance) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	free := r.opts.MaxGuests - r.runningLocked()
	pos := slices.Index(r.waiting, vmi.UID)
	if pos < 0 || pos >= free {
		return false
	}
	r.waiting = slices.Delete(r.waiting, pos, pos+1)
	r.instances[vmi.UID].starting = true
	return true
}

// dropWaiting gives up the instance's place in the queue; those behind it
// move up and may now fit.
func (r *Runner) dropWaiting(vmi *kubevirtv1.VirtualMachineInstance) {
	r.mu.Lock()
	pos := slices.Index(r.waiting, vmi.UID)
	if pos >= 0 {
		r.waiting = slices.Delete(r.waiting, pos, pos+1)
	}
	r.mu.Unlock()
	if pos >= 0 {
		r.notifyWaiting()
	}
}

// release kills the instance's guest and gives up its place in the queue.
func (r *Runner) release(vmi *kubevirtv1.VirtualMachineInstance) {
	r.dropWaiting(vmi)
	r.mu.Lock()
	var guest *VM
	if i, ok := r.instances[vmi.UID]; ok {
		guest = i.vm
	}
	r.mu.Unlock()
	if guest != nil {
		guest.Kill()
	}
}

// planBoot reads what the instance boots: its root disk (a mapped
// container disk or an imported DataVolume) and its cloud-init volume.
func (r *Runner) planBoot(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (bootPlan, error) {
	plan := bootPlan{disk: r.opts.Disk}
	root, cloudInit := bootVolumes(vmi)
	switch {
	case root == nil:
		plan.failure = "the VirtualMachineInstance has no root disk volume"
		return plan, nil
	case root.ContainerDisk != nil:
		disk, ok := r.containerDisk(root.ContainerDisk.Image)
		if !ok {
			plan.pullFailure = pullFailureMessage(root.ContainerDisk.Image)
			return plan, nil
		}
		plan.disk = disk
	case root.DataVolume != nil:
		path, ok := r.importedVolume(client.ObjectKey{Namespace: vmi.Namespace, Name: root.DataVolume.Name})
		if !ok {
			plan.failure = fmt.Sprintf("DataVolume %s has no imported volume on this host", root.DataVolume.Name)
			return plan, nil
		}
		plan.rootImage = path
	default:
		plan.failure = fmt.Sprintf("volume %s: the QEMU runner boots containerDisk and dataVolume root disks only", root.Name)
		return plan, nil
	}
	if cloudInit == nil {
		plan.failure = "the VirtualMachineInstance has no cloud-init volume to boot with"
		return plan, nil
	}
	plan.seed = NoCloud
	if cloudInit.CloudInitConfigDrive != nil {
		plan.seed = ConfigDrive
	}
	data, err := r.userData(ctx, vmi.Namespace, *cloudInit)
	if err != nil {
		return plan, err
	}
	if len(data) == 0 {
		plan.failure = fmt.Sprintf("cloud-init volume %s has no user data", cloudInit.Name)
	}
	plan.userData = data
	return plan, nil
}

// bootVolumes returns the root disk's volume (the disk of boot order 1, or
// the first disk) and the cloud-init volume.
func bootVolumes(vmi *kubevirtv1.VirtualMachineInstance) (root, cloudInit *kubevirtv1.Volume) {
	volumes := map[string]*kubevirtv1.Volume{}
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		volumes[v.Name] = v
		if cloudInit == nil && (v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil) {
			cloudInit = v
		}
	}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		v := volumes[d.Name]
		if v == nil || v == cloudInit {
			continue
		}
		if d.BootOrder != nil && *d.BootOrder == 1 {
			return v, cloudInit
		}
		if root == nil {
			root = v
		}
	}
	return root, cloudInit
}

// userData reads the cloud-init volume's user data: inline, or from its
// Secret's userdata (or userData) key, as KubeVirt does.
func (r *Runner) userData(ctx context.Context, namespace string, v kubevirtv1.Volume) ([]byte, error) {
	if ref := kubevirtstatus.UserDataSecretRef(v); ref != nil {
		s := &corev1.Secret{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, s); err != nil {
			return nil, fmt.Errorf("reading Secret %s of cloud-init volume %s: %w", ref.Name, v.Name, err)
		}
		if d, ok := s.Data["userdata"]; ok {
			return d, nil
		}
		return s.Data["userData"], nil
	}
	if v.CloudInitNoCloud != nil {
		return []byte(v.CloudInitNoCloud.UserData), nil
	}
	return []byte(v.CloudInitConfigDrive.UserData), nil
}

// boot starts the instance's guest in the slot it claimed; the guest's
// exit requeues the instance and the instances waiting for a slot.
func (r *Runner) boot(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, inst *instance, plan bootPlan) (rerr error) {
	key := client.ObjectKeyFromObject(vmi)
	r.mu.Lock()
	tamper := r.tamper
	r.booted++
	n := r.booted
	r.mu.Unlock()
	defer func() {
		if rerr != nil {
			r.mu.Lock()
			inst.starting = false
			r.mu.Unlock()
			r.notifyWaiting()
		}
	}()
	data := plan.userData
	if tamper != nil {
		data = tamper(key, append([]byte(nil), data...))
	}
	dir := filepath.Join(r.opts.Dir, "guests", fmt.Sprintf("%03d-%s-%s", n, vmi.Namespace, vmi.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vm, err := r.startGuest(ctx, VMOptions{
		Name: vmi.Name, Disk: plan.disk, RootImage: plan.rootImage, UserData: data, Seed: plan.seed,
		MemoryMiB: r.opts.MemoryMiB, CPUs: r.opts.CPUs, Dir: dir,
	})
	if err != nil {
		return err
	}
	root := plan.rootImage
	if root == "" {
		root = plan.disk.Image()
	}
	g := &Guest{
		VM: key, Instance: vmi.UID, Seed: plan.seed, RootImage: root, Started: vm.Started,
		Dir: dir, ConsoleLog: vm.ConsoleLog, JournalLog: vm.DebugLog, QEMULog: filepath.Join(dir, vmi.Name+"-qemu.log"),
	}
	r.mu.Lock()
	if r.isStopped {
		r.mu.Unlock()
		vm.Kill()
		return errors.New("the QEMU runner stopped")
	}
	inst.vm, inst.guest, inst.starting = vm, g, false
	r.guests = append(r.guests, g)
	r.mu.Unlock()
	ctrl.LoggerFrom(ctx).Info("QEMU guest started", "seed", plan.seed, "rootImage", root, "dir", dir)
	go func() {
		<-vm.Done()
		_, err := vm.Exited()
		r.mu.Lock()
		g.Exited = time.Now()
		if err != nil {
			g.ExitError = err.Error()
		}
		r.mu.Unlock()
		r.notify(r.instanceEvents, &kubevirtv1.VirtualMachineInstance{ObjectMeta: objectMeta(key)})
		r.notifyWaiting()
	}()
	return nil
}

// exitPhase is the instance phase, reason and message for a QEMU that
// exited: Succeeded after a guest power-off, Failed otherwise, as when
// virt-launcher crashes.
func exitPhase(err error) (kubevirtv1.VirtualMachineInstancePhase, string, string) {
	if err == nil {
		return kubevirtv1.Succeeded, "GuestShutdown", "the guest powered off"
	}
	return kubevirtv1.Failed, "GuestCrashed", fmt.Sprintf("QEMU exited: %v", err)
}

func pullFailureMessage(ref string) string {
	return fmt.Sprintf("Failed to pull image %q: no local disk is mapped to this reference", ref)
}

// markUnschedulable reports an instance waiting for a guest slot as the
// scheduler reports a pod no node has room for.
func markUnschedulable(vmi *kubevirtv1.VirtualMachineInstance, maxGuests int) {
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Scheduling)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtstatus.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: fmt.Sprintf("0/1 nodes are available: 1 Insufficient memory (the QEMU runner runs at most %d guests at once).", maxGuests),
	})
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: "PodNotExists", Message: "virt-launcher pod has not yet been scheduled",
	})
}

// pullFailed reports an instance whose pod was scheduled but whose
// container disk cannot be pulled.
func pullFailed(vmi *kubevirtv1.VirtualMachineInstance, node, message string) {
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Scheduling)
	kubevirtstatus.PlaceOn(vmi, node)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: errImagePullReason, Message: message,
	})
}

// runInstance reports a guest whose QEMU runs: Scheduled then Running,
// ready, with the guest's address on the first interface.
func runInstance(vmi *kubevirtv1.VirtualMachineInstance, node string) {
	if vmi.Status.Phase != kubevirtv1.Running {
		kubevirtstatus.SetPhase(vmi, kubevirtv1.Scheduled)
	}
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Running)
	kubevirtstatus.PlaceOn(vmi, node)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue})
	if len(vmi.Status.Interfaces) > 0 || len(vmi.Spec.Domain.Devices.Interfaces) == 0 {
		return
	}
	// QEMU user networking gives the only NIC GuestAddress.
	vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{
		Name:       vmi.Spec.Domain.Devices.Interfaces[0].Name,
		IP:         GuestAddress,
		IPs:        []string{GuestAddress},
		MAC:        guestMAC,
		InfoSource: "domain",
		QueueCount: 1,
	}}
}

func stopInstance(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, reason, message string) {
	kubevirtstatus.SetPhase(vmi, phase)
	vmi.Status.Reason = reason
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: reason, Message: message,
	})
}
