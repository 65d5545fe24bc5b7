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
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/cozystack/cluster-api-workers/test/process"
)

// GuestAddress is the address QEMU user networking's DHCP server gives the
// (only) guest of a QEMU process.
const GuestAddress = "10.0.2.15"

// VMOptions describe one guest.
type VMOptions struct {
	// Name is the VM's name (the KubeVirtMachine's): hostname and node
	// name come from the bootstrap data, not from here.
	Name string
	// Disk is the worker disk the guest boots, copy-on-write, and the
	// kernel and initramfs it boots with.
	Disk Disk
	// RootImage, when set, is a raw copy of the disk (a DataVolume's
	// imported volume) that the guest boots and writes to, so its writes
	// outlive QEMU as a persistent volume's do.
	RootImage string
	// RootBus is the bus the root disk is attached to, as KubeVirt's disk
	// bus names it: virtio (the default), sata (on q35's AHCI controller)
	// or scsi (virtio-scsi).
	RootBus string
	// KernelArgs are appended to the kernel command line.
	KernelArgs []string
	// UserData is the bootstrap Secret's value, attached unchanged.
	UserData []byte
	// Instance is the VirtualMachineInstance the guest runs for, whose
	// cloud-init volume KubeVirt's writer turns into the seed; when nil, an
	// instance named after the guest with a cloud-init volume of kind Seed.
	Instance *kubevirtv1.VirtualMachineInstance
	// Seed is the cloud-init volume kind without an Instance; NoCloud when
	// empty.
	Seed SeedKind
	// MemoryMiB is the guest's memory; 1536 when zero.
	MemoryMiB int
	// CPUs is the guest's vCPU count; 2 when zero.
	CPUs int
	// Dir holds the seed image and the serial logs; it must exist.
	Dir string
}

// VM is a running QEMU guest.
type VM struct {
	Name string
	// Started is when QEMU was started.
	Started time.Time
	// ConsoleLog has the first serial port (kernel console), DebugLog the
	// second (the guest's journal).
	ConsoleLog, DebugLog string
	qemu                 *process.Process
	// monitor is QEMU's QMP socket, in a directory of its own (a socket's
	// path is limited to 107 bytes, which a guest's directory may pass),
	// removed when QEMU exits; empty for a guest that is not QEMU.
	monitor string
}

// seedDevice is the QEMU id of the seed's disk, which DetachSeed unplugs.
const seedDevice = "seed"

// Accelerator is QEMU's accelerator: QEMU_ACCEL when set, otherwise TCG.
// Nested KVM hangs on the machines this runs on, so KVM is opt-in.
func Accelerator() string {
	if a := os.Getenv("QEMU_ACCEL"); a != "" {
		return a
	}
	return "tcg"
}

