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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode/status"
)

// guestMAC is the MAC address QEMU gives a guest's first NIC.
const guestMAC = "52:54:00:12:34:56"

// hypervisor boots QEMU guests for the node-side stand-in, as
// virt-launcher's QEMU does once virt-handler hands it the domain.
type hypervisor struct {
	runner *Runner
}

var _ kubevirtsim.Hypervisor = (*hypervisor)(nil)

// bootPlan is what a guest boots: its root disk and its seed.
type bootPlan struct {
	// disk is the worker disk whose kernel and initramfs boot the guest,
	// and its root file system unless rootImage is set.
	disk Disk
	// rootImage is a claim's volume file, booted read-write.
	rootImage string
	// rootBus is the root disk's bus, which virt-api always sets
	// (KubeVirt's default on amd64 is sata).
	rootBus  string
	seed     SeedKind
	userData []byte
}

// Start boots the guest of the instance virt-controller created: its root
// disk and cloud-init volume resolved through the cluster's objects, the
// user data through the Tamper hook, then QEMU.
func (h *hypervisor) Start(ctx context.Context, req kubevirtsim.StartRequest) (kubevirtsim.Guest, error) {
	r := h.runner
	vmi := req.Instance
	plan, err := r.planBoot(ctx, req.Reader, vmi)
	if err != nil {
		return nil, err
	}
	key := client.ObjectKeyFromObject(vmi)
	r.mu.Lock()
	tamper := r.tamper
	r.booted++
	n := r.booted
	r.mu.Unlock()
	data := plan.userData
	if tamper != nil {
		data = tamper(key, append([]byte(nil), data...))
	}
	dir := filepath.Join(r.opts.Dir, "guests", fmt.Sprintf("%03d-%s-%s", n, vmi.Namespace, vmi.Name))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	vm, err := r.startGuest(ctx, VMOptions{
		Name: vmi.Name, Disk: plan.disk, RootImage: plan.rootImage, RootBus: plan.rootBus, UserData: data, Instance: vmi, Seed: plan.seed,
		MemoryMiB: r.opts.MemoryMiB, CPUs: r.opts.CPUs, Dir: dir,
	})
	if err != nil {
		return nil, err
	}
	root := plan.rootImage
	if root == "" {
		root = plan.disk.Image()
	}
	g := &qemuGuest{
		vm:         vm,
		interfaces: guestInterfaces(vmi),
		record: Guest{
			VM: key, Instance: vmi.UID, Seed: plan.seed, RootImage: root, Started: vm.Started,
			Dir: dir, ConsoleLog: vm.ConsoleLog, JournalLog: vm.DebugLog, QEMULog: filepath.Join(dir, vmi.Name+"-qemu.log"),
		},
	}
	r.mu.Lock()
	if r.isStopped {
		r.mu.Unlock()
		vm.Kill()
		return nil, errors.New("the QEMU runner stopped")
	}
	r.guests = append(r.guests, g)
	r.mu.Unlock()
	ctrl.LoggerFrom(ctx).Info("QEMU guest started", "node", req.Node, "seed", plan.seed, "rootImage", root, "dir", dir)
	go func() {
		<-vm.Done()
		err := g.Err()
		r.mu.Lock()
		g.record.Exited = time.Now()
		if err != nil {
			g.record.ExitError = err.Error()
		}
		r.mu.Unlock()
		ctrl.LoggerFrom(ctx).Info("QEMU guest exited", "node", req.Node, "reason", g.record.ExitError)
	}()
	return g, nil
}

// planBoot reads what the instance boots: its root disk (a mapped
// container disk, or a claim's volume file) and its cloud-init volume's
// user data. An error fails the instance, as a domain that cannot be
// defined does.
func (r *Runner) planBoot(ctx context.Context, c client.Reader, vmi *kubevirtv1.VirtualMachineInstance) (bootPlan, error) {
	plan := bootPlan{disk: r.opts.Disk}
	root, cloudInit := bootVolumes(vmi)
	switch {
	case root == nil:
		return plan, errors.New("the VirtualMachineInstance has no root disk volume")
	case root.ContainerDisk != nil:
		disk, ok := r.containerDisk(root.ContainerDisk.Image)
		if !ok {
			// The kubelet pulls before virt-handler starts anything, so
			// this is only reached when the mapping changed.
			return plan, fmt.Errorf("volume %s: no local disk is mapped to container disk %q", root.Name, root.ContainerDisk.Image)
		}
		plan.disk = disk
	case root.DataVolume != nil:
		// CDI names a DataVolume's claim after it.
		path, err := claimVolume(ctx, c, vmi.Namespace, root.DataVolume.Name)
		if err != nil {
			return plan, fmt.Errorf("volume %s: %w", root.Name, err)
		}
		plan.rootImage = path
	case root.PersistentVolumeClaim != nil:
		path, err := claimVolume(ctx, c, vmi.Namespace, root.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return plan, fmt.Errorf("volume %s: %w", root.Name, err)
		}
		plan.rootImage = path
	default:
		return plan, fmt.Errorf("volume %s: the QEMU runner boots containerDisk, dataVolume and persistentVolumeClaim root disks only", root.Name)
	}
	plan.rootBus = diskBus(vmi, root.Name)
	if _, _, err := rootDiskArgs(plan.rootBus, "", false); err != nil || plan.rootBus == "" {
		return plan, fmt.Errorf("disk %s: bus %q: QEMU guests here boot virtio, sata and scsi disks", root.Name, plan.rootBus)
	}
	if cloudInit == nil {
		return plan, errors.New("the VirtualMachineInstance has no cloud-init volume to boot with")
	}
	plan.seed = NoCloud
	if cloudInit.CloudInitConfigDrive != nil {
		plan.seed = ConfigDrive
	}
	data, err := userData(ctx, c, vmi.Namespace, *cloudInit)
	if err != nil {
		return plan, err
	}
	if len(data) == 0 {
		return plan, fmt.Errorf("cloud-init volume %s has no user data", cloudInit.Name)
	}
	plan.userData = data
	return plan, nil
}

