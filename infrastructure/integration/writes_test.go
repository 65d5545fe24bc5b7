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

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// controllerWrites records the writes the controllers send to the API
// server, so tests can count them per machine. Reads are cache hits or
// direct reads and are not recorded; neither are lists and watches.
var controllerWrites = &writeLog{Log: &requests.Log{Keep: requests.Writes}}

// writeLog selects from the recorded writes.
type writeLog struct{ *requests.Log }

// of returns the writes to one machine's KubeVirtMachine.
func (l *writeLog) of(kvm client.Object) []requests.Request {
	return l.Requests(func(w requests.Request) bool {
		return w.Namespace == kvm.GetNamespace() && w.Name == kvm.GetName() && strings.HasPrefix(w.Resource, "kubevirtmachines")
	})
}

// in returns the writes to objects of one namespace.
func (l *writeLog) in(namespace string) []requests.Request {
	return l.Requests(func(w requests.Request) bool { return w.Namespace == namespace })
}

func names(writes []requests.Request) []string { return requests.Strings(writes) }

// describeWrites lists the machine's writes with their bodies, for a
// failure message.
func describeWrites(kvm client.Object) string {
	var b strings.Builder
	for i, w := range controllerWrites.of(kvm) {
		fmt.Fprintf(&b, "\n%d. %s %s", i+1, w, w.Body)
	}
	return b.String()
}