// StartVM boots a guest from its disk with its bootstrap data as a seed
// volume and QEMU user networking (the host is GuestHostAddress).
func StartVM(ctx context.Context, opts VMOptions) (*VM, error) {
	if opts.Name == "" || opts.Dir == "" || len(opts.UserData) == 0 {
		return nil, fmt.Errorf("a VM needs a name, a directory and user data")
	}
	if opts.Seed == "" {
		opts.Seed = NoCloud
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 1536
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64 is needed (apt-get install qemu-system-x86): %w", err)
	}
	seed := filepath.Join(opts.Dir, opts.Name+"-seed.iso")
	instance := opts.Instance
	if instance == nil {
		instance = seedInstance(opts.Name, opts.Seed)
	}
	if err := WriteSeed(ctx, seed, instance, opts.UserData); err != nil {
		return nil, err
	}
	monitorDir, err := os.MkdirTemp("", "qmp-")
	if err != nil {
		return nil, err
	}
	vm := &VM{
		Name:       opts.Name,
		ConsoleLog: filepath.Join(opts.Dir, opts.Name+"-console.log"),
		DebugLog:   filepath.Join(opts.Dir, opts.Name+"-journal.log"),
		monitor:    filepath.Join(monitorDir, "qmp.sock"),
	}
	// The disk is shared by every guest: writes go to a temporary overlay
	// that disappears with QEMU, like a containerDisk.
	root := "file=" + opts.Disk.Image() + ",format=raw,snapshot=on"
	if opts.RootImage != "" {
		root = "file=" + opts.RootImage + ",format=raw"
	}
	rootArgs, rootDevice, err := rootDiskArgs(opts.RootBus, root, opts.Disk.Bootable)
	if err != nil {
		_ = os.RemoveAll(monitorDir)
		return nil, err
	}
	boot, err := bootArgs(opts, rootDevice)
	if err != nil {
		_ = os.RemoveAll(monitorDir)
		return nil, err
	}
	args := slices.Concat([]string{
		"-name", opts.Name,
		"-machine", "q35,accel=" + Accelerator(),
		"-cpu", "max",
		"-smp", strconv.Itoa(opts.CPUs),
		"-m", strconv.Itoa(opts.MemoryMiB),
		"-nodefaults", "-display", "none", "-no-reboot",
	}, boot, rootArgs, []string{
		// The seed's file system is found by its label, on any bus. It
		// sits behind a PCIe root port, as every KubeVirt disk does, where
		// it can be unplugged (DetachSeed): q35's root bus has no hotplug.
		"-device", "pcie-root-port,id=seed-port,chassis=1",
		"-drive", "file=" + seed + ",format=raw,if=none,id=seed-drive,readonly=on",
		"-device", "virtio-blk-pci,drive=seed-drive,id=" + seedDevice + ",bus=seed-port",
		"-netdev", "user,id=net0",
		"-device", "virtio-net-pci,netdev=net0",
		"-serial", "file:" + vm.ConsoleLog,
		"-serial", "file:" + vm.DebugLog,
		"-qmp", "unix:" + vm.monitor + ",server=on,wait=off",
	})
	//nolint:gosec,noctx // QEMU from PATH, with the guest's arguments; the guest runs until Kill, not until a context ends.
	cmd := exec.Command(qemu, args...)
	// Its own process group: a Ctrl-C at the terminal reaches the test,
	// which stops its guests in order, not QEMU.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	vm.Started = time.Now()
	if vm.qemu, err = process.Start("QEMU for "+opts.Name, filepath.Join(opts.Dir, opts.Name+"-qemu.log"), cmd); err != nil {
		_ = os.RemoveAll(monitorDir)
		return nil, err
	}
	go func() {
		<-vm.qemu.Done()
		_ = os.RemoveAll(monitorDir)
	}()
	return vm, nil
}

// Reboot reboots the guest in place and returns once QEMU has reset the
// machine, as a reboot inside a KubeVirt guest does: the same QEMU process
// and instance, so a container disk's writes stay. The guest is asked as
// Ctrl-Alt-Del at its keyboard asks (systemd's ctrl-alt-del.target, a
// clean reboot). QEMU starts with -no-reboot, so that a panicking guest
// ends it; from here on it resets instead, at every reboot, as KubeVirt's
// QEMU does. Restoring -no-reboot at the first reset is too early: a guest
// rebooted that way ended QEMU before its kernel printed a line, a second
// reset on the way up (the firmware's, it seems).
func (vm *VM) Reboot(ctx context.Context) error {
	q, err := vm.dialMonitor(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = q.Close() }()
	if err := q.execute(ctx, "set-action", map[string]any{"reboot": "reset"}); err != nil {
		return err
	}
	keys := []map[string]any{}
	for _, k := range []string{"ctrl", "alt", "delete"} {
		keys = append(keys, map[string]any{"type": "qcode", "data": k})
	}
	if err := q.execute(ctx, "send-key", map[string]any{"keys": keys}); err != nil {
		return err
	}
	if _, err := q.waitEvent(ctx, "RESET", nil); err != nil {
		return fmt.Errorf("guest %s did not reboot: %w", vm.Name, err)
	}
	return nil
}

// DetachSeed unplugs the guest's seed disk and returns once QEMU has
// removed it (the guest releases the device first), so that the guest's
// next boot finds no seed.
func (vm *VM) DetachSeed(ctx context.Context) error {
	q, err := vm.dialMonitor(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = q.Close() }()
	if err := q.execute(ctx, "device_del", map[string]any{"id": seedDevice}); err != nil {
		return err
	}
	_, err = q.waitEvent(ctx, "DEVICE_DELETED", func(data json.RawMessage) bool {
		var d struct {
			Device string `json:"device"`
		}
		return json.Unmarshal(data, &d) == nil && d.Device == seedDevice
	})
	if err != nil {
		return fmt.Errorf("the seed of guest %s was not unplugged: %w", vm.Name, err)
	}
	return nil
}

