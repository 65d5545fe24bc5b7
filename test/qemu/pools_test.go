//go:build qemu

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
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/process"
)

// pool is one pool of the example Kairos template and the suite's ways
// to apply and watch it; test/scenarios's pool has the same shape.
type pool struct {
	harness.Pool
}

// newPool is the workload Cluster's MachineDeployment of that POOL_NAME.
func newPool(name string) pool { return pool{harness.Pool{Cluster: workload.Key, Name: name}} }

// poolDefaults are the suite's values of the example pool's variables: one
// guest's size (the runner gives every guest 2 CPUs and 1536 MiB, whatever
// the VM asks), and MachineHealthCheck timeouts a healthy guest never
// trips (a Node registers NotReady and turns Ready some seconds later,
// more than 10 s on a loaded host).
func poolDefaults() map[string]string {
	return map[string]string{
		"WORKER_CPU_CORES":                      "2",
		"WORKER_MEMORY":                         "1536Mi",
		"NODE_STARTUP_TIMEOUT_SECONDS":          "900",
		"NODE_UNHEALTHY_TIMEOUT_SECONDS":        "120",
		"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": "60",
	}
}

// render renders the pool with the scenario's variables over the suite's.
func (p pool) render(t *testing.T, vars map[string]string) []unstructured.Unstructured {
	t.Helper()
	return p.MustRender(t, poolDefaults(), vars)
}