// reportedConditions returns the conditions of each status patch the
// controllers sent for the machine, in order: what the machine reported,
// however briefly. Cluster API's patch helper sends the whole list.
func reportedConditions(kvm client.Object) [][]metav1.Condition {
	var out [][]metav1.Condition
	for _, w := range controllerWrites.of(kvm) {
		if w.Resource != "kubevirtmachines/status" {
			continue
		}
		var body struct {
			Status struct {
				Conditions []metav1.Condition `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(w.Body), &body); err != nil || len(body.Status.Conditions) == 0 {
			continue
		}
		out = append(out, body.Status.Conditions)
	}
	return out
}

// conditionMatching matches a condition's type, status and reason, and its
// message with message.
func conditionMatching(conditionType string, status metav1.ConditionStatus, reason string, message types.GomegaMatcher) types.GomegaMatcher {
	return And(HaveField("Type", conditionType), HaveField("Status", status), HaveField("Reason", reason), HaveField("Message", message))
}

// TestOneMachineLifecycleWrites follows one container-disk machine, as the
// scale benchmark's pool makes them, from creation while its bootstrap data
// is not ready yet, through KubeVirt's virt-controller and the node
// stand-ins starting its instance, to its node joining, and pins the
// provider's writes to its KubeVirtMachine:
// the finalizer (Cluster API's finalizers.EnsureFinalizer), Paused=False
// (its paused.EnsurePausedCondition), the providerID (Cluster API's patch
// helper, in a reconcile of its own), and the status
// of each lifecycle step (waiting for bootstrap data, VM created,
// provisioned), where the patch helper sends a step's conditions and its
// other status fields (the first observedGeneration, the provisioned
// fields) as two patches.
func TestOneMachineLifecycleWrites(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	var machine *clusterv1.Machine
	var bootstrapSecret string
	// The Machine's bootstrap config, which controls its data as the
	// bootstrap provider writes it (the suite's garbage collector would
	// delete data whose owner does not exist).
	config := &unstructured.Unstructured{}
	config.SetGroupVersionKind(schema.GroupVersionKind{Group: "bootstrap.cozystack.io", Version: "v1alpha1", Kind: "KairosConfig"})
	config.SetNamespace(tc.namespace)
	config.SetName("counted")
	g.Expect(c.Create(ctx, config)).To(Succeed())
	kvm := tc.machine(t, "counted", containerDiskSpec(), func(m *clusterv1.Machine, _ *infrav1.KubeVirtMachine, s *corev1.Secret) {
		// The bootstrap provider has not rendered yet.
		m.Spec.Bootstrap = clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: "bootstrap.cozystack.io", Kind: "KairosConfig", Name: m.Name}}
		s.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(config, config.GroupVersionKind())}
		// Infrastructure node infra-a is in this zone.
		m.Spec.FailureDomain = zoneA
		machine, bootstrapSecret = m, s.Name
	})

	// Waiting for the bootstrap data.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason)
		g.Expect(kvm.Finalizers).To(ContainElement(infrav1.MachineFinalizer))
		g.Expect(kvm.Spec.ProviderID).To(Equal("kubevirt://counted"))
		g.Expect(kvm.Status.ObservedGeneration).To(Equal(kvm.Generation))
		for _, c := range kvm.Status.Conditions {
			g.Expect(c.ObservedGeneration).To(Equal(kvm.Generation), "condition %s", c.Type)
		}
	}).Should(Succeed())
	waiting := []string{
		// The finalizer (Cluster API's finalizer helper), Paused=False
		// (its paused helper), then the providerID, in one reconcile
		// before anything is created.
		"management patch kubevirtmachines " + tc.namespace + "/counted",
		"management patch kubevirtmachines/status " + tc.namespace + "/counted",
		"management patch kubevirtmachines " + tc.namespace + "/counted",
		// The waiting conditions (Paused=False at the generation the
		// providerID made), then the observed generation.
		"management patch kubevirtmachines/status " + tc.namespace + "/counted",
		"management patch kubevirtmachines/status " + tc.namespace + "/counted",
	}
	settledWrites(t, kvm, waiting)

	// The bootstrap provider renders; KubeVirt starts the VM.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
	machine.Spec.Bootstrap.DataSecretName = ptr.To(bootstrapSecret)
	g.Expect(c.Update(ctx, machine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(kvm.Status.Addresses).NotTo(BeEmpty())
		g.Expect(kvm.Status.FailureDomain).To(Equal(zoneA))
	}).Should(Succeed(), func() string { return describeWrites(kvm) + describe(tc.namespace) })
	provisioned := append(waiting,
		// The VM exists: its conditions.
		"management patch kubevirtmachines/status "+tc.namespace+"/counted",
		// The instance runs: conditions, then addresses, nodeName,
		// failureDomain, provisionedInstanceUID and
		// initialization.provisioned. The states KubeVirt moves the VM
		// and its instance through on the way cost nothing: the VM
		// Stopped and Starting, the instance Pending, Scheduling and
		// Scheduled, and Running before virt-controller has seen its
		// launcher Pod ready and marked it Ready.
		"management patch kubevirtmachines/status "+tc.namespace+"/counted",
		"management patch kubevirtmachines/status "+tc.namespace+"/counted",
	)
	settledWrites(t, kvm, provisioned)

	// The node joins: Cluster API records it on the Machine, which the
	// provider watches; nothing changes for the KubeVirtMachine.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
	machine.Spec.ProviderID = kvm.Spec.ProviderID
	g.Expect(c.Update(ctx, machine)).To(Succeed())
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: "counted"}
	machine.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(c.Status().Update(ctx, machine)).To(Succeed())
	settledWrites(t, kvm, provisioned)
}

// settledWrites waits until the machine's writes are want and checks that
// no other follows; on failure it lists each write with its body.
func settledWrites(t *testing.T, kvm client.Object, want []string) {
	t.Helper()
	g := NewWithT(t)
	describe := func() string { return describeWrites(kvm) }
	g.Eventually(func(g Gomega) {
		got := names(controllerWrites.of(kvm))
		if len(got) > len(want) {
			// Writes are never taken back: stop waiting.
			StopTrying(fmt.Sprintf("the controllers sent %d writes to the KubeVirtMachine, want %d", len(got), len(want))).Now()
		}
		g.Expect(got).To(Equal(want))
	}).Should(Succeed(), describe)
	g.Consistently(func() []string { return names(controllerWrites.of(kvm)) }).WithTimeout(2*time.Second).Should(Equal(want), describe)
	if testing.Verbose() {
		t.Log("KubeVirtMachine writes:" + describe())
	}
}
