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

// Package cdi stands in for CDI's controllers (cdi-controller, its
// importer and clone pods) and for the storage they provision, on a real
// apiserver with CDI's CRDs. CDI's controllers are not served by the Go
// module proxy, so they cannot run here; the stand-in follows what
// cdi-controller v1.63 is recorded to do:
//
//   - a DataVolume gets a PersistentVolumeClaim of its name, owned by it,
//     with CDI's import (or clone) annotations; the storage provisioner
//     stand-in provisions a PersistentVolume (a hostPath directory on this
//     host, as kind's local-path provisioner does) and binds the claim to
//     it; the importer writes the image to disk.img in that directory, as
//     CDI does in a filesystem volume;
//   - while the claim is unbound the DataVolume is Pending; once bound, an
//     importer Pod (importer-<dv>, or cdi-upload-<dv> for a clone) mounts
//     the claim and the DataVolume is ImportScheduled (CloneScheduled);
//     when the Pod runs, ImportInProgress (CloneInProgress) with the
//     importer's progress; then Succeeded at 100% and the Pod is deleted;
//   - an importer that fails exits and restarts (restartPolicy OnFailure)
//     after the kubelet's back-off, doubling each time: the DataVolume stays
//     in progress and counts the restarts as the kubelet counts them (when
//     the container runs again); its Running condition carries the
//     importer's error only while the container is down, and is True again
//     while the restarted importer runs (cdi-controller v1.65 copies the
//     terminated container's message and clears it for a running one);
//   - a blank DataVolume succeeds once its claim is bound;
//   - a claim whose storage class is served by a CSI driver (a CSIDriver
//     object named as the class's provisioner) takes the populator path:
//     the claim carries a dataSourceRef to a VolumeImportSource, a
//     prime-<claim uid> claim is populated in its place and its volume is
//     rebound to the DataVolume's claim.
//
// The importer's work is an Importer's: simulated with timings and faults
// (FailImports, SlowImports) by default, or a real HTTP download and file
// copy (FileImporter: the QEMU tier and the import benchmark). Owner-reference garbage collection is not simulated:
// run the real kube-controller-manager's garbage collector beside it.
package cdi

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/cozystack/cluster-api-workers/test/sim/fault"
)

// MaxImporterBackOff caps a failed importer's back-off, as the kubelet's
// MaxContainerBackOff does.
const MaxImporterBackOff = 5 * time.Minute

// ImportFailureMessage is the Running condition message of a failing
// simulated import, as CDI reports an HTTP source that answers 404.
const ImportFailureMessage = "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"

// Importer does an importer Pod's work: it populates a volume from a
// DataVolume's source.
type Importer interface {
	// Populate writes the job's volume and returns when it is complete.
	// An error ends the importer Pod's run; it restarts.
	Populate(ctx context.Context, job Job) error
}

// Job is one run of an importer Pod.
type Job struct {
	DataVolume *cdiv1.DataVolume
	// Path is the volume's image file on this host: disk.img in its
	// PersistentVolume's hostPath directory (DiskImage).
	Path string
	// SourcePath is a clone's source volume's image file; empty for
	// imports.
	SourcePath string
	// Size is the claim's size in bytes.
	Size int64
	// Progress reports how much is written.
	Progress func(written, total int64)
}

// Options configure the stand-in. Zero values take defaults short enough
// for tests.
type Options struct {
	// Importer populates volumes; the simulated importer when nil.
	Importer Importer
	// ImportDuration is how long a simulated import or clone takes.
	ImportDuration time.Duration
	// ProgressSteps is how many progress updates a simulated import
	// reports.
	ProgressSteps int
	// ImporterBackOff is how long a failed importer's container stays down
	// before its first restart; each later restart waits twice as long, up
	// to MaxImporterBackOff, as the kubelet's CrashLoopBackOff does (from
	// 10 s there). The default is shorter, for tests, and long enough for
	// a controller watching the DataVolume to see the importer's error.
	ImporterBackOff time.Duration
	// ClaimDelay is how long after a DataVolume's creation CDI creates its
	// claim: cdi-controller reads the storage profile and defaults the
	// claim first, and on a busy cluster virt-controller can look for the
	// claim before it exists. Zero creates it at once.
	ClaimDelay time.Duration
	// VolumeDir holds the provisioned volumes' directories; volumes are
	// only named, never written, by the simulated importer. A real
	// Importer needs a directory it may write.
	VolumeDir string
	// ControllerNamePrefix makes the controller names unique when more than
	// one stand-in runs in a process.
	ControllerNamePrefix string
	// StorageOnly runs the storage provisioner alone, for CDI's real
	// controller (test/cdi) to fill the volumes: it makes each volume's
	// directory itself, world-writable as local-path-provisioner makes
	// its own, since CDI's worker Pods write as user 107 and a kubelet
	// applies no fsGroup to a hostPath volume. VolumeDir must be a
	// directory the node's kubelet sees.
	StorageOnly bool
}

func (o *Options) defaults() {
	if o.ImportDuration == 0 {
		o.ImportDuration = 2 * time.Second
	}
	if o.ProgressSteps == 0 {
		o.ProgressSteps = 4
	}
	if o.ImporterBackOff == 0 {
		o.ImporterBackOff = 2 * time.Second
	}
	if o.VolumeDir == "" {
		o.VolumeDir = "/var/lib/sim-cdi/volumes"
	}
}

