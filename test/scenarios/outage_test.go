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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestKubeVirtControlPlaneOutagesConverge: virt-api is down when the pool
// is created (its webhooks fail closed, so no VirtualMachine can be
// created), then virt-controller is killed while the instances start and
// is down for a while. Once both are back, every Machine joins with
// exactly one VirtualMachine and one instance. Not parallel: the outages
// would slow every other scenario.
func TestKubeVirtControlPlaneOutagesConverge(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	vms := func(g Gomega) []kubevirtv1.VirtualMachine {
		list := &kubevirtv1.VirtualMachineList{}
		g.Expect(h.Client.List(ctx, list, client.InNamespace(w.Key.Namespace))).To(Succeed())
		return list.Items
	}

	h.KubeVirt.API.Down()
	t.Cleanup(h.KubeVirt.API.Up)
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	g.Eventually(func(g Gomega) { g.Expect(poolOf(w).machines(g)).To(HaveLen(2)) }, timeout, poll).Should(Succeed())
	g.Consistently(vms, 5*time.Second, 500*time.Millisecond).Should(BeEmpty())

	h.KubeVirt.API.Up()
	g.Eventually(func(g Gomega) {
		instances := &kubevirtv1.VirtualMachineInstanceList{}
		g.Expect(h.Client.List(ctx, instances, client.InNamespace(w.Key.Namespace))).To(Succeed())
		g.Expect(instances.Items).NotTo(BeEmpty())
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })
	h.KubeVirt.Controller.Kill()
	h.KubeVirt.Controller.Down()
	t.Cleanup(h.KubeVirt.Controller.Up)
	time.Sleep(5 * time.Second)
	h.KubeVirt.Controller.Up()

	ms := poolOf(w).expectJoined(t, 2)
	expectBootsClean(g, ms)
	g.Expect(vms(g)).To(HaveLen(2))
	for _, m := range ms {
		instances := &kubevirtv1.VirtualMachineInstanceList{}
		g.Expect(h.Client.List(ctx, instances, client.InNamespace(w.Key.Namespace))).To(Succeed())
		owned := 0
		for _, vmi := range instances.Items {
			if vmi.Name == m.Spec.InfrastructureRef.Name {
				owned++
			}
		}
		g.Expect(owned).To(Equal(1), "Machine %s", m.Name)
	}
	expectNoOrphans(t, w)
}