func (vm *VM) dialMonitor(ctx context.Context) (*qmp, error) {
	if vm.monitor == "" {
		return nil, fmt.Errorf("guest %s has no QEMU monitor", vm.Name)
	}
	if exited, _ := vm.Exited(); exited {
		return nil, fmt.Errorf("the QEMU of guest %s has exited", vm.Name)
	}
	return dialQMP(ctx, vm.monitor)
}

// Exited reports whether QEMU has exited, and how.
func (vm *VM) Exited() (bool, error) { return vm.qemu.Exited(), vm.qemu.Err() }

// Done is closed when QEMU has exited.
func (vm *VM) Done() <-chan struct{} { return vm.qemu.Done() }

// Kill kills QEMU at once and waits until it exited.
func (vm *VM) Kill() { _ = vm.qemu.Kill() }

// Journal returns the end of the guest's journal (second serial port).
func (vm *VM) Journal() string { return process.Tail(vm.DebugLog, 16<<10) }

// Console returns the end of the guest's console (first serial port).
func (vm *VM) Console() string { return process.Tail(vm.ConsoleLog, 8<<10) }

// bootArgs is how QEMU boots the guest: a Bootable disk through the
// firmware and the disk's boot loader, which picks the kernel and its
// command line, so a scenario cannot add to it; any other disk with its
// kernel and initramfs loaded by QEMU.
func bootArgs(opts VMOptions, rootDevice string) ([]string, error) {
	if opts.Disk.Bootable {
		if len(opts.KernelArgs) > 0 {
			return nil, fmt.Errorf("guest %s: the disk in %s boots through its own boot loader, which takes no kernel arguments (%q)",
				opts.Name, opts.Disk.Dir, opts.KernelArgs)
		}
		return nil, nil
	}
	return []string{
		"-kernel", opts.Disk.Kernel(),
		"-initrd", opts.Disk.Initrd(),
		"-append", strings.Join(kernelArgs(opts, rootDevice), " "),
	}, nil
}

// kernelArgs is the command line of a guest QEMU loads the kernel of: the
// root device, the serial console, panic=-1 (a panicking guest reboots at
// once, which ends QEMU: -no-reboot) and the scenario's arguments.
func kernelArgs(opts VMOptions, rootDevice string) []string {
	return append([]string{"root=" + rootDevice, "rw", "console=ttyS0", "panic=-1"}, opts.KernelArgs...)
}

// rootDiskArgs attaches the root drive on a KubeVirt disk bus and returns
// the guest's device for it: the first disk of its kind, since the seed is
// always on virtio after it. A bootable root is the firmware's first boot
// device (bootindex), as KubeVirt's boot order 1 makes it, so that SeaBIOS
// does not try the seed.
func rootDiskArgs(bus, drive string, bootable bool) (args []string, device string, err error) {
	index := ""
	if bootable {
		index = ",bootindex=1"
	}
	switch bus {
	case "", "virtio":
		if bootable {
			return []string{"-drive", drive + ",if=none,id=root", "-device", "virtio-blk-pci,drive=root" + index}, "/dev/vda", nil
		}
		return []string{"-drive", drive + ",if=virtio"}, "/dev/vda", nil
	case "sata":
		// q35's ICH9 AHCI controller, where KubeVirt puts SATA disks.
		return []string{"-drive", drive + ",if=none,id=root", "-device", "ide-hd,drive=root,bus=ide.0" + index}, "/dev/sda", nil
	case "scsi":
		return []string{"-device", "virtio-scsi-pci,id=scsi0",
			"-drive", drive + ",if=none,id=root", "-device", "scsi-hd,drive=root,bus=scsi0.0" + index}, "/dev/sda", nil
	}
	return nil, "", fmt.Errorf("root disk bus %q: QEMU guests here boot virtio, sata and scsi disks", bus)
}
