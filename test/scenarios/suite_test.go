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

// Package scenarios runs the scenarios of the Kairos pool on KubeVirt
// inside upstream Cluster API (test/harness): join, replacement, scale from
// zero, class upgrades and deletion. Each scenario asserts the end state and
// that nothing is left behind.
package scenarios

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/infra"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

// Images the platform and the custom classes of the scenarios use, and
// what the node simulator boots from them.
const (
	platformImage = "registry.example.com/cozystack/kairos-worker@sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
	rebuiltImage  = "registry.example.com/cozystack/kairos-worker@sha256:b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
	customImage   = "registry.example.com/tenant/kairos-worker@sha256:c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"
	importedImage = "https://images.example.com/kairos-worker-v1.36.3.raw"
	// gpuDevice is the GPU the infrastructure node offers.
	gpuDevice = "nvidia.com/GA102GL_A10"
	// drainNode and drainClaimsNode are the infrastructure nodes the drain
	// scenarios drain, one each so that they can run in parallel, and
	// drainNodeLabel their label and taint (values in drainNodes).
	drainNode       = "sim-infra-drain"
	drainClaimsNode = "sim-infra-drain-claims"
	drainNodeLabel  = "harness.cozystack.io/drain"
)

// drainNodes are the drain nodes' values of drainNodeLabel.
var drainNodes = map[string]string{drainNode: "true", drainClaimsNode: "claims"}

// drainInfraNode is the infrastructure node of that name the drain
// scenarios drain: labelled and tainted with drainNodeLabel.
func drainInfraNode(name string) kubevirtsim.InfraNode {
	value := drainNodes[name]
	return kubevirtsim.InfraNode{
		Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "sim-zone-a", drainNodeLabel: value},
		Taints: []corev1.Taint{{Key: drainNodeLabel, Value: value, Effect: corev1.TaintEffectNoSchedule}},
	}
}

// importedOS is what importedImage boots, and the clones of its shared
// imports.
var importedOS = nodesim.Image{KubernetesVersion: "v1.36.3", OSImage: "Kairos v3.5.3 (imported)"}

// suiteImages is what the node simulator boots from each image.
var suiteImages = map[string]nodesim.Image{
	platformImage: {KubernetesVersion: "v1.36.3", OSImage: "Kairos v3.5.3 (Ubuntu 24.04)"},
	rebuiltImage:  {KubernetesVersion: "v1.36.3", OSImage: "Kairos v3.5.3 (Ubuntu 24.04, rebuilt)"},
	customImage:   {KubernetesVersion: "v1.36.3", OSImage: "Tenant Kairos v3.5.3"},
	importedImage: importedOS,
}

// suitePlatform is the suite's platform configuration.
func suitePlatform(p *workerclassv1.WorkerPlatformSpec) {
	p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: "v1.36.3"}}
	p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: platformImage}}
	p.TalosFactory.Version = "v1.13.6"
	p.TalosFactory.SchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
}

var (
	h *harness.Harness
	// logger is the suite's scanned logger, for harnesses a scenario starts
	// of its own.
	logger  logr.Logger
	verbose = flag.Bool("harness.log", false, "print the controllers' logs")
)

const (
	timeout = 2 * time.Minute
	poll    = 200 * time.Millisecond
)

