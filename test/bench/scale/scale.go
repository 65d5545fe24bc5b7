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
// accept the objects the pipeline wrote. Side by side, it runs the same
// pool bootstrapped by Cluster API's own kubeadm provider (the peer).
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
	"github.com/cozystack/cluster-api-workers/test/infra"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

// PlatformImage is the platform's Kairos image the pool boots.
const PlatformImage = "registry.example.com/cozystack/kairos-worker@sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"

// PeerImage is the peer pool's cloud-init disk with kubeadm, as
// image-builder makes them for CAPK.
const PeerImage = "registry.example.com/capk/ubuntu-2404-kubeadm@sha256:c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"

// Config is one benchmark run.
type Config struct {
	// Machines is N, the replicas the MachineDeployment scales to.
	Machines int
	// Bootstrap is the pool's bootstrap provider: Kairos (ours, the
	// default) or Cluster API's kubeadm provider (the peer).
	Bootstrap harness.Bootstrap
	// Processes runs the bootstrap and infrastructure providers each as
	// its own process, so their CPU and peak RSS are measured alone.
	Processes bool
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
	// PeerIdleWindow is the peer's idle window in RunSideBySide (the
	// issue's idle target is ours); IdleWindow when negative, none when
	// zero.
	PeerIdleWindow time.Duration
	// FloorWorkers is how many clients write the floor's objects at once.
	FloorWorkers int
	// SkipFloor leaves the floor unmeasured (it starts a second apiserver).
	SkipFloor bool
	// SkipUpstream leaves unmeasured how long Cluster API alone takes to
	// create the Machines (UpstreamReport; a third harness).
	SkipUpstream bool
	// SkipFloorProviders leaves the contract-floor providers' run out of
	// RunSideBySide.
	SkipFloorProviders bool
	// SkipPeer leaves the kubeadm peer's run out of RunSideBySide.
	SkipPeer bool
	// upstreamOnly stops the providers before the scale-up and ends the
	// run once every Machine exists (runUpstream).
	upstreamOnly bool
	// floorProviders replaces our provider processes by the contract-floor
	// providers (test/bench/floor) once the pool's template is resolved.
	floorProviders bool
	// LogSink, when set, receives the logs of the components in the
	// benchmark process.
	LogSink logr.LogSink
	// ProcessLogDir, when set, keeps the provider processes' logs there,
	// in a directory per bootstrap provider.
	ProcessLogDir string
	// Progress, when set, receives a line per stage and, during the
	// scale-up, the Machines' progress every 30 seconds.
	Progress io.Writer
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
	// Bootstrap is the bootstrap provider: Kairos or Kubeadm.
	Bootstrap harness.Bootstrap `json:"bootstrap"`
	// FloorProviders is set when the contract-floor providers
	// (test/bench/floor) reconciled the Kairos pool in place of ours.
	FloorProviders bool          `json:"floorProviders,omitempty"`
	Machines       int           `json:"machines"`
	BootDelay      time.Duration `json:"bootDelay"`
	// AllRunning is the time from the scale-up to the last Machine Running
	// with a healthy node.
	AllRunning time.Duration `json:"allRunning"`
	// AllCreated is the time from the scale-up to the last Machine's
	// creation (as the driver's watch saw it): Cluster API's MachineSet
	// creates a Machine, its bootstrap config and infrastructure machine
	// one after another, so this part of AllRunning is upstream's.
	AllCreated time.Duration `json:"allCreated"`
	// NodeHealthy are percentiles of each Machine's time from its creation
	// (as the driver's watch saw it) to NodeHealthy.
	NodeHealthy Percentiles `json:"nodeHealthy"`
	// BootstrapReady are the same for the bootstrap data being ready.
	BootstrapReady Percentiles `json:"bootstrapReady"`
	// Requests are every client's requests during the scale-up and until
	// the pool settled.
	Requests []requests.RequestCount `json:"requests"`
	// Throttling is the rate limiter waits of every client in the process.
	Throttling requests.Throttling `json:"throttling"`
	// LogErrors counts the errors each component logged.
	LogErrors map[string]int `json:"logErrors"`
	// Settled is the time from the last Machine Running to the last write
	// of a component other than the simulators, found once none wrote for
	// Quiet.
	Settled time.Duration `json:"settled"`
	// NotSettled is set when the controllers still wrote SettleTimeout
	// after all Machines ran; the counts and the idle window follow anyway.
	NotSettled bool `json:"notSettled,omitempty"`
	// Idle is what changed during the idle window.
	Idle IdleReport `json:"idle"`
	// Floor is the bare apiserver's time for the pipeline's objects.
	Floor FloorReport `json:"floor"`
	// Resources are the CPU of the benchmark process, of the provider
	// processes and of the apiservers it started over the scale-up, and
	// their peak RSS up to the end of the idle window.
	Resources []ProcessUsage `json:"resources"`
}

