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

package scenarios

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// The shipped Kairos ClusterClass and the pool name of its flavor.
const (
	kairosClusterClass = "kairos-workers"
	topologyPool       = "kairos"
)

// topologyNamespace makes a namespace for the test, named after it, with
// the shipped Kairos ClusterClass (the hosted control plane stand-in in
// place of Kamaji's), and waits until Cluster API has reconciled the class,
// as its Cluster webhook needs to validate variables against it.
func topologyNamespace(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	g.Expect(h.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	objs, err := harness.RenderClusterClass(kairosClusterClass, name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Apply(ctx, objs)).To(Succeed())
	g.Eventually(func(g Gomega) {
		class := &clusterv1.ClusterClass{}
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: kairosClusterClass}, class)).To(Succeed())
		g.Expect(class.Status.ObservedGeneration).To(Equal(class.Generation))
		g.Expect(conditions.IsTrue(class, clusterv1.ClusterClassVariablesReadyCondition)).To(BeTrue(), "ClusterClass variables ready")
	}, timeout, poll).Should(Succeed())
	return name
}

// topologyCluster renders the shipped topology-kairos flavor for a Cluster
// named tenant in the namespace, with the variables given.
func topologyCluster(t *testing.T, namespace string, vars map[string]string) *unstructured.Unstructured {
	t.Helper()
	all := map[string]string{
		"CLUSTER_NAME":       "tenant",
		"NAMESPACE":          namespace,
		"CONTROL_PLANE_HOST": "tenant." + namespace + ".example.com",
		"KUBERNETES_VERSION": harness.ControlPlaneKubernetesVersion,
	}
	for k, v := range vars {
		all[k] = v
	}
	objs, err := harness.RenderTemplate(harness.TopologyTemplate("kairos"), all)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].GetKind() != "Cluster" {
		t.Fatalf("the topology-kairos flavor renders one Cluster, not %d objects", len(objs))
	}
	return &objs[0]
}

// fixedSize turns the flavor's autoscaled pool into one of n replicas set
// through topology: Cluster API refuses replicas beside the autoscaler's
// size annotations.
func fixedSize(t *testing.T, cluster *unstructured.Unstructured, n int64) *unstructured.Unstructured {
	t.Helper()
	pools, _, err := unstructured.NestedSlice(cluster.Object, "spec", "topology", "workers", "machineDeployments")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		pool, _ := p.(map[string]any)
		pool["replicas"] = n
		annotations, _, _ := unstructured.NestedMap(pool, "metadata", "annotations")
		delete(annotations, clusterv1.AutoscalerMinSizeAnnotation)
		delete(annotations, clusterv1.AutoscalerMaxSizeAnnotation)
		if err := unstructured.SetNestedMap(pool, annotations, "metadata", "annotations"); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedSlice(cluster.Object, pools, "spec", "topology", "workers", "machineDeployments"); err != nil {
		t.Fatal(err)
	}
	return cluster
}

// newTopologyCluster creates the Cluster with its hosted control plane and
// releases it when the test ends.
func newTopologyCluster(t *testing.T, cluster *unstructured.Unstructured) *harness.WorkloadCluster {
	t.Helper()
	w, err := h.CreateTopologyCluster(context.Background(), cluster, harness.ClusterOptions{})
	if w != nil {
		t.Cleanup(func() { h.ReleaseCluster(w.Key) })
	}
	if err != nil {
		t.Fatalf("creating the topology Cluster: %v", err)
	}
	return w
}

// topologyMachineDeployment returns the pool's MachineDeployment, which
// topology names after the Cluster and the pool with a random suffix.
func topologyMachineDeployment(g Gomega, w *harness.WorkloadCluster) *clusterv1.MachineDeployment {
	list := &clusterv1.MachineDeploymentList{}
	g.Expect(h.Client.List(context.Background(), list, client.InNamespace(w.Key.Namespace), client.MatchingLabels{
		clusterv1.ClusterNameLabel:                          w.Key.Name,
		clusterv1.ClusterTopologyMachineDeploymentNameLabel: topologyPool,
	})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "topology made one MachineDeployment for pool %s", topologyPool)
	return &list.Items[0]
}

