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
	"testing"

	. "github.com/onsi/gomega"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestJoin: a Kairos pool of 3 gives 3 Nodes, each named after its VM with
// the providerID kubevirt://<VM>, booted from the platform image; the
// Machines are Running and NodeHealthy; every bootstrap token is revoked
// once its node joined.
func TestJoin(t *testing.T) {
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	applyPool(t, w, map[string]string{"WORKER_MACHINE_COUNT": "3"})

	ms := expectJoined(t, w, 3)
	expectBootsClean(g, ms)
	for _, m := range ms {
		g.Expect(m.Spec.ProviderID).To(Equal("kubevirt://" + m.Spec.InfrastructureRef.Name))
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(context.Background(), client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, vm)).To(Succeed())
		g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ContainerDisk.Image", platformImage)))
	}
	for _, n := range nodes(g, w) {
		g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
		g.Expect(n.Labels).To(HaveKeyWithValue("node.cozystack.io/pool", "kairos"))
	}
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokens(g, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
	expectNoOrphans(t, w)
}
