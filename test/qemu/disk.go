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
// (a raw ext4 root file system) or the Kairos disk of
// hack/kairos-disk/build.sh (a GPT disk laid out as Kairos installs it),
// and the kernel and initramfs it boots with.
type Disk struct {
	// Dir holds disk.img, vmlinuz, initrd.img and VERSIONS.
	Dir string
	// Cmdline, when set, is the disk's own kernel command line (what a
	// boot loader would pass), which replaces the runner's root= and rw;
	// the console and the scenario's arguments are still appended.
	Cmdline []string
}

// Image is the root file system image; guests boot it copy-on-write.
func (d Disk) Image() string { return filepath.Join(d.Dir, "disk.img") }

// Kernel is the disk's own kernel (Debian's cloud kernel).
func (d Disk) Kernel() string { return filepath.Join(d.Dir, "vmlinuz") }

// Initrd is the disk's own initramfs (virtio and ext4 are modules there).
func (d Disk) Initrd() string { return filepath.Join(d.Dir, "initrd.img") }

// BuildDisk runs hack/worker-disk/build.sh, which returns at once when the
// cached disk is current. The first build takes minutes (debootstrap and
// the kubelet build) and needs root.
func BuildDisk(ctx context.Context) (Disk, error) {
	return buildDisk(ctx, "worker-disk")
}

// BuildKairosDisk runs hack/kairos-disk/build.sh: a Kairos disk built from
// Kairos's components, booted with the command line its grub would pass
// (the disk has no boot loader). It needs root; from its cached converted
// root it takes minutes, from nothing more than an hour (docs/real-guests.md).
func BuildKairosDisk(ctx context.Context) (Disk, error) {
	d, err := buildDisk(ctx, "kairos-disk")
	if err != nil {
		return Disk{}, err
	}
	cmdline, err := os.ReadFile(filepath.Join(d.Dir, "cmdline"))
	if err != nil {
		return Disk{}, fmt.Errorf("the Kairos disk is incomplete: %w", err)
	}
	d.Cmdline = strings.Fields(string(cmdline))
	return d, nil
}

func buildDisk(ctx context.Context, dir string) (Disk, error) {
	script := filepath.Join(envtest.RepoRoot(), "hack", dir, "build.sh")
	cmd := exec.CommandContext(ctx, "bash", script) //nolint:gosec // The repository's own build script.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Disk{}, fmt.Errorf("hack/%s/build.sh: %w: %s", dir, err, stderr.String())
	}
	d := Disk{Dir: strings.TrimSpace(string(out))}
	for _, f := range []string{d.Image(), d.Kernel(), d.Initrd()} {
		if _, err := os.Stat(f); err != nil {
			return Disk{}, fmt.Errorf("the disk of hack/%s is incomplete: %w", dir, err)
		}
	}
	return d, nil
}