// defaultParallel is how many scenarios run at once unless -test.parallel
// says otherwise: they mostly wait for timeouts, so more than the two cores
// CI has.
const defaultParallel = "5"

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", defaultParallel)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every line of every component, at every verbosity, is read for
	// tokens, private keys and bootstrap data; the suite fails on any.
	scanner, log, closeLog, err := harness.NewSuiteLogScanner(*verbose, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "opening the suite's log:", err)
		return 1
	}
	defer closeLog()
	logger = log
	defer func() {
		if scanner.Report(os.Stderr) {
			code = 1
		}
	}()
	// The management apiserver's audit log says what our providers called;
	// every verb their roles grant that no scenario used fails the suite,
	// unless testdata/unexercised-rbac.yaml says why the role keeps it.
	// Read once the harness stopped (deferred before its Stop): clusters
	// released in the background call until then.
	auditDir, err := os.MkdirTemp("", "integration-audit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating the audit log's directory:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(auditDir) }()
	defer func() {
		if h == nil {
			return
		}
		usage, err := h.RoleUsage()
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: reading what our providers called:", err)
			code = 1
			return
		}
		justified, err := harness.ReadUnexercised("testdata/unexercised-rbac.yaml")
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			code = 1
			return
		}
		report, problems := usage.Check(justified)
		fmt.Fprint(os.Stderr, report)
		// A partial or failed run uses less than the roles need.
		whole := code == 0 && !testing.Short()
		for _, f := range []string{"test.run", "test.skip", "test.list"} {
			if fl := flag.Lookup(f); fl != nil && fl.Value.String() != "" {
				whole = false
			}
		}
		switch {
		case len(problems) == 0:
			fmt.Fprintln(os.Stderr, "RBAC use: every grant was used or is justified")
		case !whole:
			fmt.Fprintf(os.Stderr, "RBAC use: not checked, since not every scenario ran and passed (%d findings)\n", len(problems))
		default:
			fmt.Fprintf(os.Stderr, "FAIL: %d findings on our providers' roles (justify in test/scenarios/testdata/unexercised-rbac.yaml or drop the +kubebuilder:rbac marker):\n%s\n", len(problems), strings.Join(problems, "\n"))
			code = 1
		}
	}()
	suitePlacement := placement.DefaultPolicy()
	suitePlacement.DeviceNames = []string{gpuDevice, "nvidia.com/AD102GL_L40S"}
	suitePlacement.TolerationKeys = append(suitePlacement.TolerationKeys, drainNodeLabel)
	suitePlacement.NodeAffinityKeys = append(suitePlacement.NodeAffinityKeys, drainNodeLabel)
	h, err = harness.Start(ctx, harness.Options{
		Logger:        log,
		AuditLog:      filepath.Join(auditDir, "audit.log"),
		WorkerClasses: true,
		Topology:      true,
		Images:        suiteImages,
		// The hoster lets tenants ask for the GPUs of its node (and one it
		// lacks, which KubeVirt's rules refuse first) and select and
		// tolerate the drained node.
		Placement: &suitePlacement,
		// One infrastructure node, with GPUs for the pools that ask for
		// them.
		Infra: infra.Options{
			Hosts: kubevirtsim.Options{Nodes: []kubevirtsim.InfraNode{
				{
					Name: "sim-infra-0", Labels: map[string]string{corev1.LabelTopologyZone: "sim-zone-a"},
					Allocatable: corev1.ResourceList{gpuDevice: resource.MustParse("8")},
				},
				// The nodes the drain scenarios drain; tainted so that only
				// their pools land there.
				drainInfraNode(drainNode),
				drainInfraNode(drainClaimsNode),
			}},
			// CDI takes a moment before a DataVolume's claim exists, as on
			// a real cluster: virt-controller sees the instance's claim
			// missing first.
			CDI: cdisim.Options{ClaimDelay: 3 * time.Second},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the harness:", err)
		return 1
	}
	defer func() {
		if err := h.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the harness:", err)
		}
	}()
	if err := h.ConfigurePlatform(ctx, suitePlatform); err != nil {
		fmt.Fprintln(os.Stderr, "configuring the platform:", err)
		return 1
	}
	return m.Run()
}

// newCluster creates a workload cluster in a namespace of its own.
func newCluster(t *testing.T, opts harness.ClusterOptions) *harness.WorkloadCluster {
	t.Helper()
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.TrimRight(name, "-")
	w, err := h.CreateCluster(context.Background(), client.ObjectKey{Namespace: name, Name: "tenant"}, opts)
	if err != nil {
		t.Fatalf("creating the workload cluster: %v", err)
	}
	// Delete it in the background once the scenario is done, rather than
	// keep its apiserver running for the rest of the suite.
	t.Cleanup(func() { h.ReleaseCluster(w.Key) })
	return w
}

// pool is one pool of the example Kairos template and the suite's ways
// to apply and watch it; test/qemu's pool has the same shape.
type pool struct {
	harness.Pool
}

// poolOf is the cluster's pool: the example Kairos pool's default
// MachineDeployment, and every Machine and Node of the cluster.
func poolOf(w *harness.WorkloadCluster) pool {
	return pool{harness.Pool{Cluster: w.Key}}
}

// poolDefaults are the suite's values of the example pool's variables:
// MachineHealthCheck timeouts short enough for a test and long enough that
// a healthy simulated node never trips them. Until Cluster API's Machine
// controller has mirrored the provider's first Ready condition, it reports
// a new Machine's InfrastructureReady False (reason NotReady, "status.
// initialization.provisioned is false"): the infrastructure timeout must
// outlast that on a machine busy with other builds, where it took over 5 s.
func poolDefaults() map[string]string {
	return map[string]string{
		"NODE_STARTUP_TIMEOUT_SECONDS":          "60",
		"NODE_UNHEALTHY_TIMEOUT_SECONDS":        "5",
		"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": strconv.Itoa(int(infrastructureFailedTimeout / time.Second)),
	}
}

