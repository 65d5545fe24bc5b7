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
	"slices"
	"testing"
)

// TestBootArgs checks how QEMU boots each disk: the Debian disk with its
// kernel, initramfs and the runner's command line (the root device, the
// serial console, panic=-1, then the scenario's arguments); a bootable disk
// (the Kairos disk, grub on it) with none of them, through the firmware
// from the root drive as its first boot device, and refusing kernel
// arguments it could not pass.
func TestBootArgs(t *testing.T) {
	debian := Disk{Dir: "/disks/debian"}
	got, err := bootArgs(VMOptions{Disk: debian, KernelArgs: []string{"rootdelay=20"}}, "/dev/vda")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-kernel", "/disks/debian/vmlinuz", "-initrd", "/disks/debian/initrd.img",
		"-append", "root=/dev/vda rw console=ttyS0 panic=-1 rootdelay=20"}
	if !slices.Equal(got, want) {
		t.Errorf("the Debian disk boots with %q, want %q", got, want)
	}

	kairos := Disk{Dir: "/disks/kairos", Bootable: true}
	got, err = bootArgs(VMOptions{Name: "kairos", Disk: kairos}, "/dev/vda")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("a bootable disk is given %q: QEMU must not load a kernel for it", got)
	}
	if _, err := bootArgs(VMOptions{Name: "kairos", Disk: kairos, KernelArgs: []string{"rd.debug"}}, "/dev/vda"); err == nil {
		t.Error("kernel arguments for a bootable disk were accepted, and would be lost")
	}

	for bus, want := range map[string][]string{
		"virtio": {"-drive", "file=d,if=none,id=root", "-device", "virtio-blk-pci,drive=root,bootindex=1"},
		"sata":   {"-drive", "file=d,if=none,id=root", "-device", "ide-hd,drive=root,bus=ide.0,bootindex=1"},
		"scsi": {"-device", "virtio-scsi-pci,id=scsi0",
			"-drive", "file=d,if=none,id=root", "-device", "scsi-hd,drive=root,bus=scsi0.0,bootindex=1"},
	} {
		got, _, err := rootDiskArgs(bus, "file=d", true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("a bootable root on %s is attached with %q, want %q", bus, got, want)
		}
	}
	if got, _, _ := rootDiskArgs("virtio", "file=d", false); !slices.Equal(got, []string{"-drive", "file=d,if=virtio"}) {
		t.Errorf("the Debian disk's root is attached with %q, want it unchanged", got)
	}
}