// TestTopologyPoolJoins: a Cluster of the shipped Kairos ClusterClass gets
// its pool from topology (templates cloned from the class with the
// variables patched in, a MachineDeployment and a MachineHealthCheck), and
// the pool joins with its tokens revoked.
func TestTopologyPoolJoins(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := topologyNamespace(t)
	w := newTopologyCluster(t, fixedSize(t, topologyCluster(t, ns, map[string]string{
		"WORKER_CPU_CORES": "3", "WORKER_MEMORY": "6Gi",
	}), 2))

	ms := poolOf(w).expectJoined(t, 2)
	expectBootsClean(g, ms)
	md := topologyMachineDeployment(g, w)
	g.Expect(md.Spec.Replicas).To(Equal(ptr.To[int32](2)))
	g.Expect(md.Spec.Template.Spec.Version).To(Equal(harness.ControlPlaneKubernetesVersion))

	template := &infrav1.KubeVirtMachineTemplate{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, template)).To(Succeed())
	g.Expect(template.Spec.Template.Spec.WorkerClass).NotTo(BeNil())
	g.Expect(template.Spec.Template.Spec.WorkerClass.Name).To(Equal("kairos"), "the workerClass variable's default")
	g.Expect(template.Spec.Template.Spec.WorkerClass.Version).To(Equal("v1.36"), "the minor of spec.topology.version")
	g.Expect(template.Labels).To(HaveKeyWithValue(infrav1.WorkerClassLabel, "kairos"))
	g.Expect(template.Spec.Template.Spec.CPU.Cores).To(BeEquivalentTo(3))
	g.Expect(template.Spec.Template.Spec.Memory.String()).To(Equal("6Gi"))
	config := &bootstrapv1.KairosConfigTemplate{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: md.Spec.Template.Spec.Bootstrap.ConfigRef.Name}, config)).To(Succeed())
	g.Expect(config.Spec.Template.Spec.NodeLabels).To(HaveKeyWithValue("node.cozystack.io/pool", topologyPool))
	for _, m := range ms {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(ctx, vmKey(m), vm)).To(Succeed())
		g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ContainerDisk.Image", platformImage)))
	}
	for _, n := range poolOf(w).nodes(g) {
		g.Expect(n.Labels).To(HaveKeyWithValue("node.cozystack.io/pool", topologyPool))
	}
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokens(g, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
	cluster := &clusterv1.Cluster{}
	g.Expect(h.Client.Get(ctx, w.Key, cluster)).To(Succeed())
	g.Expect(conditions.IsTrue(cluster, clusterv1.ClusterTopologyReconciledCondition)).To(BeTrue(), "TopologyReconciled")
	expectNoOrphans(t, w)
}

