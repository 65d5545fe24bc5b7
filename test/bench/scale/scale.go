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

// Package scale is the scale benchmark of the Kairos pool on KubeVirt: it
// scales a MachineDeployment of Kairos machines from 0 to N in the harness
// (test/harness) and measures how long the Machines take to run, what the
// controllers ask of the apiservers per machine, whether any client was
// throttled, whether anything is still written once the pool is idle, and
// how that compares with the floor: the time a bare apiserver takes to
// accept the objects the pipeline wrote.
package scale

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirt"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/node"
)

// PlatformImage is the platform's Kairos image the pool boots.
const PlatformImage = "registry.example.com/cozystack/kairos-worker@sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"

// Config is one benchmark run.
type Config struct {
	// Machines is N, the replicas the MachineDeployment scales to.
	Machines int
	// BootDelay is the simulated VM boot, from scheduling to a running
	// guest; zero measures the control plane alone.
	BootDelay time.Duration
	// Timeout bounds the scale-up.
	Timeout time.Duration
	// Quiet is how long no component but the simulators may write before
	// the pool counts as settled and the idle window starts.
	Quiet time.Duration
	// SettleTimeout bounds the wait for the pool to settle.
	SettleTimeout time.Duration
	// IdleWindow is how long resourceVersions must stay unchanged after the
	// pool settled.
	IdleWindow time.Duration
	// FloorWorkers is how many clients write the floor's objects at once.
	FloorWorkers int
	// SkipFloor leaves the floor unmeasured (it starts a second apiserver).
	SkipFloor bool
}

func (c *Config) defaults() {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Quiet == 0 {
		c.Quiet = 15 * time.Second
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = 2 * time.Minute
	}
	if c.FloorWorkers == 0 {
		c.FloorWorkers = 10
	}
}

// Report is what a run measured.
type Report struct {
	Machines  int           `json:"machines"`
	BootDelay time.Duration `json:"bootDelay"`
	// AllRunning is the time from the scale-up to the last Machine Running
	// with a healthy node.
	AllRunning time.Duration `json:"allRunning"`
	// NodeHealthy are percentiles of each Machine's time from its creation
	// (as the driver's watch saw it) to NodeHealthy.
	NodeHealthy Percentiles `json:"nodeHealthy"`
	// BootstrapReady are the same for the bootstrap data being ready.
	BootstrapReady Percentiles `json:"bootstrapReady"`
	// Requests are every client's requests during the scale-up and until
	// the pool settled.
	Requests []RequestCount `json:"requests"`
	// Throttling is the rate limiter waits of every client in the process.
	Throttling Throttling `json:"throttling"`
	// LogErrors counts the errors each component logged.
	LogErrors map[string]int `json:"logErrors"`
	// Settled is the time from the last Machine Running to the last write
	// of a component other than the simulators, found once none wrote for
	// Quiet.
	Settled time.Duration `json:"settled"`
	// Idle is what changed during the idle window.
	Idle IdleReport `json:"idle"`
	// Floor is the bare apiserver's time for the pipeline's objects.
	Floor FloorReport `json:"floor"`
	// Resources are the CPU and memory of the benchmark process and of the
	// apiservers it started, over the scale-up.
	Resources []ProcessUsage `json:"resources"`
}

