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
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/infra"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	"github.com/cozystack/cluster-api-workers/test/sim/imageserver"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

var _ harness.VMBackend = (*Runner)(nil)

// imagePath is where the runner serves the worker disk.
const imagePath = "/worker-disk.img"

// The infrastructure nodes the runner offers. The scheduler stand-in binds
// a Pod to the first node, in name order, that admits it, so CDI's worker
// Pods, which fit on the storage node, always land there and never take a
// guest's place on the guest node.
const (
	// StorageNode runs CDI's importer and clone Pods. Its KubeVirt device
	// plugins offer no devices (as on a node without virt-handler's
	// devices), so no virt-launcher Pod fits on it.
	StorageNode = "qemu-storage"
	// GuestNode runs the virt-launcher Pods, as many at once as the
	// runner runs guests.
	GuestNode = "qemu-virt"
)

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	// Disk is the worker disk: ImageURL serves it for DataVolume imports,
	// and every guest boots its kernel and initramfs.
	Disk Disk
	// ContainerDisks maps containerDisk image references to the local
	// disks they stand for. References are compared in their normalized
	// form (docker.io/library/ and the registry defaults applied). Nothing
	// else can be pulled: an instance whose container disk is not mapped
	// keeps its launcher Pod in ErrImagePull, as an image missing from its
	// registry does.
	ContainerDisks map[string]Disk
	// MaxGuests is how many guests run at once; 2 when zero. The guest
	// node admits that many virt-launcher Pods: further ones stay Pending
	// and unschedulable, as on a full node.
	MaxGuests int
	// Dir holds every guest's seed, serial logs and QEMU output (in a
	// directory per guest) and the volumes CDI provisions (volumes/,
	// removed by Stop); a temporary directory, removed by Stop, when empty.
	Dir string
	// MemoryMiB and CPUs size every guest; 1536 and 2 when zero. The
	// instance's own CPU and memory are not applied: the hosts this runs
	// on are small.
	MemoryMiB, CPUs int
}

// Guest is one QEMU guest the runner started for a VirtualMachineInstance.
type Guest struct {
	// VM is the VirtualMachine (and instance) name.
	VM client.ObjectKey
	// Instance is the VirtualMachineInstance's UID.
	Instance types.UID
	// Seed is the cloud-init volume's kind.
	Seed SeedKind
	// RootImage is the image the guest boots: the worker disk
	// (copy-on-write) or a claim's volume file.
	RootImage string
	// Started is when QEMU started; Exited when it exited (zero while it
	// runs), with ExitError the way it exited ("" for a power-off).
	Started, Exited time.Time
	ExitError       string
	// Dir holds the guest's files: ConsoleLog is the first serial port
	// (the kernel console), JournalLog the second (the guest's journal),
	// QEMULog QEMU's own output.
	Dir, ConsoleLog, JournalLog, QEMULog string
}

// Runner runs the guests of KubeVirt's real control plane under QEMU: it
// is the harness's VM backend (harness.Options.VMs), and configures the
// infrastructure cluster (test/infra) with
//
//   - a Hypervisor that boots a QEMU guest from each
//     VirtualMachineInstance virt-controller creates, once the node-side
//     stand-in (test/sim/kubevirtnode) has run its launcher Pod;
//   - image pulls that succeed for mapped container disks only;
//   - a CDI Importer that downloads HTTP sources for real (ImageURL serves
//     the worker disk) and copies clones, into the volume files CDI's
//     stand-in provisions;
//   - the nodes: one for guests, admitting MaxGuests launcher Pods, and
//     one for CDI's worker Pods.
//
// Faults are injected through Kill and Tamper. With the harness, real
// guests join clusters whose control plane is a kubeadm-prepared one
// (ControlPlanes):
//
//	disk, _ := qemu.BuildDisk(ctx)
//	runner, _ := qemu.NewRunner(ctx, qemu.RunnerOptions{Disk: disk, ContainerDisks: map[string]qemu.Disk{ref: disk}})
//	h, _ := harness.Start(ctx, harness.Options{VMs: runner})
//	w, _ := h.CreateCluster(ctx, key, harness.ClusterOptions{ControlPlanes: &qemu.ControlPlanes{KubernetesVersion: "v1.36.3"}})
//
// then a pool whose image is the containerDisk ref, or an httpImport of
// runner.ImageURL(), boots guests that join w. Stopping the harness stops
// the guests; Stop releases the rest.
type Runner struct {
	opts   RunnerOptions
	ownDir bool
	// startGuest boots a guest: StartVM, or in tests a process that is not
	// QEMU.
	startGuest func(context.Context, VMOptions) (*VM, error)
	server     *http.Server
	imageURL   string
	stopOnce   sync.Once

	mu sync.Mutex
	// isStopped refuses guests that finish starting after Stop.
	isStopped bool
	tamper    func(vm client.ObjectKey, userData []byte) []byte
	// guests are every guest started, in start order.
	guests []*qemuGuest
	// booted numbers guest directories in boot order.
	booted int
}

