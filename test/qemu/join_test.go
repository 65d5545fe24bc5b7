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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/cozystack/cluster-api-workers/test/harness"
)

// joinPool is the 2-machine pool of the built-in kairos class, booting the
// platform's image as a container disk with a NoCloud seed. The join
// scenario makes it; the replacement scenario reuses it (ensureJoinPool
// makes it when it runs alone). A function, since the workload Cluster
// exists only once the suite has started.
func joinPool() pool { return newPool("join") }

// ensureJoinPool creates the join pool unless it exists, and waits until
// both its Machines run with Ready Nodes.
func ensureJoinPool(t *testing.T) []clusterv1.Machine {
	t.Helper()
	if !joinPool().exists(t) {
		onlyPool(t, joinPool())
		joinPool().apply(t, map[string]string{
			"WORKER_MACHINE_COUNT": "2",
			// The replacement scenario proves the node path: a killed
			// guest's Node goes NotReady and the MachineHealthCheck acts on
			// that. The lost container disk also sets InfrastructureReady
			// False; its timeout is set past the node's so that it is the
			// node's condition that triggers remediation here.
			"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": "600",
		})
	}
	return joinPool().expectJoined(t, 2)
}

// TestPoolJoinsAndRevokesTokens: a 2-machine Kairos pool joins with real
// guests. Cluster API's MachineDeployment makes two Machines; the Kairos
// provider renders their bootstrap data; the KubeVirt provider makes their
// VirtualMachines, which boot the platform's image (a container disk) with
// a NoCloud seed (KubeVirt's virt-controller creates their instances,
// whose guests the runner boots); each guest runs the stages with yip and
// joins with kubeadm. Both Nodes are Ready with providerID
// kubevirt://<vm>, both Machines Running; afterwards the per-Machine join
// tokens are gone from the workload kube-system.
func TestPoolJoinsAndRevokesTokens(t *testing.T) {
	timings.scenario(t)
	g := NewWithT(t)
	ms := ensureJoinPool(t)
	for _, m := range ms {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(suiteCtx, vmKey(m), vm)).To(Succeed())
		g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ContainerDisk.Image", workerImage)))
		// The guest is the one of the instance virt-controller created for
		// the VM, running on the runner's guest node.
		vmi := &kubevirtv1.VirtualMachineInstance{}
		g.Expect(h.Client.Get(suiteCtx, vmKey(m), vmi)).To(Succeed())
		g.Expect(metav1.IsControlledBy(vmi, vm)).To(BeTrue(), "instance %s", vmi.Name)
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		g.Expect(vmi.Status.NodeName).To(Equal(GuestNode))
		g.Expect(vmi.Status.Interfaces).To(ContainElement(HaveField("IP", GuestAddress)))
		guest := guestOf(g, vmKey(m))
		g.Expect(guest.Instance).To(Equal(vmi.UID))
		g.Expect(guest.RootImage).To(Equal(disk.Image()), "guest %s does not boot the mapped container disk", guest.VM.Name)
		g.Expect(guest.Seed).To(Equal(NoCloud))
	}
	for _, n := range joinPool().nodes(g) {
		g.Expect(n.Labels).To(HaveKeyWithValue(harness.PoolLabel, joinPool().Name))
	}
	recordJoins(t, "join", ms)

	// Once a Machine has its nodeRef, the Kairos provider deletes its token.
	g.Eventually(func(g Gomega) { g.Expect(joinPool().joinTokens(g)).To(BeEmpty()) }, time.Minute, poll).Should(Succeed())
}