// TestTopologyWorkerClassChangeRollsOut: setting the Cluster's workerClass
// variable to another WorkerClass makes topology clone a new
// KubeVirtMachineTemplate with the class patched into
// spec.template.spec.workerClass (ours are immutable; its server-side-apply
// dry runs against the stored clone pass our webhook, which relabels the
// clone with its class) and roll the MachineDeployment out onto it; every
// Machine is replaced by one that boots the new class's image and joins,
// and the old clone goes.
func TestTopologyWorkerClassChangeRollsOut(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := topologyNamespace(t)
	w := newTopologyCluster(t, fixedSize(t, topologyCluster(t, ns, nil), 2))
	before := poolOf(w).expectJoined(t, 2)
	oldTemplate := topologyMachineDeployment(g, w).Spec.Template.Spec.InfrastructureRef.Name

	class := &workerclassv1.WorkerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "kairos-topology-v1-36-3-r2"},
		Spec: workerclassv1.WorkerClassSpec{
			Bootstrap: workerclassv1.BootstrapKairos,
			Image:     &workerclassv1.FixedImage{KubernetesVersion: "v1.36.3", Reference: customImage},
		},
	}
	g.Expect(h.Client.Create(ctx, class)).To(Succeed())
	t.Cleanup(func() { _ = h.Client.Delete(context.Background(), class) })
	cluster := &clusterv1.Cluster{}
	g.Expect(h.Client.Get(ctx, w.Key, cluster)).To(Succeed())
	patch := client.MergeFrom(cluster.DeepCopy())
	set := false
	for i, v := range cluster.Spec.Topology.Variables {
		if v.Name == "workerClass" {
			cluster.Spec.Topology.Variables[i].Value.Raw = []byte(`"` + class.Name + `"`)
			set = true
		}
	}
	g.Expect(set).To(BeTrue(), "the flavor sets the workerClass variable")
	g.Expect(h.Client.Patch(ctx, cluster, patch)).To(Succeed())

	var newTemplate string
	g.Eventually(func(g Gomega) {
		newTemplate = topologyMachineDeployment(g, w).Spec.Template.Spec.InfrastructureRef.Name
		g.Expect(newTemplate).NotTo(Equal(oldTemplate), "topology rotated the template")
	}, timeout, poll).Should(Succeed(), func() string { return describeTopology(w) })
	template := &infrav1.KubeVirtMachineTemplate{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: newTemplate}, template)).To(Succeed())
	g.Expect(template.Spec.Template.Spec.WorkerClass.Name).To(Equal(class.Name))
	g.Expect(template.Spec.Template.Spec.WorkerClass.Version).To(Equal("v1.36"))
	g.Expect(template.Labels).To(HaveKeyWithValue(infrav1.WorkerClassLabel, class.Name), "the class controller finds the clone by its class")

	expectReplacedOnto(t, w, before, customImage)
	g.Eventually(func() bool {
		err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldTemplate}, &infrav1.KubeVirtMachineTemplate{})
		return apierrors.IsNotFound(err)
	}, timeout, poll).Should(BeTrue(), "topology deletes the template no MachineSet uses")
	g.Expect(h.Client.Get(ctx, w.Key, cluster)).To(Succeed())
	g.Expect(conditions.IsTrue(cluster, clusterv1.ClusterTopologyReconciledCondition)).To(BeTrue(), "TopologyReconciled: %s",
		conditions.GetMessage(cluster, clusterv1.ClusterTopologyReconciledCondition))
	expectNoOrphans(t, w)
}

