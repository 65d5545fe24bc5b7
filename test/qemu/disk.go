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
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// Disk is a worker disk: the Debian test disk of hack/worker-disk/build.sh
// (a raw ext4 root file system, booted with its kernel and initramfs) or
// the Kairos disk of hack/kairos-disk/build.sh (a GPT disk laid out as
// Kairos installs it, with grub on it).
type Disk struct {
	// Dir holds disk.img and VERSIONS; vmlinuz and initrd.img too unless
	// the disk is Bootable.
	Dir string
	// Bootable is a disk with its own boot loader: QEMU starts it through
	// its firmware (SeaBIOS), as KubeVirt does, and the boot loader picks
	// the kernel and its command line.
	Bootable bool
}

// Image is the disk image; guests boot it copy-on-write.
func (d Disk) Image() string { return filepath.Join(d.Dir, "disk.img") }

// Kernel is the disk's own kernel (Debian's cloud kernel), which QEMU
// loads for a disk that is not Bootable.
func (d Disk) Kernel() string { return filepath.Join(d.Dir, "vmlinuz") }

// Initrd is the disk's own initramfs (virtio and ext4 are modules there).
func (d Disk) Initrd() string { return filepath.Join(d.Dir, "initrd.img") }

// KairosBootLine is the kernel's line of its command line when Kairos's
// grub booted the active image of a Kairos disk: grub names the kernel it
// loaded from the loopback-mounted /cOS/active.img (BOOT_IMAGE, which
// QEMU's -kernel does not set), then the command line the image's
// /etc/cos/bootargs.cfg (kairos-init's) builds for label COS_ACTIVE, the
// serial console first. The kernel prints it on every console.
const KairosBootLine = "Command line: BOOT_IMAGE=(loop0)/boot/vmlinuz console=ttyS0 console=tty1 net.ifnames=1 " +
	"rd.cos.oemlabel=COS_OEM rd.cos.oemtimeout=10 panic=5 rd.emergency=reboot rd.shell=0 systemd.crash_reboot=yes " +
	"root=LABEL=COS_ACTIVE cos-img/filename=/cOS/active.img selinux=0"

// BuildDisk runs hack/worker-disk/build.sh, which returns at once when the
// cached disk is current. The first build takes minutes (debootstrap and
// the kubelet build) and needs root.
func BuildDisk(ctx context.Context) (Disk, error) {
	return buildDisk(ctx, "worker-disk", false)
}

// BuildKairosDisk runs hack/kairos-disk/build.sh: a Kairos disk built from
// Kairos's components, which boots through its grub. It needs root; from
// its cached converted root it takes minutes, from nothing more than an
// hour (docs/real-guests.md).
func BuildKairosDisk(ctx context.Context) (Disk, error) {
	return buildDisk(ctx, "kairos-disk", true)
}

func buildDisk(ctx context.Context, dir string, bootable bool) (Disk, error) {
	script := filepath.Join(envtest.RepoRoot(), "hack", dir, "build.sh")
	cmd := exec.CommandContext(ctx, "bash", script) //nolint:gosec // The repository's own build script.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Disk{}, fmt.Errorf("hack/%s/build.sh: %w: %s", dir, err, stderr.String())
	}
	d := Disk{Dir: strings.TrimSpace(string(out)), Bootable: bootable}
	files := []string{d.Image()}
	if !bootable {
		files = append(files, d.Kernel(), d.Initrd())
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return Disk{}, fmt.Errorf("the disk of hack/%s is incomplete: %w", dir, err)
		}
	}
	return d, nil
}
