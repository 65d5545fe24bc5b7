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

package guest

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// Short heartbeat timings for the kubelet tests; the bounds of Eventually
// stay generous.
const (
	testHeartbeatInterval = 100 * time.Millisecond
	testReportFrequency   = time.Second
)

// kubeletRun is a simulator running only kubelets (no instance controller),
// its requests to the workload apiserver logged.
type kubeletRun struct {
	sim      *Simulator
	requests *requests.Log
}

// runKubelets starts a simulator's heartbeat loop against the shared
// workload apiserver; it stops with the test.
func runKubelets(t *testing.T, opts Options) *kubeletRun {
	t.Helper()
	r := &kubeletRun{sim: New(opts), requests: &requests.Log{}}
	if err := r.sim.AddCluster(workload.Endpoint, r.requests.WrapConfig(workload.Config)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.sim.heartbeats(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// requestCounts counts the kubelets' requests so far by verb and resource
// ("update leases", "patch nodes/status", ...).
func (r *kubeletRun) requestCounts() map[string]int {
	counts := map[string]int{}
	for _, req := range r.requests.Requests(nil) {
		counts[req.Verb+" "+req.Resource]++
	}
	return counts
}

// start starts the kubelet of a new instance (UID uid) serving the Node
// name, as a join or a restart on a persistent disk does.
func (r *kubeletRun) start(t *testing.T, name string, uid types.UID) {
	t.Helper()
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubelets", Name: name, UID: uid},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
			CPU:    &kubevirtv1.CPU{Cores: 1},
			Memory: &kubevirtv1.Memory{Guest: resource.NewQuantity(1<<30, resource.BinarySI)},
		}},
	}
	id := &joinResult{nodeName: name, cluster: r.sim.cluster(workload.Endpoint), providerID: "kubevirt://" + name, labels: map[string]string{}, maxPods: 110}
	if err := r.sim.startKubelet(context.Background(), vmi, id, Image{KubernetesVersion: "v1.36.3", OSImage: "Kairos"}, resource.MustParse("10Gi")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = workload.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// stop stops the kubelet of instance uid.
func (r *kubeletRun) stop(name string, uid types.UID) {
	r.sim.instanceGone(client.ObjectKey{Namespace: "kubelets", Name: name}, uid)
}

// kubelets is how many kubelets (running, or stopped and not yet judged)
// the simulator tracks.
func (r *kubeletRun) kubelets() int {
	r.sim.mu.Lock()
	defer r.sim.mu.Unlock()
	return len(r.sim.kubelets)
}

func getLease(g Gomega, name string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	g.Expect(workload.Client.Get(context.Background(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, l)).To(Succeed())
	return l
}

func readyCondition(g Gomega, n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	g.Expect(n.Status.Conditions).To(ContainElement(HaveField("Type", corev1.NodeReady)))
	return corev1.NodeCondition{}
}

// TestKubeletRenewsItsLeaseWithoutReadingItAndLeavesAnUnchangedStatusAlone:
// between status reports a kubelet only updates the Lease it last wrote;
// it neither reads the Lease or the Node nor writes the Node.
func TestKubeletRenewsItsLeaseWithoutReadingItAndLeavesAnUnchangedStatusAlone(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := runKubelets(t, Options{HeartbeatInterval: testHeartbeatInterval, NodeStatusReportFrequency: time.Hour})
	r.start(t, "lease-only-0", "lease-only-0-a")
	registered := r.requestCounts()
	renewedAt := getLease(g, "lease-only-0").Spec.RenewTime.Time

	g.Eventually(func(g Gomega) {
		g.Expect(r.requestCounts()["update leases"]).To(BeNumerically(">=", registered["update leases"]+10))
	}, timeout, poll).Should(Succeed())
	g.Expect(getLease(g, "lease-only-0").Spec.RenewTime.Time).To(BeTemporally(">", renewedAt))
	now := r.requestCounts()
	for _, request := range []string{"get leases", "list leases", "create leases", "get nodes", "list nodes", "update nodes", "update nodes/status", "patch nodes/status"} {
		g.Expect(now[request]).To(Equal(registered[request]), "%s requests after registration", request)
	}
}

// TestKubeletReportsAnUnchangedStatusOnceTheReportFrequencyPassed: the
// status is posted again, unchanged but for the heartbeat times, every
// NodeStatusReportFrequency, without reading the Node.
func TestKubeletReportsAnUnchangedStatusOnceTheReportFrequencyPassed(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := runKubelets(t, Options{HeartbeatInterval: testHeartbeatInterval, NodeStatusReportFrequency: testReportFrequency})
	r.start(t, "report-0", "report-0-a")
	registered := r.requestCounts()
	first := getNode(g, "report-0")
	firstReady := readyCondition(g, first)

	g.Eventually(func(g Gomega) {
		g.Expect(r.requestCounts()["patch nodes/status"]).To(BeNumerically(">=", registered["patch nodes/status"]+2))
	}, timeout, poll).Should(Succeed())
	now := r.requestCounts()
	g.Expect(now["get nodes"]).To(Equal(registered["get nodes"]), "a report does not read the Node")
	g.Expect(now["list nodes"]).To(Equal(registered["list nodes"]), "nor list the Nodes")
	g.Expect(now["update nodes/status"]).To(Equal(registered["update nodes/status"]))
	// Every report comes with a Lease renewal, and renewals come between
	// reports.
	g.Expect(now["update leases"] - registered["update leases"]).To(BeNumerically(">", now["patch nodes/status"]-registered["patch nodes/status"]))

	reported := getNode(g, "report-0")
	g.Expect(reported.Status.Conditions).To(HaveLen(len(first.Status.Conditions)))
	for _, c := range reported.Status.Conditions {
		g.Expect(c.LastHeartbeatTime.Time).To(BeTemporally(">", firstReady.LastHeartbeatTime.Time), "%s heartbeat", c.Type)
	}
	ready := readyCondition(g, reported)
	g.Expect(ready.Status).To(Equal(corev1.ConditionTrue))
	g.Expect(ready.Reason).To(Equal(firstReady.Reason))
	g.Expect(ready.LastTransitionTime.Time).To(BeTemporally("==", firstReady.LastTransitionTime.Time))
	g.Expect(apiequality.Semantic.DeepEqual(reported.Status.Capacity, first.Status.Capacity)).To(BeTrue(), "capacity %v, registered %v", reported.Status.Capacity, first.Status.Capacity)
}

// TestKubeletPostsAChangedStatusAtOnce: a kubelet restarted on the disk of
// a Node marked Unknown posts Ready at once, not at its next report.
func TestKubeletPostsAChangedStatusAtOnce(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := runKubelets(t, Options{HeartbeatInterval: testHeartbeatInterval, NodeStatusReportFrequency: time.Hour, NodeMonitorGracePeriod: 200 * time.Millisecond})
	r.start(t, "changed-0", "changed-0-a")
	r.stop("changed-0", "changed-0-a")
	g.Eventually(func(g Gomega) {
		g.Expect(readyStatus(getNode(g, "changed-0"))).To(Equal(corev1.ConditionUnknown))
		g.Expect(r.kubelets()).To(BeZero())
	}, timeout, poll).Should(Succeed())
	unknown := r.requestCounts()

	r.start(t, "changed-0", "changed-0-b")
	n := getNode(g, "changed-0")
	g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
	g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", corev1.TaintNodeUnreachable)))
	g.Expect(r.requestCounts()["update nodes/status"]).To(Equal(unknown["update nodes/status"] + 1))
}

// TestNodeMarkedUnknownUnderARunningKubeletIsReadyAgain: the mark of a
// stopped instance's Node can land after the new instance's kubelet
// registered (the race the persistent-disk rejoin meets). That kubelet
// reports again and the node lifecycle lifts the unreachable taints.
func TestNodeMarkedUnknownUnderARunningKubeletIsReadyAgain(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := runKubelets(t, Options{HeartbeatInterval: testHeartbeatInterval, NodeStatusReportFrequency: time.Hour})
	r.start(t, "late-mark-0", "late-mark-0-b")
	stopped := &kubelet{cluster: r.sim.cluster(workload.Endpoint), node: "late-mark-0"}
	g.Expect(r.sim.markUnknown(context.Background(), stopped)).To(Succeed())
	n := getNode(g, "late-mark-0")
	g.Expect(readyStatus(n)).To(Equal(corev1.ConditionUnknown))
	g.Expect(n.Spec.Taints).To(ContainElement(HaveField("Key", corev1.TaintNodeUnreachable)))

	r.sim.mu.Lock()
	r.sim.reportAgainLocked(stopped)
	r.sim.mu.Unlock()
	g.Eventually(func(g Gomega) {
		n := getNode(g, "late-mark-0")
		g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
		g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", corev1.TaintNodeUnreachable)))
	}, timeout, poll).Should(Succeed())
}

// TestNodeOfAKubeletRestartedWithinTheGracePeriodStaysReady: the node
// lifecycle controller judges a Node by its Lease, which the new
// instance's kubelet renews, so the stopped kubelet's Node is not marked
// Unknown.
func TestNodeOfAKubeletRestartedWithinTheGracePeriodStaysReady(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := runKubelets(t, Options{HeartbeatInterval: testHeartbeatInterval, NodeStatusReportFrequency: time.Hour, NodeMonitorGracePeriod: 3 * time.Second})
	r.start(t, "restarted-0", "restarted-0-a")
	r.stop("restarted-0", "restarted-0-a")
	r.start(t, "restarted-0", "restarted-0-b")
	g.Eventually(r.kubelets, timeout, poll).Should(Equal(1), "the stopped kubelet is dropped after the grace period")
	n := getNode(g, "restarted-0")
	g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
	g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", corev1.TaintNodeUnreachable)))
}

// TestKubeletRecoversItsLease: when the Lease it last wrote is gone or was
// written by someone else, the kubelet reads (or creates) the Lease and
// goes back to plain updates.
func TestKubeletRecoversItsLease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper func(g Gomega, lease *coordinationv1.Lease)
		// fallback is the request the kubelet falls back to.
		fallback string
	}{
		{
			name: "deleted",
			tamper: func(g Gomega, l *coordinationv1.Lease) {
				g.Expect(workload.Client.Delete(context.Background(), l)).To(Succeed())
			},
			fallback: "create leases",
		},
		{
			name: "written-by-another-client",
			tamper: func(g Gomega, l *coordinationv1.Lease) {
				l.Annotations = map[string]string{"example.com/touched": "true"}
				g.Expect(workload.Client.Update(context.Background(), l)).To(Succeed())
			},
			fallback: "get leases",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			name := "lease-" + c.name
			r := runKubelets(t, Options{HeartbeatInterval: testHeartbeatInterval, NodeStatusReportFrequency: time.Hour})
			r.start(t, name, types.UID(name+"-a"))
			before := r.requestCounts()
			g.Eventually(func(g Gomega) { c.tamper(g, getLease(g, name)) }, timeout, poll).Should(Succeed())
			tampered := time.Now()

			g.Eventually(func(g Gomega) {
				g.Expect(r.requestCounts()[c.fallback]).To(BeNumerically(">", before[c.fallback]))
				l := getLease(g, name)
				g.Expect(l.Spec.RenewTime.Time).To(BeTemporally(">", tampered))
				g.Expect(l.OwnerReferences).To(ConsistOf(HaveField("UID", getNode(g, name).UID)))
			}, timeout, poll).Should(Succeed())
			recovered := r.requestCounts()
			g.Eventually(func(g Gomega) {
				g.Expect(r.requestCounts()["update leases"]).To(BeNumerically(">=", recovered["update leases"]+5))
			}, timeout, poll).Should(Succeed())
			g.Expect(r.requestCounts()["get leases"]).To(Equal(recovered["get leases"]), "renewals after the recovery do not read the Lease")
		})
	}
}