// CDI is the stand-in.
type CDI struct {
	opts   Options
	client client.Client

	importFailures fault.Set
	slowImports    fault.Set

	mu sync.Mutex
	// jobs are the importer Pods' runs, by Pod UID.
	jobs map[types.UID]*job
	// fates are the faults each DataVolume claimed, by DataVolume UID.
	fates map[types.UID]fate

	podEvents chan event.GenericEvent
	dvEvents  chan event.GenericEvent
	stopped   chan struct{}
	// after is time.After; a test steps the importers' back-off with its
	// own.
	after func(time.Duration) <-chan time.Time
	// ctx is the manager's run context, the parent of the importer jobs.
	ctx context.Context //nolint:containedctx // The jobs outlive the reconcile that starts them.
}

// fate is what injected faults decided for a DataVolume.
type fate struct {
	failing  bool
	duration time.Duration
	// message is the failing importer's message; ImportFailureMessage
	// when empty.
	message string
}

// New returns the stand-in; run it with SetupWithManager.
func New(opts Options) *CDI {
	opts.defaults()
	c := &CDI{
		opts:      opts,
		jobs:      map[types.UID]*job{},
		fates:     map[types.UID]fate{},
		podEvents: make(chan event.GenericEvent),
		dvEvents:  make(chan event.GenericEvent),
		after:     time.After,
		stopped:   make(chan struct{}),
	}
	if c.opts.Importer == nil {
		c.opts.Importer = &simulatedImporter{cdi: c}
	}
	return c
}

// Options returns the effective options.
func (c *CDI) Options() Options { return c.opts }

// FailImports makes the importers of the next count DataVolumes the
// selector picks fail the way CDI reports an unreachable or corrupt source:
// the importer Pod keeps restarting and the DataVolume never succeeds. A
// negative count applies until ClearFaults. It applies to the simulated
// importer only.
func (c *CDI) FailImports(sel fault.Selector, count int) {
	c.importFailures.Add(fault.Fault{Selector: sel, Remaining: count})
}

// FailImportsWith is FailImports with the importer's own message, as CDI
// copies it into the DataVolume's Running condition (a transport error
// quoting the URL it fetched, say).
func (c *CDI) FailImportsWith(sel fault.Selector, count int, message string) {
	c.importFailures.Add(fault.Fault{Selector: sel, Remaining: count, Message: message})
}

// SlowImports makes the next count imports the selector picks take d,
// progressing steadily; a negative count applies until ClearFaults. It
// applies to the simulated importer only.
func (c *CDI) SlowImports(sel fault.Selector, count int, d time.Duration) {
	c.slowImports.Add(fault.Fault{Selector: sel, Remaining: count, Duration: d})
}

// ClearFaults drops the faults no DataVolume has claimed yet.
func (c *CDI) ClearFaults() {
	c.importFailures.Clear()
	c.slowImports.Clear()
}

// fateOf returns the faults a DataVolume claimed, claiming them on first
// sight.
func (c *CDI) fateOf(dv *cdiv1.DataVolume) fate {
	c.mu.Lock()
	f, ok := c.fates[dv.UID]
	c.mu.Unlock()
	if ok {
		return f
	}
	f = fate{duration: c.opts.ImportDuration}
	if slow := c.slowImports.Claim(dv); slow != nil {
		f.duration = slow.Duration
	}
	if failure := c.importFailures.Claim(dv); failure != nil {
		f.failing, f.message = true, failure.Message
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if existing, ok := c.fates[dv.UID]; ok {
		return existing
	}
	c.fates[dv.UID] = f
	return f
}

// SetupWithManager registers the DataVolume controller, the storage
// provisioner and the importer Pods' kubelet.
func (c *CDI) SetupWithManager(_ context.Context, mgr ctrl.Manager) error {
	c.client = mgr.GetClient()
	opts := controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}
	name := func(n string) string { return c.opts.ControllerNamePrefix + n }
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-storage-provisioner")).
		For(&corev1.PersistentVolumeClaim{}).
		WithOptions(opts).
		Complete(reconcile.Func(c.reconcileClaim)); err != nil {
		return fmt.Errorf("setting up the storage provisioner stand-in: %w", err)
	}
	if c.opts.StorageOnly {
		return nil
	}
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-cdi-datavolume")).
		For(&cdiv1.DataVolume{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		// A prime claim is owned by the DataVolume's claim, of its name.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(dataVolumeOfPrime)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(c.dataVolumeOfPod), builder.WithPredicates(predicate.NewPredicateFuncs(isCDIPod))).
		WatchesRawSource(source.Channel(c.dvEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(reconcile.Func(c.reconcileDataVolume)); err != nil {
		return fmt.Errorf("setting up the CDI DataVolume stand-in: %w", err)
	}
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-cdi-importer")).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(isCDIPod))).
		WatchesRawSource(source.Channel(c.podEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(reconcile.Func(c.reconcileImporterPod)); err != nil {
		return fmt.Errorf("setting up the CDI importer stand-in: %w", err)
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		c.mu.Lock()
		c.ctx = ctx
		c.mu.Unlock()
		<-ctx.Done()
		close(c.stopped)
		c.mu.Lock()
		jobs := make([]*job, 0, len(c.jobs))
		for _, j := range c.jobs {
			jobs = append(jobs, j)
		}
		c.mu.Unlock()
		for _, j := range jobs {
			if j.cancel != nil {
				j.cancel()
				<-j.done
			}
		}
		return nil
	}))
}

// dataVolumeOfPrime maps a prime claim to the DataVolume it populates.
func dataVolumeOfPrime(_ context.Context, o client.Object) []reconcile.Request {
	owner := metav1.GetControllerOf(o)
	if owner == nil || owner.Kind != "PersistentVolumeClaim" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: owner.Name}}}
}

// notify requeues an object through a channel source without blocking the
// caller; nothing is sent once the stand-in stopped.
func (c *CDI) notify(ch chan event.GenericEvent, obj client.Object) {
	go func() {
		select {
		case ch <- event.GenericEvent{Object: obj}:
		case <-c.stopped:
		}
	}()
}