// TestTopologyScaleFromZero: the flavor's pool, whose topology leaves
// replicas to the autoscaler and sets its bounds as topology-managed
// annotations, starts at
// the min size 0 with no Machine; its template advertises its capacity;
// once the autoscaler scales the MachineDeployment, topology keeps the
// autoscaler's replicas and the machines join.
func TestTopologyScaleFromZero(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := topologyNamespace(t)
	cluster := topologyCluster(t, ns, map[string]string{
		"WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": "3", "WORKER_CPU_CORES": "4", "WORKER_MEMORY": "8Gi",
	})
	w := newTopologyCluster(t, cluster)

	template := &infrav1.KubeVirtMachineTemplate{}
	g.Eventually(func(g Gomega) {
		md := topologyMachineDeployment(g, w)
		g.Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMinSizeAnnotation, "0"))
		g.Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMaxSizeAnnotation, "3"))
		g.Expect(md.Annotations).To(HaveKeyWithValue("capacity.cluster-autoscaler.kubernetes.io/labels", "node.cozystack.io/pool="+topologyPool))
		g.Expect(md.Spec.Replicas).To(Equal(ptr.To[int32](0)), "the MachineDeployment starts at the min size")
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, template)).To(Succeed())
		g.Expect(template.Status.Resolved).NotTo(BeNil())
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })
	g.Expect(template.Status.Capacity.Cpu().String()).To(Equal("4"))
	g.Expect(template.Status.Capacity.Memory().String()).To(Equal("8Gi"))
	g.Expect(template.Status.NodeInfo).To(Equal(infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"}))
	g.Expect(poolOf(w).machines(g)).To(BeEmpty())

	// What the autoscaler does: it scales the MachineDeployment itself.
	md := topologyMachineDeployment(g, w)
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To[int32](2)
	g.Expect(h.Client.Patch(ctx, md, patch)).To(Succeed())

	expectBootsClean(g, poolOf(w).expectJoined(t, 2))
	g.Expect(topologyMachineDeployment(g, w).Spec.Replicas).To(Equal(ptr.To[int32](2)), "topology left the autoscaler's replicas")
	for _, n := range poolOf(w).nodes(g) {
		for name, want := range template.Status.Capacity {
			got := n.Status.Capacity[name]
			g.Expect(got.Cmp(want)).To(BeZero(), "Node %s has %s %s, the template advertises %s", n.Name, name, got.String(), want.String())
		}
	}
	expectNoOrphans(t, w)
}

// TestTopologyVariableOutsideItsSchemaIsRefused: Cluster API's Cluster
// webhook refuses a variable value the ClusterClass's schema does not
// allow, naming the variable.
func TestTopologyVariableOutsideItsSchemaIsRefused(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ns := topologyNamespace(t)
	err := h.Client.Create(context.Background(), topologyCluster(t, ns, map[string]string{"WORKER_CPU_CORES": "0"}))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refused as invalid: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.topology.variables[cpuCores].value"))
	g.Expect(err.Error()).To(ContainSubstring("should be greater than or equal to 1"))
}

// warnings collects the apiserver's warnings to a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// TestTopologyNamingAMissingClusterClass: Cluster API v1.14 accepts a
// Cluster whose ClusterClass does not exist (it may be applied next) with a
// warning naming the class, and reports TopologyReconciled False naming it
// until the class exists.
func TestTopologyNamingAMissingClusterClass(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := topologyNamespace(t)
	cluster := topologyCluster(t, ns, nil)
	g.Expect(unstructured.SetNestedField(cluster.Object, "no-such-class", "spec", "topology", "classRef", "name")).To(Succeed())

	seen := &warnings{}
	cfg := h.Config()
	cfg.WarningHandler = seen
	c, err := client.New(cfg, client.Options{Scheme: h.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, cluster)).To(Succeed())
	t.Cleanup(func() { _ = h.Client.Delete(context.Background(), cluster) })
	g.Expect(seen.get()).To(ContainElement(ContainSubstring("ClusterClass " + ns + "/no-such-class")))

	g.Eventually(func(g Gomega) {
		current := &clusterv1.Cluster{}
		g.Expect(h.Client.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		condition := conditions.Get(current, clusterv1.ClusterTopologyReconciledCondition)
		g.Expect(condition).NotTo(BeNil())
		g.Expect(condition.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition.Reason).To(Equal(clusterv1.ClusterTopologyReconciledFailedReason))
		g.Expect(condition.Message).To(ContainSubstring("no-such-class"))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		list := &clusterv1.MachineDeploymentList{}
		g.Expect(h.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}, 2*time.Second, poll).Should(Succeed())
}

// describeTopology adds the Cluster's topology variables and
// TopologyReconciled condition to what describe says of the pool.
func describeTopology(w *harness.WorkloadCluster) string {
	cluster := &clusterv1.Cluster{}
	if err := h.Client.Get(context.Background(), w.Key, cluster); err != nil {
		return describe(w) + "\nCluster: " + err.Error()
	}
	var b strings.Builder
	b.WriteString(describe(w))
	for _, v := range cluster.Spec.Topology.Variables {
		fmt.Fprintf(&b, "\nvariable %s=%s", v.Name, string(v.Value.Raw))
	}
	if c := conditions.Get(cluster, clusterv1.ClusterTopologyReconciledCondition); c != nil {
		fmt.Fprintf(&b, "\nTopologyReconciled=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return b.String()
}