// claimVolume is the file of the volume a bound claim uses: its
// PersistentVolume's hostPath, which CDI's stand-in provisions on this
// host and its importer fills.
func claimVolume(ctx context.Context, c client.Reader, namespace, claim string) (string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, pvc); err != nil {
		return "", fmt.Errorf("reading claim %s: %w", claim, err)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("claim %s is not bound", claim)
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return "", fmt.Errorf("reading volume %s of claim %s: %w", pvc.Spec.VolumeName, claim, err)
	}
	path := cdisim.DiskImage(pv)
	if path == "" {
		return "", fmt.Errorf("volume %s of claim %s is not a directory on this host", pv.Name, claim)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("volume %s of claim %s has no data: %w", pv.Name, claim, err)
	}
	return path, nil
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

// diskBus is the bus of the instance's disk of that name.
func diskBus(vmi *kubevirtv1.VirtualMachineInstance, name string) string {
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.Name == name && d.Disk != nil {
			return string(d.Disk.Bus)
		}
	}
	return ""
}

// userData reads the cloud-init volume's user data: inline, or from its
// Secret's userdata (or userData) key, as KubeVirt does.
func userData(ctx context.Context, c client.Reader, namespace string, v kubevirtv1.Volume) ([]byte, error) {
	if ref := kubevirtstatus.UserDataSecretRef(v); ref != nil {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, s); err != nil {
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

// guestInterfaces are the guest's interfaces as virt-handler reports them
// from the domain: QEMU user networking gives the only NIC GuestAddress,
// whatever the instance's pod network; there is no guest agent to say
// more.
func guestInterfaces(vmi *kubevirtv1.VirtualMachineInstance) []kubevirtv1.VirtualMachineInstanceNetworkInterface {
	ifaces := vmi.Spec.Domain.Devices.Interfaces
	if len(ifaces) == 0 {
		return nil
	}
	return []kubevirtv1.VirtualMachineInstanceNetworkInterface{{
		Name:          ifaces[0].Name,
		InterfaceName: "eth0",
		IP:            GuestAddress,
		IPs:           []string{GuestAddress},
		MAC:           guestMAC,
		InfoSource:    "domain",
		QueueCount:    1,
	}}
}

// qemuGuest is a running QEMU guest as the node-side stand-in sees it.
type qemuGuest struct {
	vm         *VM
	interfaces []kubevirtv1.VirtualMachineInstanceNetworkInterface
	// record is guarded by Runner.mu.
	record Guest

	mu sync.Mutex
	// poweredOff is set when Shutdown stopped the guest, killed with why
	// Kill did; whichever came first, before QEMU exited.
	poweredOff bool
	killed     string
}

var _ kubevirtsim.Guest = (*qemuGuest)(nil)

// Done is closed when QEMU exited.
func (g *qemuGuest) Done() <-chan struct{} { return g.vm.Done() }

// Err is how QEMU exited: nil after a power-off (the guest's own, QEMU
// exiting 0, or Shutdown), Kill's reason, or QEMU's failure.
func (g *qemuGuest) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := g.vm.Exited()
	switch {
	case g.killed != "":
		return errors.New(g.killed)
	case g.poweredOff:
		return nil
	case err != nil:
		return fmt.Errorf("QEMU exited: %w", err)
	}
	return nil
}

// Shutdown stops the guest as a power-off. It kills QEMU rather than
// asking the guest through ACPI: the test disk's power-button handling
// takes long under TCG, and nothing needs a clean shutdown here (a
// container disk's writes are dropped with QEMU, and a claim's volume is
// an ext4 file system whose journal a later boot replays).
func (g *qemuGuest) Shutdown() { g.stop(func() { g.poweredOff = true }) }

// Kill kills QEMU at once, as when it crashes.
func (g *qemuGuest) Kill(reason string) {
	if reason == "" {
		reason = "the QEMU process of the guest was killed"
	}
	g.stop(func() { g.killed = reason })
}

// stop records why the guest stops, unless QEMU already exited or was
// already stopped, and kills QEMU.
func (g *qemuGuest) stop(why func()) {
	g.mu.Lock()
	if !g.exited() && !g.poweredOff && g.killed == "" {
		why()
	}
	g.mu.Unlock()
	g.vm.Kill()
}

func (g *qemuGuest) exited() bool {
	exited, _ := g.vm.Exited()
	return exited
}

// Interfaces are the guest's network interfaces.
func (g *qemuGuest) Interfaces() []kubevirtv1.VirtualMachineInstanceNetworkInterface {
	return g.interfaces
}

// OSInfo is nil: the worker disk runs no guest agent.
func (g *qemuGuest) OSInfo() *kubevirtv1.VirtualMachineInstanceGuestOSInfo { return nil }
