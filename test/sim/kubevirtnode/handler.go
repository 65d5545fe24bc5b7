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

package kubevirtnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode/status"
)

// machineType is the versioned machine type QEMU resolves q35 to, which
// virt-handler reports.
const machineType = "pc-q35-rhel9.6.0"

// reconcileInstance plays virt-handler for an instance on one of the
// nodes: it boots the guest of a Scheduled instance and reports it
// Running, reports a guest that stopped, and shuts the guest down when the
// instance is deleted.
func (h *Hosts) reconcileInstance(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := h.client.Get(ctx, req.NamespacedName, vmi); apierrors.IsNotFound(err) {
		h.forgetGuests(req.NamespacedName)
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !h.ownsNode(vmi.Status.NodeName) {
		return reconcile.Result{}, nil
	}
	g := h.guestOf(vmi.UID)
	updated := vmi.DeepCopy()
	switch {
	case vmi.IsFinal():
		return reconcile.Result{}, nil
	case g != nil && stopped(g.guest):
		h.reportStopped(updated, g)
	case !vmi.DeletionTimestamp.IsZero():
		if g != nil {
			g.guest.Shutdown()
		}
		return reconcile.Result{}, nil
	case vmi.Status.Phase == kubevirtv1.Scheduled:
		if g == nil {
			if wait := h.opts.BootDelay - time.Since(scheduledAt(vmi)); wait > 0 {
				return reconcile.Result{RequeueAfter: wait}, nil
			}
			var err error
			if g, err = h.startGuest(ctx, vmi); err != nil {
				return reconcile.Result{}, err
			}
			if g == nil {
				// The launcher Pod is not running yet; its start requeues.
				return reconcile.Result{RequeueAfter: h.opts.BootDelay}, nil
			}
			if stopped(g.guest) {
				h.reportStopped(updated, g)
				break
			}
		}
		// A guest that runs is reported, also when an earlier report of it
		// failed (the apiserver restarted under the update): virt-handler
		// reports its domain's state on every sync. Reporting only at the
		// start left such an instance Scheduled for good, its guest running.
		reportRunning(updated, g)
	case vmi.Status.Phase == kubevirtv1.Running && g == nil:
		h.reportStopped(updated, &guest{guest: failedGuest("virt-handler found no domain for the running instance")})
	default:
		return reconcile.Result{}, nil
	}
	if equality.Semantic.DeepEqual(vmi.Status, updated.Status) {
		return reconcile.Result{}, nil
	}
	// The instance has no status subresource, and virt-handler may update
	// but not patch it.
	if err := h.handlers[vmi.Status.NodeName].Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // A conflict retries with the queue's backoff, which RequeueAfter cannot ask for.
		}
		return reconcile.Result{}, fmt.Errorf("updating VirtualMachineInstance %s as virt-handler: %w", vmi.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("virt-handler stand-in moved an instance", "phase", updated.Status.Phase, "node", vmi.Status.NodeName)
	return reconcile.Result{}, nil
}

// scheduledAt is when virt-controller reported the instance Scheduled.
func scheduledAt(vmi *kubevirtv1.VirtualMachineInstance) time.Time {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Scheduled {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return time.Time{}
}

// startGuest starts the instance's guest through the hypervisor once its
// launcher Pod runs; nil while it does not. A guest that cannot start is
// returned stopped with the reason.
func (h *Hosts) startGuest(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (*guest, error) {
	pods := &corev1.PodList{}
	if err := h.client.List(ctx, pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return nil, err
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == vmi.Status.NodeName && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() {
			pod = p
		}
	}
	if pod == nil {
		return nil, nil
	}
	started, err := h.opts.Hypervisor.Start(ctx, StartRequest{Instance: vmi, Pod: pod, Node: vmi.Status.NodeName, Reader: h.client})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("virt-handler stand-in could not start the guest", "reason", err.Error())
		started = failedGuest(fmt.Sprintf("failed to start the domain: %v", err))
	}
	g := &guest{instance: client.ObjectKeyFromObject(vmi), instanceUID: vmi.UID, node: vmi.Status.NodeName, guest: started, started: time.Now()}
	h.mu.Lock()
	h.guests[vmi.UID] = g
	h.mu.Unlock()
	go func() {
		select {
		case <-started.Done():
		case <-h.stopped:
			return
		}
		h.notify(h.instanceEvents, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: vmi.Name}})
		h.notify(h.podEvents, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}})
	}()
	return g, nil
}

