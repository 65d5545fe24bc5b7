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

package faults

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// poolSize is the scale-up every fault lands in.
const poolSize = 10

// convergeTimeout bounds the wait for the pool after the last fault.
const convergeTimeout = 10 * time.Minute

// nodeStartupTimeout is the MachineHealthCheck's node startup timeout: a
// boot that failed while the workload apiserver was down is replaced, as in
// production (900 s), but sooner.
const nodeStartupTimeout = 120 * time.Second

// restartNodeStartupTimeout is the node startup timeout of the management
// apiserver restart, which must replace nothing. After a restart every
// component's informers and work queues back off (client-go's reflector
// retries a watch after about 1, 2, 5 and 20 s, up to 30 to 60 s, and every
// sync that failed during the outage doubles its key's retry delay), so a
// machine created just before the kill waits long for each step: real
// virt-controller created the instances of VirtualMachines made 2 s before
// a kill 117 s later (seed 3, 2026-12-03, artefacts kept), and at 120 s two
// such machines had been replaced while they were starting. Nothing was
// lost; the instance came late.
const restartNodeStartupTimeout = 5 * time.Minute

// fault injects failures into a scale-up that started at start, drawing
// every choice from rng; it returns what it did, once the last failure has
// ended.
type fault func(ctx context.Context, t *testing.T, rng *rand.Rand, w *harness.WorkloadCluster, start time.Time) []string

// managementAPIServer is the restart that must replace no Machine.
const managementAPIServer = "management apiserver"

// faults are the scenarios, by name; "none" is the control.
var faults = map[string]fault{
	"none": func(context.Context, *testing.T, *rand.Rand, *harness.WorkloadCluster, time.Time) []string {
		return nil
	},
	"provider kills":     killProviders,
	managementAPIServer:  restartManagementAPIServer,
	"workload apiserver": workloadAPIServerDown,
	"provider webhooks":  providerWebhooksDown,
}

