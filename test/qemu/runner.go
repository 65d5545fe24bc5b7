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
	"sync"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/cozystack/cluster-api-workers/test/harness"
)

var _ harness.VMBackend = (*Runner)(nil)

// imagePath is where the runner serves the worker disk.
const imagePath = "/worker-disk.img"

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	// Disk is the worker disk: ImageURL serves it for DataVolume imports,
	// and every guest boots its kernel and initramfs.
	Disk Disk
	// ContainerDisks maps containerDisk image references to the local
	// disks they stand for. References are compared in their normalized
	// form (docker.io/library/ and the registry defaults applied). A
	// reference that is not mapped cannot be pulled: the instance never
	// starts and the VirtualMachine reports ErrImagePull, as KubeVirt does
	// for an image missing from its registry.
	ContainerDisks map[string]Disk
	// MaxGuests is how many guests run at once; 2 when zero. Further
	// instances wait unschedulable, as on a node without room for them.
	MaxGuests int
	// Dir holds every guest's seed, serial logs and QEMU output (in a
	// directory per guest) and the imported volumes (removed by Stop); a
	// temporary directory, removed by Stop, when empty.
	Dir string
	// MemoryMiB and CPUs size every guest; 1536 and 2 when zero. The VM's
	// own CPU and memory are not applied: the hosts this runs on are small.
	MemoryMiB, CPUs int
	// RestartDelay is how long KubeVirt waits before it replaces a finished
	// instance that the run strategy restarts; 1s when zero.
	RestartDelay time.Duration
	// ImporterRestartInterval is how long a failed import waits before the
	// importer runs again, as CDI restarts its importer pod; 2s when zero.
	ImporterRestartInterval time.Duration
	// NodeName is the infrastructure node instances report running on; the
	// host name when empty.
	NodeName string
	// ControllerNamePrefix makes the controller names unique when more than
	// one runner runs in a process.
	ControllerNamePrefix string
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
	// (copy-on-write) or a DataVolume's imported volume.
	RootImage string
	// Started is when QEMU started; Exited when it exited (zero while it
	// runs), with ExitError the way it exited ("" for a clean power-off).
	Started, Exited time.Time
	ExitError       string
	// Dir holds the guest's files: ConsoleLog is the first serial port
	// (the kernel console), JournalLog the second (the guest's journal),
	// QEMULog QEMU's own output.
	Dir, ConsoleLog, JournalLog, QEMULog string
}

// Runner fulfils the management cluster's KubeVirt VirtualMachines with
// real QEMU guests, and their DataVolumes' HTTP imports for real, reporting
// the status KubeVirt and CDI report (as test/sim/kubevirt does, which the
// infrastructure provider is tested against). It implements
// harness.VMBackend. Faults are injected through Kill and Tamper.
//
// With the harness, real guests join clusters whose control plane is a
// kubeadm-prepared one (ControlPlanes):
//
//	disk, _ := qemu.BuildDisk(ctx)
//	runner, _ := qemu.NewRunner(qemu.RunnerOptions{Disk: disk, ContainerDisks: map[string]qemu.Disk{ref: disk}})
//	h, _ := harness.Start(ctx, harness.Options{VMs: runner})
//	w, _ := h.CreateCluster(ctx, key, harness.ClusterOptions{ControlPlanes: &qemu.ControlPlanes{KubernetesVersion: "v1.36.3"}})
//
// then a pool whose image is the containerDisk ref, or an httpImport of
// runner.ImageURL() (a DataVolume the runner imports for real), boots
// guests that join w. Stopping the harness stops the runner.
type Runner struct {
	opts   RunnerOptions
	ownDir bool
	// startGuest boots a guest: StartVM, or in tests a process that is not
	// QEMU.
	startGuest func(context.Context, VMOptions) (*VM, error)
	client     client.Client
	server     *http.Server
	imageURL   string

	// instanceEvents and dataVolumeEvents requeue objects when something
	// outside the apiserver changed: QEMU exited, a guest slot was freed,
	// an import progressed.
	instanceEvents   chan event.GenericEvent
	dataVolumeEvents chan event.GenericEvent
	stopped          chan struct{}
	stopOnce         sync.Once
	// importCtx is cancelled by Stop; every import runs under it.
	importCtx    context.Context
	cancelImport context.CancelFunc

	mu sync.Mutex
	// isStopped refuses guests that finish starting after Stop.
	isStopped bool
	tamper    func(vm client.ObjectKey, userData []byte) []byte
	// instances are the VirtualMachineInstances seen, by UID.
	instances map[types.UID]*instance
	// waiting are instances waiting for a guest slot, oldest first.
	waiting []types.UID
	// imports are the DataVolume imports, by DataVolume.
	imports map[client.ObjectKey]*importJob
	// started records VMs whose run strategy Once started an instance.
	started map[types.UID]bool
	guests  []*Guest
	// booted numbers guest directories in boot order.
	booted int
}