// Run starts a harness, creates a workload cluster with a Kairos pool at
// zero, scales it to N and measures. The harness is stopped before the
// floor is measured on a bare apiserver, so the two do not share the CPU.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if cfg.Machines < 1 {
		return nil, errors.New("machines must be at least 1")
	}
	recorder := NewRecorder("")
	h, err := harness.Start(ctx, harness.Options{
		Logger:        recorder.Logger(),
		WorkerClasses: true,
		KubeVirt:      kubevirtOptions(cfg.BootDelay),
		Images:        map[string]nodesim.Image{PlatformImage: {KubernetesVersion: harness.ControlPlaneKubernetesVersion, OSImage: "Kairos v3.5.3 (Ubuntu 24.04)"}},
	})
	if err != nil {
		return nil, fmt.Errorf("starting the harness: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = h.Stop()
		}
	}()
	recorder.managementHost = hostOf(h.Management.Config.Host)
	recorder.Install()
	dctx := recorder.DriverContext(ctx)

	if err := h.ConfigurePlatform(dctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: harness.ControlPlaneKubernetesVersion}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: PlatformImage}}
	}); err != nil {
		return nil, err
	}
	w, err := h.CreateCluster(dctx, client.ObjectKey{Namespace: "bench", Name: "tenant"}, harness.ClusterOptions{})
	if err != nil {
		return nil, err
	}
	objs, err := harness.RenderTemplate(harness.KairosPoolTemplate(), map[string]string{
		"CLUSTER_NAME": w.Key.Name, "NAMESPACE": w.Key.Namespace,
		"WORKER_MACHINE_COUNT": "0", "WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": strconv.Itoa(cfg.Machines),
	})
	if err != nil {
		return nil, err
	}
	if err := h.Apply(dctx, objs); err != nil {
		return nil, err
	}
	mdKey := client.ObjectKey{Namespace: w.Key.Namespace, Name: w.Key.Name + "-kairos"}
	templateKey := client.ObjectKey{Namespace: w.Key.Namespace, Name: w.Key.Name + "-kairos-r1"}
	if err := waitForTemplateResolved(dctx, h, templateKey); err != nil {
		return nil, err
	}

	watcher, err := watchMachines(dctx, h, w.Key.Namespace)
	if err != nil {
		return nil, err
	}
	defer watcher.stop()

	recorder.Reset()
	usageBefore, err := processUsage()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	md := &clusterv1.MachineDeployment{}
	if err := h.Client.Get(dctx, mdKey, md); err != nil {
		return nil, err
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To(int32(cfg.Machines))
	if err := h.Client.Patch(dctx, md, patch); err != nil {
		return nil, fmt.Errorf("scaling MachineDeployment %s to %d: %w", mdKey, cfg.Machines, err)
	}
	if err := watcher.waitAll(dctx, cfg.Machines, cfg.Timeout); err != nil {
		if herr := h.Err(); herr != nil {
			err = errors.Join(err, herr)
		}
		return nil, err
	}
	report := &Report{Machines: cfg.Machines, BootDelay: cfg.BootDelay, AllRunning: time.Since(start)}
	report.NodeHealthy, report.BootstrapReady = watcher.percentiles()
	usageAfter, err := processUsage()
	if err != nil {
		return nil, err
	}
	report.Resources = usageDelta(usageBefore, usageAfter)

	runningAt := time.Now()
	if err := waitQuiet(dctx, recorder, cfg.Quiet, cfg.SettleTimeout); err != nil {
		return nil, err
	}
	report.Settled = max(0, recorder.LastWrite(settleWriters...).Sub(runningAt))
	report.Requests = recorder.Snapshot()
	report.Throttling = recorder.Throttling()
	report.LogErrors = recorder.LogErrors()

	if report.Idle, err = idleWindow(dctx, h, w, recorder, cfg.IdleWindow); err != nil {
		return nil, err
	}
	floorObjects, err := pipelineObjects(dctx, h, w)
	if err != nil {
		return nil, err
	}
	watcher.stop()
	stopped = true
	if err := h.Stop(); err != nil {
		return nil, fmt.Errorf("stopping the harness: %w", err)
	}
	if cfg.SkipFloor {
		return report, nil
	}
	if report.Floor, err = measureFloor(ctx, h.Scheme, floorObjects, cfg.FloorWorkers); err != nil {
		return nil, err
	}
	return report, nil
}

// kubevirtOptions are the simulator's timings for a boot delay; the
// simulator treats zero as its default, so "no delay" is the shortest
// positive one.
func kubevirtOptions(boot time.Duration) kubevirtsim.Options {
	if boot <= 0 {
		return kubevirtsim.Options{ScheduleDelay: time.Nanosecond, BootDelay: time.Nanosecond}
	}
	return kubevirtsim.Options{BootDelay: boot}
}

// waitForTemplateResolved waits until the infrastructure provider resolved
// the pool's template, so the scale-up measures machines, not the class.
func waitForTemplateResolved(ctx context.Context, h *harness.Harness, key client.ObjectKey) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		t := &infrav1.KubeVirtMachineTemplate{}
		if err := h.Client.Get(ctx, key, t); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return t.Status.Resolved != nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for KubeVirtMachineTemplate %s to be resolved: %w", key, err)
	}
	return nil
}

