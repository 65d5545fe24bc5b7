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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestJoin: a Kairos pool of 3 gives 3 Nodes, each named after its VM with
// the providerID kubevirt://<VM>, booted from the platform image; the
// Machines are Running and NodeHealthy; every bootstrap token is revoked
// once its node joined.
func TestJoin(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "3"})

	ms := poolOf(w).expectJoined(t, 3)
	expectBootsClean(g, ms)
	for _, m := range ms {
		g.Expect(m.Spec.ProviderID).To(Equal("kubevirt://" + m.Spec.InfrastructureRef.Name))
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(context.Background(), client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, vm)).To(Succeed())
		g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ContainerDisk.Image", platformImage)))
	}
	for _, n := range poolOf(w).nodes(g) {
		g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
		g.Expect(n.Labels).To(HaveKeyWithValue("node.cozystack.io/pool", "kairos"))
	}
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokens(g, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
	expectNoOrphans(t, w)

	// A settled pool is left alone: once the last status updates of the
	// join are written, no controller keeps rewriting anything.
	var settled map[string]string
	g.Eventually(func(g Gomega) {
		before := resourceVersions(g, w)
		time.Sleep(time.Second)
		settled = resourceVersions(g, w)
		g.Expect(settled).To(Equal(before))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) map[string]string { return resourceVersions(g, w) }, 10*time.Second, time.Second).Should(Equal(settled))
}

// resourceVersions returns the resourceVersion of every object of the pool
// in the management cluster, by kind and name.
func resourceVersions(g Gomega, w *harness.WorkloadCluster) map[string]string {
	out := map[string]string{}
	for kind, list := range map[string]client.ObjectList{
		"MachineDeployment":       &clusterv1.MachineDeploymentList{},
		"MachineSet":              &clusterv1.MachineSetList{},
		"Machine":                 &clusterv1.MachineList{},
		"MachineHealthCheck":      &clusterv1.MachineHealthCheckList{},
		"KairosConfig":            &bootstrapv1.KairosConfigList{},
		"KubeVirtMachine":         &infrav1.KubeVirtMachineList{},
		"KubeVirtMachineTemplate": &infrav1.KubeVirtMachineTemplateList{},
		"VirtualMachine":          &kubevirtv1.VirtualMachineList{},
		"VirtualMachineInstance":  &kubevirtv1.VirtualMachineInstanceList{},
		"Secret":                  &corev1.SecretList{},
	} {
		g.Expect(h.Client.List(context.Background(), list, client.InNamespace(w.Key.Namespace))).To(Succeed())
		items, err := meta.ExtractList(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			o := item.(client.Object)
			out[kind+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}