// instance is what the runner keeps of one VirtualMachineInstance.
type instance struct {
	key client.ObjectKey
	// starting holds a guest slot while QEMU starts.
	starting bool
	vm       *VM
	guest    *Guest
}

func (i *instance) running() bool {
	if i.starting {
		return true
	}
	if i.vm == nil {
		return false
	}
	exited, _ := i.vm.Exited()
	return !exited
}

// NewRunner checks the options and starts the HTTP server that serves the
// worker disk. Stop releases everything.
func NewRunner(opts RunnerOptions) (*Runner, error) {
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
	if opts.RestartDelay == 0 {
		opts.RestartDelay = time.Second
	}
	if opts.ImporterRestartInterval == 0 {
		opts.ImporterRestartInterval = 2 * time.Second
	}
	if opts.NodeName == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		opts.NodeName = host
	}
	r := &Runner{
		opts:             opts,
		startGuest:       StartVM,
		instanceEvents:   make(chan event.GenericEvent),
		dataVolumeEvents: make(chan event.GenericEvent),
		stopped:          make(chan struct{}),
		instances:        map[types.UID]*instance{},
		imports:          map[client.ObjectKey]*importJob{},
		started:          map[types.UID]bool{},
	}
	r.importCtx, r.cancelImport = context.WithCancel(context.Background())
	if r.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "qemu-runner-")
		if err != nil {
			return nil, err
		}
		r.opts.Dir, r.ownDir = dir, true
	} else if err := os.MkdirAll(r.opts.Dir, 0o755); err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the disk image server: %w", err)
	}
	r.imageURL = "http://" + listener.Addr().String() + imagePath
	r.server = &http.Server{Handler: diskServer(opts.Disk.Image()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.server.Serve(listener) }()
	return r, nil
}

// diskServer serves one image at imagePath, with ranges, and 404 for
// anything else.
func diskServer(image string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+imagePath, func(w http.ResponseWriter, req *http.Request) {
		f, err := os.Open(image)
		if err != nil {
			http.Error(w, "the worker disk is not readable", http.StatusInternalServerError)
			return
		}
		defer func() { _ = f.Close() }()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, "the worker disk is not readable", http.StatusInternalServerError)
			return
		}
		http.ServeContent(w, req, filepath.Base(image), st.ModTime(), f)
	})
	return mux
}

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
// as a crashed virt-launcher ends an instance: the instance becomes Failed
// and the run strategy decides whether another starts.
func (r *Runner) Kill(vm client.ObjectKey) error {
	r.mu.Lock()
	var guest *VM
	for _, i := range r.instances {
		if i.key == vm && i.vm != nil {
			if exited, _ := i.vm.Exited(); !exited {
				guest = i.vm
			}
		}
	}
	r.mu.Unlock()
	if guest == nil {
		return fmt.Errorf("VirtualMachine %s has no running guest", vm)
	}
	guest.Kill()
	return nil
}