// Provider names the pool's bootstrap provider for the report.
func (r *Report) Provider() string {
	switch {
	case r.FloorProviders:
		return "contract-floor providers"
	case r.Bootstrap == harness.BootstrapKubeadm:
		return "kubeadm peer (Cluster API's KubeadmConfig)"
	default:
		return "Kairos (ours)"
	}
}

// run starts a harness, creates a workload cluster with a pool at zero
// (Kairos, or the kubeadm peer), scales it to N and measures; it returns
// the objects the floor writes.
func run(ctx context.Context, cfg Config) (*Report, []*unstructured.Unstructured, error) {
	cfg.defaults()
	if cfg.Machines < 1 {
		return nil, nil, errors.New("machines must be at least 1")
	}
	if cfg.Bootstrap == "" {
		cfg.Bootstrap = harness.BootstrapKairos
	}
	recorder := requests.NewRecorder(requests.Options{Delegate: cfg.LogSink})
	h, err := harness.Start(ctx, harness.Options{
		Logger:        recorder.Logger(),
		WorkerClasses: true,
		Bootstrap:     cfg.Bootstrap,
		Processes:     cfg.Processes,
		ProcessLogDir: processLogDir(cfg),
		Infra:         infraOptions(cfg.BootDelay),
		Images: map[string]nodesim.Image{
			PlatformImage: {KubernetesVersion: harness.ControlPlaneKubernetesVersion, OSImage: "Kairos v3.5.3 (Ubuntu 24.04)"},
			PeerImage:     {KubernetesVersion: harness.ControlPlaneKubernetesVersion, OSImage: "Ubuntu 24.04.3 LTS", CloudInit: true},
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the harness: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = h.Stop()
		}
	}()
	recorder.SetManagementHost(h.Management.Config.Host)
	recorder.Install()
	defer recorder.Uninstall()
	dctx := recorder.DriverContext(ctx)

	if err := h.ConfigurePlatform(dctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: harness.ControlPlaneKubernetesVersion}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: PlatformImage}}
	}); err != nil {
		return nil, nil, err
	}
	w, err := h.CreateCluster(dctx, client.ObjectKey{Namespace: "bench", Name: "tenant"}, harness.ClusterOptions{})
	if err != nil {
		return nil, nil, err
	}
	cfg.progressf("harness started; creating the pool")
	pool, err := createPool(dctx, h, w, cfg)
	if err != nil {
		return nil, nil, err
	}
	processes := h.Processes()
	if cfg.floorProviders {
		cfg.progressf("replacing our providers by the contract-floor providers")
		if processes, err = startFloorProviders(dctx, h, w); err != nil {
			return nil, nil, err
		}
	}
	counts := &counters{local: recorder}
	processNames := map[int]components.Name{}
	for _, p := range processes {
		counts.remotes = append(counts.remotes, p.Requests)
		processNames[p.PID] = p.Name
	}

	watcher, err := watchMachines(dctx, h, w.Key.Namespace)
	if err != nil {
		return nil, nil, err
	}
	defer watcher.stop()

	if err := counts.Reset(dctx); err != nil {
		return nil, nil, err
	}
	usageBefore, err := processUsage(processNames)
	if err != nil {
		return nil, nil, err
	}
	if cfg.upstreamOnly {
		resume, err := stopProviders(h)
		defer resume()
		if err != nil {
			return nil, nil, err
		}
	}
	start := time.Now()
	md := &clusterv1.MachineDeployment{}
	if err := h.Client.Get(dctx, pool.machineDeployment, md); err != nil {
		return nil, nil, err
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To(int32(cfg.Machines))
	if err := h.Client.Patch(dctx, md, patch); err != nil {
		return nil, nil, fmt.Errorf("scaling MachineDeployment %s to %d: %w", pool.machineDeployment, cfg.Machines, err)
	}
	cfg.progressf("scaling to %d", cfg.Machines)
	if cfg.upstreamOnly {
		if err := watcher.waitCreated(dctx, cfg, start); err != nil {
			return nil, nil, err
		}
		cfg.progressf("Cluster API alone created %d Machines in %s", cfg.Machines, round(watcher.lastCreated().Sub(start)))
		return &Report{Bootstrap: cfg.Bootstrap, Machines: cfg.Machines, AllCreated: watcher.lastCreated().Sub(start)}, nil, nil
	}
	if err := watcher.waitAll(dctx, cfg, start); err != nil {
		if herr := h.Err(); herr != nil {
			err = errors.Join(err, herr)
		}
		return nil, nil, err
	}
	report := &Report{Bootstrap: cfg.Bootstrap, FloorProviders: cfg.floorProviders, Machines: cfg.Machines, BootDelay: cfg.BootDelay, AllRunning: time.Since(start)}
	report.AllCreated = watcher.lastCreated().Sub(start)
	report.NodeHealthy, report.BootstrapReady = watcher.percentiles()
	usageAfter, err := processUsage(processNames)
	if err != nil {
		return nil, nil, err
	}

	cfg.progressf("all %d Running after %s; waiting for the controllers to settle", cfg.Machines, round(report.AllRunning))
	runningAt := time.Now()
	state, settled, err := waitQuiet(dctx, counts, cfg.Quiet, cfg.SettleTimeout)
	if err != nil {
		return nil, nil, err
	}
	// A pool that keeps being written is a finding, not a failed run: the
	// idle window then shows who writes.
	report.NotSettled = !settled
	report.Settled = max(0, state.LastWriteOf(settleWriters...).Sub(runningAt))
	report.Requests = state.Requests
	report.Throttling = state.Throttling
	report.LogErrors = state.LogErrors

	if report.NotSettled {
		cfg.progressf("the controllers still wrote %s after all Running; idle window of %s", cfg.SettleTimeout, cfg.IdleWindow)
	} else {
		cfg.progressf("settled; idle window of %s", cfg.IdleWindow)
	}
	if report.Idle, err = idleWindow(dctx, h, w, cfg.Bootstrap, counts, cfg.IdleWindow); err != nil {
		return nil, nil, err
	}
	// Peak RSS up to here: the scale-up, settling and the idle window.
	usageEnd, err := processUsage(processNames)
	if err != nil {
		return nil, nil, err
	}
	report.Resources = usageDelta(usageBefore, usageAfter, usageEnd)
	floorObjects, err := pipelineObjects(dctx, h, w, cfg.Bootstrap)
	if err != nil {
		return nil, nil, err
	}
	watcher.stop()
	stopped = true
	if err := h.Stop(); err != nil {
		return nil, nil, fmt.Errorf("stopping the harness: %w", err)
	}
	return report, floorObjects, nil
}

