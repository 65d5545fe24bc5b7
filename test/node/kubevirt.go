//go:build node

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

package node

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// The images of KubeVirt's node side, named as virt-operator names them
// (test/kubevirt/manifests/virt-handler.yaml, and the launcher image
// virt-controller is given): found by name, never pulled.
const (
	HandlerImage  = "quay.io/kubevirt/virt-handler:" + kubevirt.Version
	LauncherImage = kubevirt.LauncherImage
)

// KubeVirtImages are virt-handler's and virt-launcher's images, built here
// (hack/node/kubevirt.sh: the binaries with cgo from kubevirt.io/kubevirt,
// a Debian root with libvirt and QEMU) and written as archives into the
// cache once; Stats says what that took.
type KubeVirtImages struct {
	Handler, Launcher ociimage.Image
	Stats             ImageStats
}

// ImageStats are the figures of building the images.
type ImageStats struct {
	// Parts is how long hack/node/kubevirt.sh took (0 s when cached).
	Parts time.Duration
	// Archives is how long writing the archives took (0 s when cached).
	Archives time.Duration
	// RootfsBytes is the Debian root's size on disk, HandlerBytes and
	// LauncherBytes the archives' sizes.
	RootfsBytes, HandlerBytes, LauncherBytes int64
}

// BuildKubeVirtImages builds (or reuses) KubeVirt's node-side images.
func BuildKubeVirtImages() (*KubeVirtImages, error) {
	t0 := time.Now()
	out, err := runNodeScript("kubevirt.sh")
	if err != nil {
		return nil, err
	}
	bin, rootfs, images := out["bin"], out["rootfs"], out["images"]
	if bin == "" || rootfs == "" || images == "" {
		return nil, fmt.Errorf("hack/node/kubevirt.sh printed %v, want bin=, rootfs= and images=", out)
	}
	k := &KubeVirtImages{Stats: ImageStats{Parts: time.Since(t0)}}
	binFiles := func(names ...string) map[string]string {
		files := map[string]string{}
		for _, name := range names {
			files["/usr/bin/"+name] = filepath.Join(bin, name)
		}
		return files
	}
	// As KubeVirt's images are (cmd/virt-handler and cmd/virt-launcher's
	// BUILD.bazel): both over the same Debian root here, where upstream's
	// handler base has fewer packages than its launcher base.
	k.Handler = ociimage.Image{
		Ref:        HandlerImage,
		Rootfs:     rootfs,
		Files:      binFiles("virt-handler", "virt-chroot", "container-disk"),
		Entrypoint: []string{"/usr/bin/virt-handler"},
		Archive:    filepath.Join(images, "virt-handler.tar"),
	}
	k.Launcher = ociimage.Image{
		Ref:    LauncherImage,
		Rootfs: rootfs,
		Files:  binFiles("virt-launcher", "virt-launcher-monitor", "virt-probe", "virt-tail", "virt-freezer", "container-disk"),
		// virt-launcher runs as the qemu user; its DHCP server binds port 67.
		Capabilities: map[string][]string{"/usr/bin/virt-launcher-monitor": {"cap_net_bind_service"}},
		Entrypoint:   []string{"/usr/bin/virt-launcher"},
		Archive:      filepath.Join(images, "virt-launcher.tar"),
	}
	t1 := time.Now()
	wrote, err := ociimage.WriteMissing(k.Handler, k.Launcher)
	if err != nil {
		return nil, err
	}
	if wrote {
		k.Stats.Archives = time.Since(t1)
	}
	if k.Stats.RootfsBytes, err = diskUsage(rootfs); err != nil {
		return nil, err
	}
	for img, size := range map[*ociimage.Image]*int64{&k.Handler: &k.Stats.HandlerBytes, &k.Launcher: &k.Stats.LauncherBytes} {
		fi, err := os.Stat(img.Archive)
		if err != nil {
			return nil, err
		}
		*size = fi.Size()
	}
	return k, nil
}

// runNodeScript runs one of hack/node's scripts with args and returns
// the key=value lines it printed on stdout; its stderr goes to the test's.
func runNodeScript(script string, args ...string) (map[string]string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(envtest.RepoRoot(), "hack", "node", script)}, args...)...) //nolint:gosec,noctx // Our own script; it ends on its own.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, os.Stderr)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hack/node/%s: %w: %s", script, err, stderr.String())
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out, nil
}

// diskUsage is the space the files under dir take (du -s).
func diskUsage(dir string) (int64, error) {
	out, err := exec.Command("du", "-s", "-B1", dir).Output() //nolint:gosec,noctx // A directory of the cache.
	if err != nil {
		return 0, fmt.Errorf("du %s: %w", dir, err)
	}
	var n int64
	if _, err := fmt.Sscan(string(out), &n); err != nil {
		return 0, fmt.Errorf("du %s: %q", dir, out)
	}
	return n, nil
}

// WorkerImageRepository is the repository of the worker container disk;
// the image is named by its manifest's digest, as a WorkerPlatform's
// Kairos image must be pinned.
const WorkerImageRepository = "kvw.local/kairos-worker"