// infrastructureFailedTimeout is how long the suite's health checks let a
// Machine's infrastructure report False before they remediate it.
const infrastructureFailedTimeout = 20 * time.Second

// render renders the pool with the scenario's variables over the suite's.
func (p pool) render(t *testing.T, vars map[string]string) []unstructured.Unstructured {
	t.Helper()
	return p.MustRender(t, poolDefaults(), vars)
}

// apply creates the pool's objects, each edit applied first.
func (p pool) apply(t *testing.T, vars map[string]string, edits ...func(*unstructured.Unstructured)) {
	t.Helper()
	if err := h.Apply(context.Background(), harness.Edited(p.render(t, vars), edits...)); err != nil {
		t.Fatal(err)
	}
}

// machines lists the pool's Machines, by name.
func (p pool) machines(g Gomega) []clusterv1.Machine {
	ms, err := h.PoolMachines(context.Background(), p.Pool)
	g.Expect(err).NotTo(HaveOccurred())
	return ms
}

// nodes lists the workload Nodes of the pool.
func (p pool) nodes(g Gomega) []corev1.Node {
	ns, err := h.PoolNodes(context.Background(), p.Pool)
	g.Expect(err).NotTo(HaveOccurred())
	return ns
}

// expectJoined waits until the pool has joined with exactly n Machines
// (harness.PoolJoined).
func (p pool) expectJoined(t *testing.T, n int) []clusterv1.Machine {
	t.Helper()
	return p.expectJoinedIn(t, h, n)
}

// expectJoinedIn is expectJoined in a harness other than the suite's.
func (p pool) expectJoinedIn(t *testing.T, in *harness.Harness, n int) []clusterv1.Machine {
	t.Helper()
	var ms []clusterv1.Machine
	NewWithT(t).Eventually(func() (err error) {
		ms, err = in.PoolJoined(context.Background(), p.Pool, n)
		return err
	}, timeout, poll).Should(Succeed(), func() string { return in.Describe(context.Background(), p.Cluster) })
	return ms
}

// expectBootsClean checks that every simulated boot of the cluster's
// machines joined without warnings and wrote Cluster API's sentinel. The
// simulator records the join just after the kubelet registered its Node,
// so a Ready Node may briefly precede the record.
func expectBootsClean(g Gomega, ms []clusterv1.Machine) {
	for _, m := range ms {
		key := client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}
		g.Eventually(func(g Gomega) {
			r, ok := h.Nodes.Boot(key)
			g.Expect(ok).To(BeTrue(), "Machine %s never booted", m.Name)
			g.Expect(r.Phase).To(Equal(nodesim.PhaseJoined))
		}, timeout, poll).Should(Succeed())
		r, _ := h.Nodes.Boot(key)
		g.Expect(r.SentinelWritten).To(BeTrue())
		g.Expect(r.Warnings).To(BeEmpty())
	}
}

// bootstrapTokens lists the bootstrap token Secrets left in the workload
// cluster.
func bootstrapTokens(g Gomega, w *harness.WorkloadCluster) []string {
	return bootstrapTokensIn(g, h, w)
}

// bootstrapTokensIn is bootstrapTokens in a harness other than the suite's.
func bootstrapTokensIn(g Gomega, in *harness.Harness, w *harness.WorkloadCluster) []string {
	tokens, err := in.PoolJoinTokens(context.Background(), poolOf(w).Pool)
	g.Expect(err).NotTo(HaveOccurred())
	return tokens
}

// describe summarizes the cluster's machines, VMs and nodes for failure
// messages.
func describe(w *harness.WorkloadCluster) string {
	return h.Describe(context.Background(), w.Key)
}

// expectNoOrphans checks that everything the pool's machines created
// belongs to a current Machine (harness.Leftovers: KairosConfigs,
// KubeVirtMachines, VirtualMachines, instances, DataVolumes, claims, Secrets
// and ConfigMaps in the management cluster, and Nodes in the workload
// cluster). It is the "nothing left behind" half of every scenario.
func expectNoOrphans(t *testing.T, w *harness.WorkloadCluster) {
	t.Helper()
	expectNoOrphansIn(t, h, w)
}

// expectNoOrphansIn is expectNoOrphans in a harness other than the suite's.
func expectNoOrphansIn(t *testing.T, in *harness.Harness, w *harness.WorkloadCluster) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		left, err := in.Leftovers(context.Background(), w.Key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
	}, timeout, poll).Should(Succeed(), func() string { return in.Describe(context.Background(), w.Key) })
}