// progressf reports a stage.
func (c Config) progressf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s %s: %s\n", time.Now().UTC().Format("15:04:05"), c.stage(), fmt.Sprintf(format, args...))
	}
}

// stage names the run: the bootstrap provider, or Floor for the
// contract-floor providers.
func (c Config) stage() string {
	if c.floorProviders {
		return "Floor"
	}
	return string(c.Bootstrap)
}

// processLogDir is a directory per run under cfg.ProcessLogDir.
func processLogDir(cfg Config) string {
	if cfg.ProcessLogDir == "" {
		return ""
	}
	return filepath.Join(cfg.ProcessLogDir, strings.ToLower(cfg.stage()))
}

// addCAKey gives the cluster's CA Secret a private key, which Cluster API's
// kubeadm provider requires to be present before it renders a worker's
// join (a control plane provider such as Kamaji stores the CA's key there).
// The harness's workload apiserver does not expose its CA's key, so this
// key is a fresh one: a worker's join uses only the CA certificate (its
// hash is the discovery pin), so the key is never used to sign anything.
func addCAKey(ctx context.Context, h *harness.Harness, w *harness.WorkloadCluster) error {
	key, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return err
	}
	ca := &corev1.Secret{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: secret.Name(w.Key.Name, secret.ClusterCA)}, ca); err != nil {
		return fmt.Errorf("reading the cluster CA Secret: %w", err)
	}
	patch := client.MergeFrom(ca.DeepCopy())
	ca.Data[secret.TLSKeyDataName] = key
	if err := h.Client.Patch(ctx, ca, patch); err != nil {
		return fmt.Errorf("adding a key to the cluster CA Secret: %w", err)
	}
	return nil
}

// pool is what createPool made.
type pool struct {
	machineDeployment client.ObjectKey
}

// createPool applies the pool's template at zero replicas and waits until
// the infrastructure provider resolved its KubeVirtMachineTemplate, so the
// scale-up measures machines, not the class.
func createPool(ctx context.Context, h *harness.Harness, w *harness.WorkloadCluster, cfg Config) (pool, error) {
	vars := map[string]string{
		"CLUSTER_NAME": w.Key.Name, "NAMESPACE": w.Key.Namespace,
		"WORKER_MACHINE_COUNT": "0",
	}
	path, name, template := harness.KairosPoolTemplate(), w.Key.Name+"-kairos", w.Key.Name+"-kairos-r1"
	if cfg.Bootstrap == harness.BootstrapKubeadm {
		path, name, template = harness.KubeadmPoolTemplate(), w.Key.Name+"-kubeadm", w.Key.Name+"-kubeadm"
		vars["WORKER_IMAGE"] = PeerImage
		if err := addCAKey(ctx, h, w); err != nil {
			return pool{}, err
		}
	}
	objs, err := harness.RenderTemplate(path, vars)
	if err != nil {
		return pool{}, err
	}
	if err := h.Apply(ctx, objs); err != nil {
		return pool{}, err
	}
	if err := waitForTemplateResolved(ctx, h, client.ObjectKey{Namespace: w.Key.Namespace, Name: template}); err != nil {
		return pool{}, err
	}
	return pool{machineDeployment: client.ObjectKey{Namespace: w.Key.Namespace, Name: name}}, nil
}