// WorkerContainerDisk is the real-guest worker disk (hack/worker-disk) as a
// KubeVirt container disk image: made bootable and laid out as KubeVirt's
// container-disk contract says by hack/node/worker-containerdisk.sh (one
// qcow2 under /disk/, owned by the qemu user), written as an archive into
// the cache once, named <WorkerImageRepository>@sha256:<manifest digest>.
type WorkerContainerDisk struct {
	Image ociimage.Image
	// Build is how long the script and the archive took (about 0 s when
	// cached); DiskBytes is the qcow2's size, ArchiveBytes the archive's.
	Build                   time.Duration
	DiskBytes, ArchiveBytes int64
}

// KairosImageRepository is the repository of the Kairos container disk.
const KairosImageRepository = "kvw.local/kairos-disk"

// BuildWorkerContainerDisk builds (or reuses) the worker container disk.
func BuildWorkerContainerDisk() (*WorkerContainerDisk, error) {
	return buildContainerDisk(WorkerImageRepository)
}

// BuildKairosContainerDisk builds (or reuses) the Kairos disk of
// hack/kairos-disk (grub on it, as Kairos installs it) as a container
// disk, laid out as the worker container disk is and named
// <KairosImageRepository>@sha256:<manifest digest>. The disk's first
// build takes more than an hour (docs/real-guests.md).
func BuildKairosContainerDisk() (*WorkerContainerDisk, error) {
	return buildContainerDisk(KairosImageRepository, "kairos")
}

// buildContainerDisk runs hack/node/worker-containerdisk.sh with args and
// writes the layer it prints as an image of repository.
func buildContainerDisk(repository string, args ...string) (*WorkerContainerDisk, error) {
	t0 := time.Now()
	script := filepath.Join(envtest.RepoRoot(), "hack", "node", "worker-containerdisk.sh")
	cmd := exec.Command("bash", append([]string{script}, args...)...) //nolint:gosec,noctx // Our own script; it ends on its own.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, os.Stderr)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hack/node/worker-containerdisk.sh %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	layer := strings.TrimSpace(stdout.String())
	diskPath := filepath.Join(layer, "disk", "worker.qcow2")
	disk, err := os.Stat(diskPath)
	if err != nil {
		return nil, fmt.Errorf("hack/node/worker-containerdisk.sh printed %q: %w", layer, err)
	}
	if err := checksumFitsKubeVirt(diskPath); err != nil {
		return nil, err
	}
	w := &WorkerContainerDisk{
		Image:     ociimage.Image{Ref: repository, ByDigest: true, Rootfs: layer, Archive: filepath.Join(filepath.Dir(layer), "image.tar")},
		DiskBytes: disk.Size(),
	}
	if _, err := ociimage.WriteMissing(w.Image); err != nil {
		return nil, err
	}
	if w.Image.Ref, err = ociimage.ArchiveRef(w.Image.Archive); err != nil {
		return nil, err
	}
	fi, err := os.Stat(w.Image.Archive)
	if err != nil {
		return nil, err
	}
	w.ArchiveBytes, w.Build = fi.Size(), time.Since(t0)
	return w, nil
}

// ContainerDiskChecksum is the CRC-32 (IEEE) of a container disk's file,
// as KubeVirt v1.7.0's virt-handler computes it for the instance's
// status.volumeStatus[].containerDiskVolume.checksum: a uint32 that the
// VirtualMachineInstance CRD declares int32, so kube-apiserver v1.36
// refuses every status update of an instance whose disk sums to 2^31 or
// more.
func ContainerDiskChecksum(path string) (uint32, error) {
	f, err := os.Open(path) //nolint:gosec // A disk of our own cache.
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sum := crc32.NewIEEE()
	if _, err := io.Copy(sum, f); err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return sum.Sum32(), nil
}

// checksumFitsKubeVirt refuses a container disk whose CRC-32 virt-handler
// could not write into an instance's status (ContainerDiskChecksum).
func checksumFitsKubeVirt(path string) error {
	checksum, err := ContainerDiskChecksum(path)
	if err != nil {
		return err
	}
	if checksum > math.MaxInt32 {
		return fmt.Errorf("%s: CRC-32 %d is 2^31 or more: virt-handler could not write it into the instance's status.volumeStatus[].containerDiskVolume.checksum (int32 in KubeVirt's CRD), and the instance would never leave Scheduled; hack/node/worker-containerdisk.sh chooses the disk identifier to avoid that", path, checksum)
	}
	return nil
}

// RawDisk is the worker container disk's image converted to raw, written
// once beside the image's archive in the cache: what an HTTP import serves,
// since CDI's stand-in imports raw images only (CDI itself converts a
// qcow2 source to raw with qemu-img, so the volume holds the same raw
// disk either way).
func (w *WorkerContainerDisk) RawDisk() (string, error) {
	raw := filepath.Join(filepath.Dir(w.Image.Rootfs), "worker.raw")
	if _, err := os.Stat(raw); err == nil {
		return raw, nil
	}
	tmp := raw + ".tmp"
	cmd := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", filepath.Join(w.Image.Rootfs, "disk", "worker.qcow2"), tmp) //nolint:gosec,noctx // Paths of our own cache; qemu-img ends on its own.
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("qemu-img convert: %w: %s", err, out)
	}
	return raw, os.Rename(tmp, raw)
}