// Guests returns every guest started so far, in start order.
func (r *Runner) Guests() []Guest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Guest, 0, len(r.guests))
	for _, g := range r.guests {
		out = append(out, *g)
	}
	return out
}

// Running counts the guests whose QEMU runs now.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runningLocked()
}

func (r *Runner) runningLocked() int {
	n := 0
	for _, i := range r.instances {
		if i.running() {
			n++
		}
	}
	return n
}

// SetupWithManager registers the VirtualMachine, VirtualMachineInstance
// and DataVolume controllers; the guests are killed and the server stopped
// when the manager stops.
func (r *Runner) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.client = mgr.GetClient()
	opts := controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}
	name := func(n string) string { return r.opts.ControllerNamePrefix + n }
	if err := builder.ControllerManagedBy(mgr).
		Named(name("qemu-virtualmachine")).
		For(&kubevirtv1.VirtualMachine{}).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		Owns(&cdiv1.DataVolume{}).
		// A VM boots DataVolumes that it does not own, too.
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsingDataVolume)).
		// A VM waits for its cloud-init Secret to exist.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsingSecret)).
		WithOptions(opts).
		Complete(reconcile.Func(r.reconcileVirtualMachine)); err != nil {
		return fmt.Errorf("setting up the QEMU runner's VirtualMachine controller: %w", err)
	}
	if err := builder.ControllerManagedBy(mgr).
		Named(name("qemu-virtualmachineinstance")).
		For(&kubevirtv1.VirtualMachineInstance{}).
		WatchesRawSource(source.Channel(r.instanceEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(reconcile.Func(r.reconcileInstance)); err != nil {
		return fmt.Errorf("setting up the QEMU runner's VirtualMachineInstance controller: %w", err)
	}
	if err := builder.ControllerManagedBy(mgr).
		Named(name("qemu-datavolume")).
		For(&cdiv1.DataVolume{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		WatchesRawSource(source.Channel(r.dataVolumeEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(reconcile.Func(r.reconcileDataVolume)); err != nil {
		return fmt.Errorf("setting up the QEMU runner's DataVolume controller: %w", err)
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.Stop()
		return nil
	}))
}

// Stop kills every guest, cancels the imports, stops the image server and
// removes the imported volumes (and Dir when the runner made it).
func (r *Runner) Stop() {
	r.stopOnce.Do(func() {
		close(r.stopped)
		r.cancelImport()
		_ = r.server.Close()
		r.mu.Lock()
		r.isStopped = true
		var guests []*VM
		for _, i := range r.instances {
			if i.vm != nil {
				guests = append(guests, i.vm)
			}
		}
		var imports []*importJob
		for _, j := range r.imports {
			imports = append(imports, j)
		}
		r.mu.Unlock()
		for _, g := range guests {
			g.Kill()
		}
		for _, j := range imports {
			<-j.done
		}
		_ = os.RemoveAll(filepath.Join(r.opts.Dir, "volumes"))
		if r.ownDir {
			_ = os.RemoveAll(r.opts.Dir)
		}
	})
}

// notify requeues an object through a channel source without blocking
// the caller; nothing is sent once the runner stopped.
func (r *Runner) notify(ch chan event.GenericEvent, obj client.Object) {
	go func() {
		select {
		case ch <- event.GenericEvent{Object: obj}:
		case <-r.stopped:
		}
	}()
}

// notifyWaiting requeues the instances waiting for a guest slot.
func (r *Runner) notifyWaiting() {
	r.mu.Lock()
	var keys []client.ObjectKey
	for _, uid := range r.waiting {
		if i, ok := r.instances[uid]; ok {
			keys = append(keys, i.key)
		}
	}
	r.mu.Unlock()
	for _, k := range keys {
		r.notify(r.instanceEvents, &kubevirtv1.VirtualMachineInstance{ObjectMeta: objectMeta(k)})
	}
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