// infraOptions are the node side's timings for a boot delay; it
// treats zero as its default, so "no delay" is the shortest
// positive one.
func infraOptions(boot time.Duration) infra.Options {
	if boot <= 0 {
		return infra.Options{Hosts: kubevirtsim.Options{ScheduleDelay: time.Nanosecond, BootDelay: time.Nanosecond}}
	}
	return infra.Options{Hosts: kubevirtsim.Options{BootDelay: boot}}
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
var settleWriters = []string{requests.ComponentCAPI, requests.ComponentBootstrap, requests.ComponentInfra, requests.ComponentUnknown}

// waitQuiet waits until no component but the simulators and the driver
// wrote for quiet, and returns the counts then; settled is false when they
// still wrote after timeout.
func waitQuiet(ctx context.Context, counts *counters, quiet, timeout time.Duration) (state requests.State, settled bool, err error) {
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, false, func(ctx context.Context) (bool, error) {
		var err error
		if state, err = counts.State(ctx); err != nil {
			return false, err
		}
		return time.Since(state.LastWriteOf(settleWriters...)) >= quiet, nil
	})
	switch {
	case err == nil:
		return state, true, nil
	case ctx.Err() == nil && wait.Interrupted(err):
		return state, false, nil
	default:
		return state, false, err
	}
}

// counters are the request counts of this process and of the provider
// processes.
type counters struct {
	local   *requests.Recorder
	remotes []requests.Remote
}

// Reset forgets every count so far.
func (c *counters) Reset(ctx context.Context) error {
	c.local.Reset()
	for _, r := range c.remotes {
		if err := r.Reset(ctx); err != nil {
			return err
		}
	}
	return nil
}

// State sums the counts of every process.
func (c *counters) State(ctx context.Context) (requests.State, error) {
	states := []requests.State{c.local.State()}
	for _, r := range c.remotes {
		s, err := r.State(ctx)
		if err != nil {
			return requests.State{}, err
		}
		states = append(states, s)
	}
	return requests.Merge(states...), nil
}

// machineTimes is what the driver saw of one Machine.
type machineTimes struct {
	created, bootstrapReady, nodeHealthy time.Time
}

// machineWatcher follows the pool's Machines through a watch
// (harness.Watch), so the timestamps have the watch's resolution rather
// than the API's seconds.
type machineWatcher struct {
	cancel context.CancelFunc
	done   <-chan struct{}

	mu       sync.Mutex
	machines map[string]*machineTimes
	running  map[string]bool
}

func watchMachines(ctx context.Context, h *harness.Harness, namespace string) (*machineWatcher, error) {
	wc, err := client.NewWithWatch(h.Config(), client.Options{Scheme: h.Scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	mw := &machineWatcher{cancel: cancel, machines: map[string]*machineTimes{}, running: map[string]bool{}}
	mw.done = harness.Watch(ctx, wc, &clusterv1.MachineList{}, mw.observe, client.InNamespace(namespace))
	return mw, nil
}

func (mw *machineWatcher) observe(event watch.EventType, o client.Object) {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return
	}
	now := time.Now()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if event == watch.Deleted {
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

func (mw *machineWatcher) waitAll(ctx context.Context, cfg Config, start time.Time) error {
	n := cfg.Machines
	var seen, running, bootstrapped int
	lastReport := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		mw.mu.Lock()
		defer mw.mu.Unlock()
		seen, running, bootstrapped = len(mw.running), 0, 0
		for _, r := range mw.running {
			if r {
				running++
			}
		}
		for _, t := range mw.machines {
			if !t.bootstrapReady.IsZero() {
				bootstrapped++
			}
		}
		if time.Since(lastReport) >= 30*time.Second {
			lastReport = time.Now()
			cfg.progressf("%s into the scale-up: %d Machines exist, %d have bootstrap data, %d Running", round(time.Since(start)), seen, bootstrapped, running)
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

// lastCreated is when the watch first saw the newest Machine.
func (mw *machineWatcher) lastCreated() time.Time {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	var last time.Time
	for _, t := range mw.machines {
		if t.created.After(last) {
			last = t.created
		}
	}
	return last
}

func (mw *machineWatcher) stop() {
	mw.cancel()
	<-mw.done
}
