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
	"os"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestClusterctlBackupCarriesThePoolAndResumesIt: Cluster API's own
// `clusterctl move --to-directory` of a joined pool's namespace finds every
// object of both providers through their ownership (the class's templates,
// each Machine's KairosConfig, bootstrap data Secret and KubeVirtMachine)
// and none of the infrastructure's (VMs stay where they run). clusterctl
// pauses the Cluster for the backup and resumes it; the pool comes through
// the pause as it was: the same Machines and VMs, no new token, every
// machine reporting it is not paused.
func TestClusterctlBackupCarriesThePoolAndResumesIt(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	applyPool(t, w, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	before := expectJoined(t, w, 2)
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokens(g, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
	vms := map[string]types.UID{}
	for _, m := range before {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(ctx, vmKey(m), vm)).To(Succeed())
		vms[vm.Name] = vm.UID
	}

	dir := t.TempDir()
	g.Expect(h.ClusterctlBackup(ctx, w.Key.Namespace, dir)).To(Succeed())

	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	file := func(kind, name string) string { return kind + "_" + w.Key.Namespace + "_" + name + ".yaml" }
	cluster := &clusterv1.Cluster{}
	g.Expect(h.Client.Get(ctx, w.Key, cluster)).To(Succeed())
	want := []string{file("Cluster", cluster.Name), file("KubeVirtCluster", cluster.Spec.InfrastructureRef.Name)}
	mds := &clusterv1.MachineDeploymentList{}
	g.Expect(h.Client.List(ctx, mds, client.InNamespace(w.Key.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: w.Key.Name})).To(Succeed())
	g.Expect(mds.Items).NotTo(BeEmpty())
	for _, md := range mds.Items {
		want = append(want, file("MachineDeployment", md.Name),
			file("KubeVirtMachineTemplate", md.Spec.Template.Spec.InfrastructureRef.Name),
			file("KairosConfigTemplate", md.Spec.Template.Spec.Bootstrap.ConfigRef.Name))
	}
	for _, m := range before {
		want = append(want, file("Machine", m.Name),
			file("KairosConfig", m.Spec.Bootstrap.ConfigRef.Name),
			file("Secret", *m.Spec.Bootstrap.DataSecretName),
			file("KubeVirtMachine", m.Spec.InfrastructureRef.Name))
	}
	g.Expect(files).To(ContainElements(want), "the backup holds every object the providers need in a target")
	for _, f := range files {
		g.Expect(f).NotTo(SatisfyAny(HavePrefix("VirtualMachine"), HavePrefix("DataVolume")),
			"a move carries Cluster API's objects, never the infrastructure's")
	}

	g.Eventually(func(g Gomega) {
		g.Expect(h.Client.Get(ctx, w.Key, cluster)).To(Succeed())
		g.Expect(cluster.Spec.Paused).To(SatisfyAny(BeNil(), HaveValue(BeFalse())), "clusterctl resumed the Cluster")
		for _, m := range before {
			kvm := &infrav1.KubeVirtMachine{}
			g.Expect(h.Client.Get(ctx, vmKey(m), kvm)).To(Succeed())
			g.Expect(conditions.IsFalse(kvm, clusterv1.PausedCondition)).To(BeTrue(), "KubeVirtMachine %s is not paused", kvm.Name)
			config := &bootstrapv1.KairosConfig{}
			g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}, config)).To(Succeed())
			g.Expect(conditions.IsFalse(config, clusterv1.PausedCondition)).To(BeTrue(), "KairosConfig %s is not paused", config.Name)
		}
	}, timeout, poll).Should(Succeed())

	after := expectJoined(t, w, 2)
	g.Expect(machineUIDs(after)).To(ConsistOf(machineUIDs(before)), "no Machine was replaced")
	for name, uid := range vms {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: name}, vm)).To(Succeed())
		g.Expect(vm.UID).To(Equal(uid), "VM %s was kept", name)
	}
	g.Consistently(func(g Gomega) []string { return bootstrapTokens(g, w) }, "3s", poll).Should(BeEmpty(), "no new token")
	expectNoOrphans(t, w)
}