// templateSpecOf returns the object's spec.template.spec (both templates
// of the example have one).
func templateSpecOf(o *unstructured.Unstructured) map[string]any {
	return o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

// importFromRunner makes the pool's KubeVirtMachineTemplate classless with
// its root disk imported over HTTP from the runner (the DataVolume path),
// attached with the given datasource. A class-based Kairos template always
// boots a container disk.
func importFromRunner(datasource string) func(*unstructured.Unstructured) {
	return func(o *unstructured.Unstructured) {
		if o.GetKind() != "KubeVirtMachineTemplate" {
			return
		}
		harness.ClasslessImport(runner.ImageURL(), "4Gi", datasource)(o, templateSpecOf(o))
	}
}

// apply creates the pool's objects, each edit applied first.
func (p pool) apply(t *testing.T, vars map[string]string, edits ...func(*unstructured.Unstructured)) {
	t.Helper()
	if err := h.Apply(suiteCtx, harness.Edited(p.render(t, vars), edits...)); err != nil {
		t.Fatal(err)
	}
}

// exists reports whether the pool's MachineDeployment exists.
func (p pool) exists(t *testing.T) bool {
	t.Helper()
	err := h.Client.Get(suiteCtx, p.Deployment(), &clusterv1.MachineDeployment{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// machines lists the pool's Machines, by name.
func (p pool) machines(g Gomega) []clusterv1.Machine {
	ms, err := h.PoolMachines(suiteCtx, p.Pool)
	g.Expect(err).NotTo(HaveOccurred())
	return ms
}

// nodes lists the workload Nodes of the pool.
func (p pool) nodes(g Gomega) []corev1.Node {
	ns, err := h.PoolNodes(suiteCtx, p.Pool)
	g.Expect(err).NotTo(HaveOccurred())
	return ns
}

// expectJoined waits until the pool has joined with exactly n Machines
// (harness.PoolJoined) whose Nodes run the suite's kubelet.
func (p pool) expectJoined(t *testing.T, n int) []clusterv1.Machine {
	t.Helper()
	var ms []clusterv1.Machine
	NewWithT(t).Eventually(func(g Gomega) {
		var err error
		ms, err = h.PoolJoined(suiteCtx, p.Pool, n)
		g.Expect(err).NotTo(HaveOccurred())
		for _, node := range p.nodes(g) {
			g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal(kubernetesVersion), "Node %s", node.Name)
		}
	}, joinTimeout, poll).Should(Succeed(), func() string { return describe(p) })
	return ms
}

// remove deletes the pool (MachineDeployment and MachineHealthCheck) and
// waits until its Machines and Nodes are gone and its guests stopped, so
// their launcher Pods no longer hold the guest node's two places.
func (p pool) remove(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(h.DeletePool(suiteCtx, p.Pool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(p.machines(g)).To(BeEmpty())
		g.Expect(p.nodes(g)).To(BeEmpty())
		for _, guest := range runner.Guests() {
			if strings.HasPrefix(guest.VM.Name, p.Deployment().Name+"-") {
				g.Expect(guest.Exited.IsZero()).To(BeFalse(), "the guest of %s still runs", guest.VM.Name)
			}
		}
	}, 5*time.Minute, poll).Should(Succeed(), func() string { return describe(p) })
}

// onlyPool removes every other pool of the Cluster, so the scenario has
// the guest node to itself.
func onlyPool(t *testing.T, keep pool) {
	t.Helper()
	list := &clusterv1.MachineDeploymentList{}
	if err := h.Client.List(suiteCtx, list, client.InNamespace(workload.Key.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, md := range list.Items {
		if md.Name != keep.Deployment().Name {
			newPool(strings.TrimPrefix(md.Name, workload.Key.Name+"-")).remove(t)
		}
	}
}

// guestOf is the latest guest the runner started for a VM.
func guestOf(g Gomega, vm client.ObjectKey) Guest {
	var found *Guest
	for _, guest := range runner.Guests() {
		if guest.VM == vm {
			found = &guest
		}
	}
	g.Expect(found).NotTo(BeNil(), "the runner started no guest for %s", vm)
	return *found
}

func vmKey(m clusterv1.Machine) client.ObjectKey {
	return client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}
}

// joinTokens lists the bootstrap tokens left in the workload cluster for
// the pool's KairosConfigs.
func (p pool) joinTokens(g Gomega) []string {
	tokens, err := h.PoolJoinTokens(suiteCtx, p.Pool)
	g.Expect(err).NotTo(HaveOccurred())
	return tokens
}

// recordJoins records, for each Machine, how long its guest took from
// QEMU's start to its Node's registration and Ready condition (both
// written by the workload apiserver on this host).
func recordJoins(t *testing.T, scenario string, ms []clusterv1.Machine) {
	t.Helper()
	g := NewWithT(t)
	for _, m := range ms {
		guest := guestOf(g, vmKey(m))
		node := &corev1.Node{}
		g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
		var ready time.Time
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.LastTransitionTime.Time
			}
		}
		j := guestJoin{
			scenario: scenario, vm: guest.VM.Name, seed: guest.Seed, imported: !containerDiskImage(guest.RootImage),
			registered: node.CreationTimestamp.Sub(guest.Started), ready: ready.Sub(guest.Started),
		}
		timings.addJoin(j)
		t.Logf("timing: guest %s (%s) registered its Node %s and was Ready %s after QEMU started",
			j.vm, j.source(), j.registered.Round(time.Second), j.ready.Round(time.Second))
	}
}

// containerDiskImage reports whether a guest's root image is one of the
// suite's container disks rather than an imported volume.
func containerDiskImage(path string) bool {
	return path == disk.Image() || (kairosDisk != nil && path == kairosDisk.Image())
}

// describe summarizes the pool for failure messages: Machines with the
// conditions that are not True, VMs, Nodes, the instances, launcher Pods
// and DataVolumes KubeVirt and CDI made for the pool, the runner's guests
// of the pool and the end of the journal of every guest whose Node is
// missing.
func describe(p pool) string {
	var b strings.Builder
	b.WriteString(h.Describe(context.Background(), workload.Key))
	nodes := map[string]bool{}
	list := &corev1.NodeList{}
	if err := workload.API.Client.List(context.Background(), list); err == nil {
		for _, n := range list.Items {
			nodes[n.Name] = true
		}
	}
	b.WriteString(describeInfrastructure(p))
	for _, guest := range runner.Guests() {
		if !strings.HasPrefix(guest.VM.Name, p.Deployment().Name+"-") {
			continue
		}
		state := "running"
		if !guest.Exited.IsZero() {
			state = fmt.Sprintf("exited after %s (%s)", guest.Exited.Sub(guest.Started).Round(time.Second), guest.ExitError)
		}
		fmt.Fprintf(&b, "guest %s (%s seed, started %s): %s\n", guest.VM.Name, guest.Seed, guest.Started.Format(time.TimeOnly), state)
		if !nodes[guest.VM.Name] {
			fmt.Fprintf(&b, "journal of %s:\n%s\n", guest.VM.Name, process.Tail(guest.JournalLog, 4<<10))
		}
	}
	if cp := controlPlanes.Get(workload.Key); cp != nil {
		fmt.Fprintf(&b, "control plane:\n%s", cp.Logs())
	}
	return b.String()
}

// describeInfrastructure lists the pool's instances (phase, node, the
// conditions that are not True), launcher Pods (phase, node, why not
// scheduled) and DataVolumes (phase, progress, restarts) in the management
// cluster.
func describeInfrastructure(p pool) string {
	ctx := context.Background()
	var b strings.Builder
	mine := func(name string) bool { return strings.HasPrefix(name, p.Deployment().Name+"-") }
	ns := client.InNamespace(p.Deployment().Namespace)
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := h.Client.List(ctx, vmis, ns); err == nil {
		for _, vmi := range vmis.Items {
			if !mine(vmi.Name) {
				continue
			}
			fmt.Fprintf(&b, "VirtualMachineInstance %s uid=%s phase=%s node=%q", vmi.Name, vmi.UID, vmi.Status.Phase, vmi.Status.NodeName)
			for _, c := range vmi.Status.Conditions {
				if c.Status != corev1.ConditionTrue {
					fmt.Fprintf(&b, " [%s=%s %s: %s]", c.Type, c.Status, c.Reason, c.Message)
				}
			}
			b.WriteString("\n")
		}
	}
	pods := &corev1.PodList{}
	if err := h.Client.List(ctx, pods, ns, client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"}); err == nil {
		for _, pod := range pods.Items {
			// virt-controller names launcher Pods virt-launcher-<instance>-<suffix>.
			if !mine(strings.TrimPrefix(pod.Name, "virt-launcher-")) {
				continue
			}
			fmt.Fprintf(&b, "Pod %s node=%q phase=%s", pod.Name, pod.Spec.NodeName, pod.Status.Phase)
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
					fmt.Fprintf(&b, " [%s: %s]", c.Reason, c.Message)
				}
			}
			b.WriteString("\n")
		}
	}
	dvs := &cdiv1.DataVolumeList{}
	if err := h.Client.List(ctx, dvs, ns); err == nil {
		for _, dv := range dvs.Items {
			if mine(dv.Name) {
				fmt.Fprintf(&b, "DataVolume %s phase=%s progress=%s restarts=%d\n", dv.Name, dv.Status.Phase, dv.Status.Progress, dv.Status.RestartCount)
			}
		}
	}
	return b.String()
}