// NewRunner checks the options and starts the HTTP server that serves the
// worker disk. Stop releases everything.
func NewRunner(ctx context.Context, opts RunnerOptions) (*Runner, error) {
	if opts.Disk.Dir == "" {
		return nil, errors.New("the runner needs the worker disk (RunnerOptions.Disk)")
	}
	if _, err := os.Stat(opts.Disk.Image()); err != nil {
		return nil, fmt.Errorf("the worker disk: %w", err)
	}
	for ref := range opts.ContainerDisks {
		if _, err := normalizeReference(ref); err != nil {
			return nil, fmt.Errorf("RunnerOptions.ContainerDisks: %w", err)
		}
	}
	if opts.MaxGuests == 0 {
		opts.MaxGuests = 2
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 1536
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	r := &Runner{opts: opts, startGuest: StartVM}
	if r.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "qemu-runner-")
		if err != nil {
			return nil, err
		}
		r.opts.Dir, r.ownDir = dir, true
	} else if err := os.MkdirAll(r.opts.Dir, 0o750); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	listener, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the disk image server: %w", err)
	}
	r.imageURL = "http://" + listener.Addr().String() + imagePath
	r.server = &http.Server{Handler: imageserver.New(opts.Disk.Image(), imagePath), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.server.Serve(listener) }()
	return r, nil
}

// Configure makes the infrastructure cluster run the runner's guests: the
// hypervisor, image pulls, CDI's importer and where its volumes live, and
// the nodes (which replace any the options name).
func (r *Runner) Configure(opts *infra.Options) {
	opts.Hosts.Hypervisor = &hypervisor{runner: r}
	opts.Hosts.Pull = r.pull
	opts.Hosts.Nodes = r.nodes()
	opts.CDI.Importer = cdisim.FileImporter{}
	opts.CDI.VolumeDir = r.volumeDir()
}

// nodes are the infrastructure nodes: the guest node admits MaxGuests
// launcher Pods besides its virt-handler Pod (the scheduler counts every
// Pod bound to a node that has not ended), and the storage node, first in
// name order, takes CDI's worker Pods but no launcher Pod, since it offers
// none of the KubeVirt devices a launcher Pod requests (devices.kubevirt.io/tun
// for the pod network; kvm without emulation).
func (r *Runner) nodes() []kubevirtsim.InfraNode {
	none := resource.MustParse("0")
	return []kubevirtsim.InfraNode{
		{Name: StorageNode, Allocatable: corev1.ResourceList{
			"devices.kubevirt.io/tun": none, "devices.kubevirt.io/vhost-net": none, "devices.kubevirt.io/kvm": none,
		}},
		{Name: GuestNode, Allocatable: corev1.ResourceList{
			corev1.ResourcePods: resource.MustParse(strconv.Itoa(r.opts.MaxGuests + 1)),
		}},
	}
}

// volumeDir holds the volume files CDI's stand-in provisions.
func (r *Runner) volumeDir() string { return filepath.Join(r.opts.Dir, "volumes") }

// ImageURL is the worker disk's HTTP address, for an httpImport source
// (a KubeVirtMachine's or a WorkerClass's image).
func (r *Runner) ImageURL() string { return r.imageURL }