// settleWriters are the components whose writes keep the pool from
// settling: every one but the simulators and the driver.
var settleWriters = []string{componentCAPI, componentBootstrap, componentInfra, ComponentUnknown}

// waitQuiet waits until no component but the simulators and the driver
// wrote for quiet.
func waitQuiet(ctx context.Context, r *Recorder, quiet, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, false, func(context.Context) (bool, error) {
		return time.Since(r.LastWrite(settleWriters...)) >= quiet, nil
	})
	if err != nil {
		return fmt.Errorf("the controllers still wrote %s after the pool was running: %w", timeout, err)
	}
	return nil
}

// machineTimes is what the driver saw of one Machine.
type machineTimes struct {
	created, bootstrapReady, nodeHealthy time.Time
}

// machineWatcher follows the pool's Machines through a watch, so the
// timestamps have the watch's resolution rather than the API's seconds.
type machineWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	machines map[string]*machineTimes
	running  map[string]bool
	errs     []error
}

func watchMachines(ctx context.Context, h *harness.Harness, namespace string) (*machineWatcher, error) {
	wc, err := client.NewWithWatch(h.Config(), client.Options{Scheme: h.Scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	mw := &machineWatcher{cancel: cancel, done: make(chan struct{}), machines: map[string]*machineTimes{}, running: map[string]bool{}}
	first, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(namespace))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching the Machines: %w", err)
	}
	go func() {
		defer close(mw.done)
		w := first
		for {
			for ev := range w.ResultChan() {
				mw.observe(ev)
			}
			if ctx.Err() != nil {
				return
			}
			// The apiserver closes watches now and then; the Machines seen
			// so far keep their first timestamps.
			next, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(namespace))
			if err != nil {
				if ctx.Err() == nil {
					mw.mu.Lock()
					mw.errs = append(mw.errs, err)
					mw.mu.Unlock()
				}
				return
			}
			w = next
		}
	}()
	return mw, nil
}

func (mw *machineWatcher) observe(ev watch.Event) {
	m, ok := ev.Object.(*clusterv1.Machine)
	if !ok {
		// A watch error (for example an expired resourceVersion); the
		// watch closes after it and is reopened.
		return
	}
	now := time.Now()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if ev.Type == watch.Deleted {
		delete(mw.running, m.Name)
		return
	}
	t := mw.machines[m.Name]
	if t == nil {
		t = &machineTimes{created: now}
		mw.machines[m.Name] = t
	}
	if t.bootstrapReady.IsZero() && ptr.Deref(m.Status.Initialization.BootstrapDataSecretCreated, false) {
		t.bootstrapReady = now
	}
	healthy := conditions.IsTrue(m, clusterv1.MachineNodeHealthyCondition)
	if t.nodeHealthy.IsZero() && healthy {
		t.nodeHealthy = now
	}
	mw.running[m.Name] = healthy && m.Status.Phase == string(clusterv1.MachinePhaseRunning)
}

func (mw *machineWatcher) waitAll(ctx context.Context, n int, timeout time.Duration) error {
	var seen, running int
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		mw.mu.Lock()
		defer mw.mu.Unlock()
		if len(mw.errs) > 0 {
			return false, errors.Join(mw.errs...)
		}
		seen, running = len(mw.running), 0
		for _, r := range mw.running {
			if r {
				running++
			}
		}
		return seen == n && running == n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d Machines Running with a healthy node (%d exist, %d are): %w", n, seen, running, err)
	}
	return nil
}

func (mw *machineWatcher) percentiles() (nodeHealthy, bootstrapReady Percentiles) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	var healthy, bootstrap []time.Duration
	for _, t := range mw.machines {
		if !t.nodeHealthy.IsZero() {
			healthy = append(healthy, t.nodeHealthy.Sub(t.created))
		}
		if !t.bootstrapReady.IsZero() {
			bootstrap = append(bootstrap, t.bootstrapReady.Sub(t.created))
		}
	}
	return percentilesOf(healthy), percentilesOf(bootstrap)
}

func (mw *machineWatcher) stop() {
	mw.cancel()
	<-mw.done
}