// watchMachines records the MachineHealthCheck's verdicts on the pool's
// Machines until the test ends, through a watch, so a verdict that lasts
// only until the Machine is deleted is not missed.
func watchMachines(t *testing.T, p pool) *harness.ConditionHistory {
	t.Helper()
	c, err := client.NewWithWatch(h.Config(), client.Options{Scheme: h.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return harness.WatchConditions(t, c, &clusterv1.MachineList{}, clusterv1.MachineHealthCheckSucceededCondition,
		client.InNamespace(p.Deployment().Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: p.Deployment().Name})
}

// timingLog collects what the suite measured, for docs/real-guests.md.
type timingLog struct {
	mu        sync.Mutex
	setUp     time.Duration
	joins     []guestJoin
	failures  []string
	diskBuses []string
	scenarios []scenarioTime
}

type guestJoin struct {
	scenario, vm      string
	seed              SeedKind
	imported          bool
	registered, ready time.Duration
}

func (j guestJoin) source() string {
	root := "containerDisk"
	if j.imported {
		root = "DataVolume import"
	}
	return fmt.Sprintf("%s, %s seed", root, j.seed)
}

type scenarioTime struct {
	name string
	wall time.Duration
}

func (l *timingLog) addJoin(j guestJoin) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.joins = append(l.joins, j)
}

func (l *timingLog) addFailure(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, s)
}

func (l *timingLog) addDiskBus(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.diskBuses = append(l.diskBuses, s)
}

// scenario records the test's wall time when it ends.
func (l *timingLog) scenario(t *testing.T) {
	t.Helper()
	start := time.Now()
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.scenarios = append(l.scenarios, scenarioTime{name: t.Name(), wall: time.Since(start)})
	})
}

// report is the measurements as Markdown, printed at the end of the run.
func (l *timingLog) report(accel string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Real-guest timings (%s, accelerator %s)\n\nSet-up (disk check, harness, control plane): %s\n\n",
		time.Now().UTC().Format(time.RFC3339), accel, l.setUp.Round(time.Second))
	b.WriteString("| scenario | guest | root disk, seed | QEMU start to Node registered | QEMU start to Node Ready |\n| --- | --- | --- | --- | --- |\n")
	for _, j := range l.joins {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", j.scenario, j.vm, j.source(), j.registered.Round(time.Second), j.ready.Round(time.Second))
	}
	if len(l.failures) > 0 {
		b.WriteString("\nFailed joins:\n\n")
		for _, f := range l.failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	if len(l.diskBuses) > 0 {
		b.WriteString("\nRoot disk buses:\n\n")
		for _, d := range l.diskBuses {
			fmt.Fprintf(&b, "- %s\n", d)
		}
	}
	b.WriteString("\n| scenario | wall time |\n| --- | --- |\n")
	for _, s := range l.scenarios {
		fmt.Fprintf(&b, "| %s | %s |\n", s.name, s.wall.Round(time.Second))
	}
	return b.String()
}