// Dir is where the guests' files are.
func (r *Runner) Dir() string { return r.opts.Dir }

// Tamper sets a function that changes a guest's bootstrap data before its
// seed is written (a wrong CA pin, an expired token); nil stops tampering.
// It applies to guests started from now on.
func (r *Runner) Tamper(f func(vm client.ObjectKey, userData []byte) []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tamper = f
}

// Kill kills the QEMU process of a VirtualMachine's running guest at once,
// as when QEMU crashes: virt-handler reports the instance Failed and
// virt-controller's run strategy decides whether another starts.
func (r *Runner) Kill(vm client.ObjectKey) error {
	running, err := r.running(vm)
	if err != nil {
		return err
	}
	running.Kill("the QEMU process of the guest was killed")
	return nil
}

// Reboot reboots a VirtualMachine's running guest from inside (VM.Reboot)
// and returns once QEMU has reset it. Nothing in the cluster sees it but
// the Node: the instance, its launcher Pod and its QEMU stay, as under
// KubeVirt, and so do the writes to its root disk.
func (r *Runner) Reboot(ctx context.Context, vm client.ObjectKey) error {
	running, err := r.running(vm)
	if err != nil {
		return err
	}
	return running.vm.Reboot(ctx)
}

// DetachSeed unplugs the cloud-init disk of a VirtualMachine's running
// guest (VM.DetachSeed), so that its next boot has no seed to read.
func (r *Runner) DetachSeed(ctx context.Context, vm client.ObjectKey) error {
	running, err := r.running(vm)
	if err != nil {
		return err
	}
	return running.vm.DetachSeed(ctx)
}

// running is the VirtualMachine's running guest.
func (r *Runner) running(vm client.ObjectKey) (*qemuGuest, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var running *qemuGuest
	for _, g := range r.guests {
		if g.record.VM == vm && !g.exited() {
			running = g
		}
	}
	if running == nil {
		return nil, fmt.Errorf("VirtualMachine %s has no running guest", vm)
	}
	return running, nil
}

// Guests returns every guest started so far, in start order.
func (r *Runner) Guests() []Guest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Guest, 0, len(r.guests))
	for _, g := range r.guests {
		out = append(out, g.record)
	}
	return out
}

// Running counts the guests whose QEMU runs now.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, g := range r.guests {
		if !g.exited() {
			n++
		}
	}
	return n
}

// Stop kills every guest, stops the image server and removes the volumes
// (and Dir when the runner made it). Stop the harness first: its node-side
// stand-in kills the guests and its CDI stand-in the imports when they
// stop.
func (r *Runner) Stop() {
	r.stopOnce.Do(func() {
		_ = r.server.Close()
		r.mu.Lock()
		r.isStopped = true
		guests := append([]*qemuGuest(nil), r.guests...)
		r.mu.Unlock()
		for _, g := range guests {
			g.Kill("the QEMU runner stopped")
		}
		_ = os.RemoveAll(r.volumeDir())
		if r.ownDir {
			_ = os.RemoveAll(r.opts.Dir)
		}
	})
}

// pull is the kubelet's image pull: a container disk mapped to a local
// disk can be pulled, nothing else can (there is no registry).
func (r *Runner) pull(image string) error {
	if _, ok := r.containerDisk(image); ok {
		return nil
	}
	return fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: no local disk is mapped to this reference", image, image)
}

// normalizeReference is an image reference in its familiar-independent
// full form, so docker.io/library/x:tag and x:tag are the same image.
func normalizeReference(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// containerDisk returns the local disk a containerDisk reference stands
// for, or false when none is mapped to it.
func (r *Runner) containerDisk(ref string) (Disk, bool) {
	want, err := normalizeReference(ref)
	if err != nil {
		return Disk{}, false
	}
	refs := make([]string, 0, len(r.opts.ContainerDisks))
	for k := range r.opts.ContainerDisks {
		refs = append(refs, k)
	}
	sort.Strings(refs)
	for _, k := range refs {
		if n, _ := normalizeReference(k); n == want {
			return r.opts.ContainerDisks[k], true
		}
	}
	return Disk{}, false
}