// reportRunning is what virt-handler reports once the domain runs.
func reportRunning(vmi *kubevirtv1.VirtualMachineInstance, g *guest) {
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Running)
	vmi.Status.Interfaces = g.guest.Interfaces()
	vmi.Status.Machine = &kubevirtv1.Machine{Type: machineType}
	if info := g.guest.OSInfo(); info != nil {
		vmi.Status.GuestOSInfo = *info
		kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue})
	}
	migratable, block := liveMigratable(vmi)
	kubevirtstatus.SetInstanceCondition(vmi, migratable)
	vmi.Status.MigrationMethod = kubevirtv1.LiveMigration
	if block {
		vmi.Status.MigrationMethod = kubevirtv1.BlockMigration
	}
}

// reportStopped is what virt-handler reports when the domain is gone:
// Succeeded after a shutdown, Failed otherwise.
func (h *Hosts) reportStopped(vmi *kubevirtv1.VirtualMachineInstance, g *guest) {
	phase := kubevirtv1.Succeeded
	if g.guest.Err() != nil {
		phase = kubevirtv1.Failed
	}
	kubevirtstatus.SetPhase(vmi, phase)
	kubevirtstatus.RemoveInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected)
}

// liveMigratable is virt-handler's LiveMigratable condition, checked in
// its order: the pod network binding, PCI host devices, then the disks
// (every claim shared, else block migration of local disks); and whether
// a migration would copy disks.
func liveMigratable(vmi *kubevirtv1.VirtualMachineInstance) (kubevirtv1.VirtualMachineInstanceCondition, bool) {
	notMigratable := func(reason, message string) kubevirtv1.VirtualMachineInstanceCondition {
		return kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse, Reason: reason, Message: message}
	}
	block, diskErr := false, ""
	claims := map[string]*kubevirtv1.PersistentVolumeClaimInfo{}
	for _, vs := range vmi.Status.VolumeStatus {
		claims[vs.Name] = vs.PersistentVolumeClaimInfo
	}
	for _, v := range vmi.Spec.Volumes {
		var claim string
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.DataVolume != nil:
			claim = v.DataVolume.Name
		case v.ContainerDisk != nil || v.EmptyDisk != nil || v.Ephemeral != nil:
			block = true
			continue
		default:
			continue
		}
		info := claims[v.Name]
		switch {
		case info == nil:
			block, diskErr = true, fmt.Sprintf("cannot migrate VMI: Unable to determine if PVC %v is shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", claim)
		case !sharedAccess(info.AccessModes):
			block, diskErr = true, fmt.Sprintf("cannot migrate VMI: PVC %v is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", claim)
		}
		if diskErr != "" {
			break
		}
	}
	if !podNetworkMigratable(vmi) {
		return notMigratable(kubevirtv1.VirtualMachineInstanceReasonInterfaceNotMigratable,
			"cannot migrate VMI which does not use masquerade, bridge with "+kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation+" VM annotation or a migratable plugin to connect to the pod network"), block
	}
	if len(vmi.Spec.Domain.Devices.HostDevices) > 0 || len(vmi.Spec.Domain.Devices.GPUs) > 0 {
		return notMigratable(kubevirtv1.VirtualMachineInstanceReasonHostDeviceNotMigratable, "VMI uses a PCI host devices"), block
	}
	if diskErr != "" {
		return notMigratable(kubevirtv1.VirtualMachineInstanceReasonDisksNotMigratable, diskErr), block
	}
	return kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}, block
}

func sharedAccess(modes []corev1.PersistentVolumeAccessMode) bool {
	for _, m := range modes {
		if m == corev1.ReadWriteMany {
			return true
		}
	}
	return false
}

// podNetworkMigratable: an instance on the pod network migrates only with
// masquerade binding, or bridge binding the VM's annotation allows.
func podNetworkMigratable(vmi *kubevirtv1.VirtualMachineInstance) bool {
	ifaces := vmi.Spec.Domain.Devices.Interfaces
	if len(ifaces) == 0 {
		return true
	}
	var pod *kubevirtv1.Network
	for i := range vmi.Spec.Networks {
		if vmi.Spec.Networks[i].Pod != nil {
			pod = &vmi.Spec.Networks[i]
		}
	}
	if pod == nil {
		return false
	}
	for _, iface := range ifaces {
		if iface.Name != pod.Name {
			continue
		}
		if iface.Masquerade != nil {
			return true
		}
		_, allowed := vmi.Annotations[kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation]
		return iface.Bridge != nil && allowed
	}
	return false
}

// forgetGuests kills and forgets the guests of an instance that is gone.
func (h *Hosts) forgetGuests(key client.ObjectKey) {
	h.mu.Lock()
	var gone []*guest
	for uid, g := range h.guests {
		if g.instance == key {
			gone = append(gone, g)
			delete(h.guests, uid)
		}
	}
	h.mu.Unlock()
	for _, g := range gone {
		g.guest.Kill("the instance was deleted")
	}
}

// failedGuest is a guest that never ran.
func failedGuest(reason string) Guest {
	g := &simulatedGuest{done: make(chan struct{})}
	g.stop(errors.New(reason))
	return g
}