// TestFaults runs every fault once per seed, one after another: the faults
// hit processes every scenario shares.
func TestFaults(t *testing.T) {
	names := make([]string, 0, len(faults))
	for name := range faults {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, seed := range seedList(t) {
		for _, name := range names {
			t.Run(fmt.Sprintf("%s/seed=%d", strings.ReplaceAll(name, " ", "-"), seed), func(t *testing.T) {
				scaleUpThrough(t, name, faults[name], seed)
			})
		}
	}
}

// scaleUpThrough creates a cluster, scales its pool to poolSize while the
// fault strikes, and checks that it converges with nothing duplicated or
// left behind.
func scaleUpThrough(t *testing.T, name string, inject fault, seed int64) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// The seed and the fault's name pick the draws, so a failure replays.
	fnvName := fnv.New64a()
	_, _ = fnvName.Write([]byte(name))
	rng := rand.New(rand.NewPCG(uint64(seed), fnvName.Sum64())) //nolint:gosec // Seeded draws that replay a run, not secrets.
	key := client.ObjectKey{Namespace: fmt.Sprintf("faults-%s-%d", strings.ReplaceAll(name, " ", "-"), seed), Name: "tenant"}
	w, err := h.CreateCluster(ctx, key, harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { h.ReleaseCluster(key) })

	pool := watchPool(t, w)
	startupTimeout := nodeStartupTimeout
	if name == managementAPIServer {
		startupTimeout = restartNodeStartupTimeout
	}
	objs, err := harness.RenderTemplate(harness.KairosPoolTemplate(), map[string]string{
		"CLUSTER_NAME":                          key.Name,
		"NAMESPACE":                             key.Namespace,
		"WORKER_MACHINE_COUNT":                  fmt.Sprint(poolSize),
		"NODE_STARTUP_TIMEOUT_SECONDS":          fmt.Sprint(int(startupTimeout.Seconds())),
		"NODE_UNHEALTHY_TIMEOUT_SECONDS":        "30",
		"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": "30",
	})
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	g.Expect(h.Apply(ctx, objs)).To(Succeed())
	injected := inject(ctx, t, rng, w, start)
	lastFault := time.Now()
	r := result{Fault: name, Seed: seed, Injected: injected}
	defer func() { record(r) }()
	t.Logf("injected %d faults: %s", len(injected), strings.Join(injected, "; "))

	g.Eventually(func(g Gomega) {
		s, err := h.State(ctx, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.Joined(poolSize)).To(BeTrue(), s.Summary())
		left, err := h.Leftovers(ctx, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
		tokens, err := h.JoinTokens(ctx, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tokens).To(BeEmpty(), "bootstrap tokens left in the workload cluster")
	}, convergeTimeout, time.Second).Should(Succeed(), func() string { return h.Describe(ctx, key) })
	r.Recovered, r.ToJoined, r.AfterLastFault = true, time.Since(start), time.Since(lastFault)
	seen := pool.stop()
	r.Replaced = len(seen.machines) - poolSize
	r.SlowestInstance, err = slowestInstance(ctx, key.Namespace)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(seen.duplicateTokens).To(BeEmpty(), "a KairosConfig had more than one bootstrap token in the workload cluster at once")
	t.Logf("all %d Machines joined %s after the pool was created, %s after the last fault; %d replaced; the slowest instance came %s after its VirtualMachine",
		poolSize, r.ToJoined.Round(time.Second), r.AfterLastFault.Round(time.Second), r.Replaced, r.SlowestInstance.Round(time.Second))
	if name == managementAPIServer {
		g.Expect(r.Replaced).To(BeZero(), "a management apiserver restart loses nothing: no Machine is replaced")
	}
}

// slowestInstance is the longest time from a VirtualMachine's creation to
// its instance's in namespace: how long virt-controller took to start it.
func slowestInstance(ctx context.Context, namespace string) (time.Duration, error) {
	vms := &kubevirtv1.VirtualMachineList{}
	if err := h.Client.List(ctx, vms, client.InNamespace(namespace)); err != nil {
		return 0, err
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := h.Client.List(ctx, vmis, client.InNamespace(namespace)); err != nil {
		return 0, err
	}
	created := map[string]time.Time{}
	for _, vmi := range vmis.Items {
		created[vmi.Name] = vmi.CreationTimestamp.Time
	}
	var slowest time.Duration
	for _, vm := range vms.Items {
		if at, ok := created[vm.Name]; ok {
			slowest = max(slowest, at.Sub(vm.CreationTimestamp.Time))
		}
	}
	return slowest, nil
}

// poolWatch follows the pool while the faults strike, through watches
// (harness.Watch): every Machine name it ever saw, and every moment a
// KairosConfig had two tokens at once in the workload cluster.
type poolWatch struct {
	cancel context.CancelFunc
	done   []<-chan struct{}
	mu     sync.Mutex
	seen   sample
	// tokens are the bootstrap token Secrets in the workload cluster now,
	// each with the KairosConfig it names.
	tokens map[string]string
}

type sample struct {
	machines        map[string]bool
	duplicateTokens []string
}

func watchPool(t *testing.T, w *harness.WorkloadCluster) *poolWatch {
	t.Helper()
	management, err := client.NewWithWatch(h.Config(), client.Options{Scheme: h.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	workload, err := client.NewWithWatch(w.API.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &poolWatch{cancel: cancel, seen: sample{machines: map[string]bool{}}, tokens: map[string]string{}}
	p.done = append(p.done,
		harness.Watch(ctx, management, &clusterv1.MachineList{}, p.machine,
			client.InNamespace(w.Key.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: w.Key.Name}),
		harness.Watch(ctx, workload, &corev1.SecretList{}, p.token, client.InNamespace(metav1.NamespaceSystem)))
	return p
}

func (p *poolWatch) machine(_ watch.EventType, o client.Object) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen.machines[o.GetName()] = true
}

func (p *poolWatch) token(event watch.EventType, o client.Object) {
	owner, ok := harness.JoinTokenOwner(o.(*corev1.Secret))
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if event == watch.Deleted {
		delete(p.tokens, o.GetName())
		return
	}
	p.tokens[o.GetName()] = owner
	var names []string
	for name, of := range p.tokens {
		if of == owner {
			names = append(names, name)
		}
	}
	if len(names) > 1 {
		sort.Strings(names)
		p.seen.duplicateTokens = append(p.seen.duplicateTokens, fmt.Sprintf("%s: %v", owner, names))
	}
}

func (p *poolWatch) stop() sample {
	p.cancel()
	for _, done := range p.done {
		<-done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// between draws a duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleepUntil waits until at, or returns at once if it has passed.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// killProviders kills a provider with SIGKILL three to five times at random
// points of the scale-up (its first 20 s: an undisturbed pool of ten joins
// in about 20 to 60 s here), each time the bootstrap or the infrastructure
// provider, and starts it again after a random downtime.
func killProviders(ctx context.Context, t *testing.T, rng *rand.Rand, _ *harness.WorkloadCluster, start time.Time) []string {
	t.Helper()
	kills := 3 + rng.IntN(3)
	offsets := make([]time.Duration, kills)
	for i := range offsets {
		offsets[i] = between(rng, 0, 20*time.Second)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	var done []string
	for _, at := range offsets {
		name := []components.Name{components.KairosBootstrap, components.Infrastructure}[rng.IntN(2)]
		down := between(rng, 0, 5*time.Second)
		sleepUntil(start.Add(at))
		p := h.Process(name)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		killedAt := time.Since(start)
		time.Sleep(down)
		if err := p.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		done = append(done, fmt.Sprintf("kill -9 %s at %s, down %s", name, killedAt.Round(100*time.Millisecond), down.Round(100*time.Millisecond)))
	}
	return done
}

// restartManagementAPIServer kills the management apiserver at a random
// point of the scale-up and starts it again after a random downtime;
// every component reconnects on its own.
func restartManagementAPIServer(ctx context.Context, t *testing.T, rng *rand.Rand, _ *harness.WorkloadCluster, start time.Time) []string {
	t.Helper()
	at, down := between(rng, 2*time.Second, 20*time.Second), between(rng, time.Second, 10*time.Second)
	sleepUntil(start.Add(at))
	killed := time.Now()
	if err := h.Management.RestartAPIServer(ctx, down); err != nil {
		t.Fatal(err)
	}
	recordRestart(killed, time.Now())
	return []string{fmt.Sprintf("kill -9 management kube-apiserver at %s, down %s", at.Round(100*time.Millisecond), down.Round(100*time.Millisecond))}
}

// workloadAPIServerDown kills the workload apiserver at a random point of
// the scale-up and keeps it down for longer than the bootstrap token TTL,
// so every token minted before it expires while nobody can join.
func workloadAPIServerDown(ctx context.Context, t *testing.T, rng *rand.Rand, w *harness.WorkloadCluster, start time.Time) []string {
	t.Helper()
	at, down := between(rng, 5*time.Second, 20*time.Second), tokenTTL+between(rng, 5*time.Second, 20*time.Second)
	sleepUntil(start.Add(at))
	if err := w.API.RestartAPIServer(ctx, down); err != nil {
		t.Fatal(err)
	}
	return []string{fmt.Sprintf("kill -9 workload kube-apiserver at %s, down %s (token TTL %s)", at.Round(100*time.Millisecond), down.Round(100*time.Millisecond), tokenTTL)}
}

// providerWebhooksDown makes the providers' webhooks unreachable at a
// random point of the scale-up for a random while: the apiserver refuses
// every write they admit, Cluster API's creations of our objects included.
func providerWebhooksDown(ctx context.Context, t *testing.T, rng *rand.Rand, _ *harness.WorkloadCluster, start time.Time) []string {
	t.Helper()
	at, down := between(rng, 0, 10*time.Second), between(rng, 5*time.Second, 20*time.Second)
	sleepUntil(start.Add(at))
	restore, err := h.ProviderWebhooksDown(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(down)
	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	return []string{fmt.Sprintf("webhooks unreachable at %s for %s", at.Round(100*time.Millisecond), down.Round(100*time.Millisecond))}
}
