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
	"os"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/sim/fault"
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
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "2"})
	before := poolOf(w).expectJoined(t, 2)
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

	after := poolOf(w).expectJoined(t, 2)
	g.Expect(machineUIDs(after)).To(ConsistOf(machineUIDs(before)), "no Machine was replaced")
	for name, uid := range vms {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: name}, vm)).To(Succeed())
		g.Expect(vm.UID).To(Equal(uid), "VM %s was kept", name)
	}
	g.Consistently(func(g Gomega) []string { return bootstrapTokens(g, w) }, "3s", poll).Should(BeEmpty(), "no new token")
	expectNoOrphans(t, w)
}

// TestClusterctlMoveCarriesAJoinedPool: Cluster API's own `clusterctl move`
// of a joined pool to a second management cluster, the provider keeping the
// VM side in an infrastructure cluster of its own (labelled, not owned, so
// that the move neither carries nor deletes it). A paused Cluster and a
// machine in flight are refused first. After the move the source namespace holds no Cluster API
// object, the target holds them all under the same names, and the VMs are
// the same ones; the target's providers take the pool over without
// replacing a Machine or making a token, scale it through the
// infrastructure cluster, and delete its VMs there with the Cluster.
func TestClusterctlMoveCarriesAJoinedPool(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	source := startScenarioHarness(t, harness.Options{RemoteInfrastructure: true})
	// The hand-over: the target's provider runs with the source's identity
	// (--management-cluster-identity), so that it may take the VMs over.
	identity, err := source.ManagementClusterIdentity(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	target := startScenarioHarness(t, harness.Options{InfrastructureOf: source, ManagementClusterIdentity: identity})
	key := client.ObjectKey{Namespace: "clusterctl-move", Name: "tenant"}
	w, err := source.CreateCluster(ctx, key, harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(source.Apply(ctx, poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "2"}))).To(Succeed())
	before := poolOf(w).expectJoinedIn(t, source, 2)
	g.Eventually(func(g Gomega) { g.Expect(bootstrapTokensIn(g, source, w)).To(BeEmpty()) }, timeout, poll).Should(Succeed())
	var names, nodeNames []string
	vms := map[string]types.UID{}
	for _, m := range before {
		names = append(names, m.Name)
		nodeNames = append(nodeNames, m.Status.NodeRef.Name)
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(source.Client.Get(ctx, vmKey(m), vm)).To(Succeed())
		g.Expect(vm.OwnerReferences).To(BeEmpty(), "the remote mode labels the VM side instead of owning it")
		g.Expect(vm.Labels).To(HaveKeyWithValue(infrav1.MachineNameLabel, m.Spec.InfrastructureRef.Name))
		g.Expect(vm.Labels).To(HaveKeyWithValue(infrav1.ManagementClusterLabel, identity))
		vms[vm.Name] = vm.UID
	}

	// clusterctl refuses a paused Cluster before it changes anything.
	cluster := &clusterv1.Cluster{}
	g.Expect(source.Client.Get(ctx, key, cluster)).To(Succeed())
	paused := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Paused = ptr.To(true)
	g.Expect(source.Client.Patch(ctx, cluster, paused)).To(Succeed())
	err = source.ClusterctlMove(ctx, key.Namespace, target)
	g.Expect(err).To(MatchError(ContainSubstring("cannot start operation while the following Clusters are paused: " + key.String())))
	g.Expect(apierrors.IsNotFound(target.Client.Get(ctx, key, &clusterv1.Cluster{}))).To(BeTrue(), "nothing was moved")
	resumed := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Paused = nil
	g.Expect(source.Client.Patch(ctx, cluster, resumed)).To(Succeed())

	// clusterctl refuses a machine in flight (its instance is never
	// scheduled, so its node never joins) before it changes anything.
	source.Hosts.NeverSchedule(fault.InNamespace(key.Namespace), 1)
	scaleTo(t, source, poolOf(w), 3)
	var inFlight clusterv1.Machine
	g.Eventually(func(g Gomega) {
		ms, err := source.PoolMachines(ctx, poolOf(w).Pool)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ms).To(HaveLen(3))
		for _, m := range ms {
			if !slices.Contains(names, m.Name) {
				inFlight = m
			}
		}
		g.Expect(inFlight.Spec.InfrastructureRef.Name).NotTo(BeEmpty())
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(source.Client.Get(ctx, vmKey(inFlight), vm)).To(Succeed(), "the machine in flight has its VM")
	}, timeout, poll).Should(Succeed())
	err = source.ClusterctlMove(ctx, key.Namespace, target)
	g.Expect(err).To(MatchError(ContainSubstring("cannot start the move operation while")), func() string {
		return fmt.Sprintf("the machine in flight: %s\n%s", inFlight.Name, source.Describe(ctx, key))
	})
	g.Expect(err).To(MatchError(ContainSubstring(inFlight.Name + " is still provisioning the node")))
	g.Expect(apierrors.IsNotFound(target.Client.Get(ctx, key, &clusterv1.Cluster{}))).To(BeTrue(), "nothing was moved")
	// Back to the joined pool: the machine in flight goes.
	marked := client.MergeFrom(inFlight.DeepCopy())
	inFlight.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
	g.Expect(source.Client.Patch(ctx, &inFlight, marked)).To(Succeed())
	scaleTo(t, source, poolOf(w), 2)
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(source.Client.Get(ctx, client.ObjectKeyFromObject(&inFlight), &clusterv1.Machine{}))).To(BeTrue())
		g.Expect(apierrors.IsNotFound(source.Client.Get(ctx, vmKey(inFlight), &kubevirtv1.VirtualMachine{}))).To(BeTrue(), "its VM goes with it")
	}, timeout, poll).Should(Succeed())
	source.Hosts.ClearFaults()

	g.Expect(source.ClusterctlMove(ctx, key.Namespace, target)).To(Succeed())

	g.Eventually(func(g Gomega) {
		left := objectsLeft(g, source.Client, key.Namespace, map[string]client.ObjectList{
			"Cluster":                 &clusterv1.ClusterList{},
			"MachineDeployment":       &clusterv1.MachineDeploymentList{},
			"MachineSet":              &clusterv1.MachineSetList{},
			"Machine":                 &clusterv1.MachineList{},
			"MachineHealthCheck":      &clusterv1.MachineHealthCheckList{},
			"KairosConfig":            &bootstrapv1.KairosConfigList{},
			"KairosConfigTemplate":    &bootstrapv1.KairosConfigTemplateList{},
			"KubeVirtMachine":         &infrav1.KubeVirtMachineList{},
			"KubeVirtMachineTemplate": &infrav1.KubeVirtMachineTemplateList{},
			"KubeVirtCluster":         &infrav1.KubeVirtClusterList{},
		})
		g.Expect(left).To(BeEmpty(), "the source namespace keeps no Cluster API object")
	}, timeout, poll).Should(Succeed())

	g.Expect(target.Client.Get(ctx, key, &clusterv1.Cluster{})).To(Succeed())
	g.Expect(target.Client.Get(ctx, poolOf(w).Deployment(), &clusterv1.MachineDeployment{})).To(Succeed())
	for _, m := range before {
		moved := &clusterv1.Machine{}
		g.Expect(target.Client.Get(ctx, client.ObjectKeyFromObject(&m), moved)).To(Succeed())
		configKey := client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}
		g.Expect(target.Client.Get(ctx, configKey, &bootstrapv1.KairosConfig{})).To(Succeed())
		dataKey := client.ObjectKey{Namespace: m.Namespace, Name: *m.Spec.Bootstrap.DataSecretName}
		g.Expect(target.Client.Get(ctx, dataKey, &corev1.Secret{})).To(Succeed())
		g.Expect(apierrors.IsNotFound(source.Client.Get(ctx, dataKey, &corev1.Secret{}))).To(BeTrue(), "Secret %s was moved", dataKey.Name)
		g.Expect(target.Client.Get(ctx, vmKey(m), &infrav1.KubeVirtMachine{})).To(Succeed())
	}
	expectSameVMs := func() {
		for name, uid := range vms {
			vm := &kubevirtv1.VirtualMachine{}
			g.Expect(source.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, vm)).To(Succeed())
			g.Expect(vm.UID).To(Equal(uid), "VM %s was kept", name)
			g.Expect(vm.DeletionTimestamp).To(BeNil(), "VM %s is not being deleted", name)
		}
	}
	expectSameVMs()

	// The target's providers take the pool over as it is: the same Nodes
	// and providerIDs, no Machine replaced, no token made.
	after := poolOf(w).expectJoinedIn(t, target, 2)
	for i, m := range after {
		g.Expect(m.Name).To(Equal(names[i]), "no MachineSet made a new Machine")
		g.Expect(m.Status.NodeRef.Name).To(Equal(nodeNames[i]))
		kvm := &infrav1.KubeVirtMachine{}
		g.Expect(target.Client.Get(ctx, vmKey(m), kvm)).To(Succeed())
		g.Expect(kvm.Spec.ProviderID).To(Equal(infrav1.ProviderID(kvm.Name)))
		g.Expect(kvm.Status.Initialization.Provisioned).To(HaveValue(BeTrue()), "KubeVirtMachine %s reports provisioned", kvm.Name)
	}
	g.Consistently(func(g Gomega) {
		g.Expect(bootstrapTokensIn(g, target, w)).To(BeEmpty(), "no new token")
		ms, err := target.PoolMachines(ctx, poolOf(w).Pool)
		g.Expect(err).NotTo(HaveOccurred())
		var now []string
		for _, m := range ms {
			now = append(now, m.Name)
		}
		g.Expect(now).To(Equal(names), "no MachineSet made a new Machine")
	}, "5s", poll).Should(Succeed())
	expectSameVMs()

	// Scaling in the target makes a VM in the infrastructure cluster, which
	// joins.
	scaleTo(t, target, poolOf(w), 3)
	scaled := poolOf(w).expectJoinedIn(t, target, 3)
	for _, m := range scaled {
		vm := &kubevirtv1.VirtualMachine{}
		g.Expect(source.Client.Get(ctx, vmKey(m), vm)).To(Succeed(), "the VM of Machine %s is in the infrastructure cluster", m.Name)
		g.Expect(vm.Labels).To(HaveKeyWithValue(infrav1.MachineNameLabel, m.Spec.InfrastructureRef.Name))
	}
	expectSameVMs()
	expectNoOrphansIn(t, target, w)

	// Deleting the Cluster in the target deletes the VM side in the
	// infrastructure cluster.
	g.Expect(target.DeleteCluster(ctx, key, timeout)).To(Succeed(), func() string { return target.Describe(ctx, key) })
	g.Eventually(func(g Gomega) {
		left := objectsLeft(g, source.Client, key.Namespace, map[string]client.ObjectList{
			"VirtualMachine":         &kubevirtv1.VirtualMachineList{},
			"VirtualMachineInstance": &kubevirtv1.VirtualMachineInstanceList{},
			"DataVolume":             &cdiv1.DataVolumeList{},
			"PersistentVolumeClaim":  &corev1.PersistentVolumeClaimList{},
			"Secret":                 &corev1.SecretList{},
			"ConfigMap":              &corev1.ConfigMapList{},
		})
		g.Expect(left).To(BeEmpty(), "the infrastructure cluster keeps nothing of the pool")
		g.Expect(bootstrapTokensIn(g, target, w)).To(BeEmpty())
	}, timeout, poll).Should(Succeed())
}

// scaleTo sets the replicas of the pool's MachineDeployment in the harness.
func scaleTo(t *testing.T, in *harness.Harness, p pool, replicas int32) {
	t.Helper()
	if err := in.ScalePool(context.Background(), p.Pool, replicas); err != nil {
		t.Fatal(err)
	}
}

// startScenarioHarness starts a harness of a scenario's own with the
// suite's logger (its lines are scanned too), images and platform; the
// scenario's cleanup stops it, the last started first.
func startScenarioHarness(t *testing.T, opts harness.Options) *harness.Harness {
	t.Helper()
	ctx := context.Background()
	opts.Logger, opts.WorkerClasses, opts.Images = logger, true, suiteImages
	started, err := harness.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting a harness: %v", err)
	}
	t.Cleanup(func() {
		if err := started.Stop(); err != nil {
			t.Errorf("stopping a harness: %v", err)
		}
	})
	if err := started.ConfigurePlatform(ctx, suitePlatform); err != nil {
		t.Fatalf("configuring the platform: %v", err)
	}
	return started
}
