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
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
)

// TestTenantPlacementIsTheHosters: a tenant with its own user, who may
// write KubeVirtMachines and templates but no VM, tries to place its
// workers where the hoster's policy does not allow (the control plane's
// taint and label, a node by name, another namespace's Pods, a spread
// by a reserved label, dedicated CPUs, a GPU the hoster does not hand
// out) and is refused by the
// webhooks on the field it wrote; what the policy allows is admitted.
// A machine admitted under an older policy gets no VM from the machine
// controller, whose policy is the one in force.
func TestTenantPlacementIsTheHosters(t *testing.T) {
	ensureClusterRoles(t)
	tc := newCluster(t)
	malloryName := "mallory-" + rand.String(5)
	bind(t, tc.namespace, tenantRole, user(malloryName))
	asMallory := tenantClient(t, malloryName)
	ctx := context.Background()

	controlPlaneTerm := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: placement.ControlPlaneLabel, Operator: corev1.NodeSelectorOpExists}}}
	for _, attack := range []struct {
		name   string
		mutate func(*infrav1.KubeVirtMachineSpec)
		// field is under spec (a machine) or spec.template.spec.
		field, detail string
	}{
		{name: "tolerating the control plane's taint", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Tolerations = []corev1.Toleration{{Key: placement.ControlPlaneLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, field: "tolerations[0].key", detail: "the hoster allows gpu, " + retiredTolerationKey + ", node.kubernetes.io/not-ready, node.kubernetes.io/unreachable (--tenant-toleration-keys)"},
		{name: "tolerating every taint", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}, field: "tolerations[0].key", detail: "tolerates every taint"},
		{name: "requiring the control plane's label in a second term", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zoneA}}}},
					controlPlaneTerm,
				}}}}
		}, field: "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchExpressions[0].key",
			detail: "(--tenant-node-affinity-keys)"},
		{name: "preferring the hoster's reserved nodes", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
				{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: reservedNodeLabel, Operator: corev1.NodeSelectorOpExists}}}}}}}
		}, field: "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key", detail: reservedNodeLabel},
		{name: "a node by name", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"infra-c"}}}}}}}}
		}, field: "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key", detail: `node field "metadata.name"`},
		{name: "following the Pods of kube-system", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				{TopologyKey: corev1.LabelHostname, Namespaces: []string{metav1.NamespaceSystem},
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"component": "kube-apiserver"}}}}}}
		}, field: "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[0]", detail: `namespace "kube-system" is not the machine's`},
		{name: "avoiding every namespace's Pods", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, NamespaceSelector: &metav1.LabelSelector{}}}}}}
		}, field: "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaceSelector", detail: "selects Pods of other namespaces"},
		{name: "spreading onto only the nodes of the hoster's reserved label", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: reservedNodeLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}}}}
		}, field: "topologySpreadConstraints[0].topologyKey", detail: `node label "` + reservedNodeLabel + `" is not one a tenant may spread by`},
		{name: "dedicated CPUs", mutate: func(s *infrav1.KubeVirtMachineSpec) { s.CPU.DedicatedCPUPlacement = true },
			field: "cpu.dedicatedCPUPlacement", detail: "--tenant-dedicated-cpu-placement=false"},
		{name: "a GPU the hoster does not hand out", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/AD102GL_L40S"}}
		}, field: "gpus[0].deviceName", detail: "(--tenant-device-names)"},
		{name: "a host device the hoster does not hand out", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.HostDevices = []infrav1.HostDevice{{Name: "nic", DeviceName: "mellanox.com/ConnectX6"}}
		}, field: "hostDevices[0].deviceName", detail: `device "mellanox.com/ConnectX6"`},
	} {
		t.Run(attack.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := containerDiskSpec()
			attack.mutate(&spec)
			expectRefused(g, asMallory.Create(ctx, classlessTemplate(tc.namespace, "attack-"+rand.String(4), spec)),
				"spec.template.spec."+attack.field, attack.detail)
			kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "attack-" + rand.String(4)}, Spec: spec}
			expectRefused(g, asMallory.Create(ctx, kvm), "spec."+attack.field, attack.detail)
		})
	}

	t.Run("what the hoster allows is admitted", func(t *testing.T) {
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: gpuResource}}
		spec.Affinity = &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}}}}}},
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, Namespaces: []string{tc.namespace},
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}}}}}},
		}
		spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}}}}
		g.Expect(asMallory.Create(ctx, classlessTemplate(tc.namespace, "allowed-"+rand.String(4), spec))).To(Succeed())
		kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "allowed-" + rand.String(4)}, Spec: spec}
		g.Expect(asMallory.Create(ctx, kvm, client.DryRunAll)).To(Succeed())
	})

	t.Run("a machine admitted under an older policy gets no VM", func(t *testing.T) {
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Tolerations = []corev1.Toleration{{Key: retiredTolerationKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		kvm := tenantMachine(t, tc, asMallory, "retired", spec, nil)
		var message string
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.PlacementForbiddenReason)
			expectCondition(g, kvm, infrav1.VirtualMachineProvisionedCondition, metav1.ConditionUnknown, infrav1.PlacementForbiddenReason)
			message = cond.Message
		}).WithTimeout(time.Minute).Should(Succeed(), func() string { return describe(tc.namespace) })
		g.Expect(message).To(Equal(`spec.tolerations[0].key: Forbidden: toleration key "` + retiredTolerationKey + `" is not one a tenant may use; ` +
			"the hoster allows gpu, node.kubernetes.io/not-ready, node.kubernetes.io/unreachable (--tenant-toleration-keys)"))
		g.Eventually(func(g Gomega) {
			g.Expect(eventsIn(g, tc.namespace)["KubeVirtMachine/retired"]).To(ConsistOf("Warning PlacementForbidden Place: " + message))
		}).Should(Succeed())
		g.Consistently(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, key(tc.namespace, "retired"), &kubevirtv1.VirtualMachine{}))
		}).WithTimeout(3*time.Second).Should(BeTrue(), "no VirtualMachine is created for a forbidden placement")
		g.Expect(apierrors.IsNotFound(c.Get(ctx, key(tc.namespace, "retired-userdata"), &corev1.Secret{}))).To(BeTrue(),
			"nothing of the machine is created")
	})
}

// TestReservedNodesAreExcluded: the hoster reserves a control-plane node
// (zone C) and a node of its own label (zone D). A tenant that asks only
// for what it may, a zone, by its node affinity or by its Machine's
// failure domain, gets a VM that virt-api admits and that never runs
// there: with no other node in the zone it is unschedulable. A machine of
// zone A runs as before.
func TestReservedNodesAreExcluded(t *testing.T) {
	ensureClusterRoles(t)
	tc := newCluster(t)
	malloryName := "mallory-" + rand.String(5)
	bind(t, tc.namespace, tenantRole, user(malloryName))
	asMallory := tenantClient(t, malloryName)
	ctx := context.Background()
	inZone := func(zone string) infrav1.KubeVirtMachineSpec {
		spec := containerDiskSpec()
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"plan9"}}}},
			}}}}
		return spec
	}
	exclusions := []corev1.NodeSelectorRequirement{
		{Key: placement.ControlPlaneLabel, Operator: corev1.NodeSelectorOpDoesNotExist},
		{Key: reservedNodeLabel, Operator: corev1.NodeSelectorOpDoesNotExist},
	}

	for _, m := range []struct {
		name, failureDomain string
		spec                infrav1.KubeVirtMachineSpec
	}{
		{name: "control-plane-zone", spec: inZone(zoneC)},
		{name: "reserved-domain", spec: containerDiskSpec(), failureDomain: zoneD},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			kvm := tenantMachine(t, tc, asMallory, m.name, m.spec, func(machine *clusterv1.Machine) { machine.Spec.FailureDomain = m.failureDomain })
			vm := waitForVM(t, kvm)
			for _, term := range vm.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				g.Expect(term.MatchExpressions).To(ContainElements(exclusions), "every term excludes the reserved nodes")
			}
			expectReady(t, kvm, metav1.ConditionFalse, infrav1.UnschedulableReason)
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), vmi)).To(Succeed())
			g.Expect(vmi.Status.NodeName).To(BeEmpty())
		})
	}
	t.Run("a zone of tenants' nodes", func(t *testing.T) {
		t.Parallel()
		kvm := tenantMachine(t, tc, asMallory, "tenant-zone", inZone(zoneA), nil)
		expectProvisioned(t, kvm)
		NewWithT(t).Expect(kvm.Status.NodeName).To(Equal("infra-a"))
	})
}

// tenantMachine is tc.machine with the KubeVirtMachine written by a
// tenant's client; the Machine and its bootstrap data are Cluster API's,
// written by the suite.
func tenantMachine(t *testing.T, tc *testCluster, tenant client.Client, name string, spec infrav1.KubeVirtMachineSpec, mutate func(*clusterv1.Machine)) *infrav1.KubeVirtMachine {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: tc.namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": bootstrapData(name), "format": []byte("cloud-config")},
	}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       tc.cluster.Name,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtMachine", Name: name},
		},
	}
	if mutate != nil {
		mutate(machine)
	}
	g.Expect(c.Create(ctx, secret)).To(Succeed())
	g.Expect(c.Create(ctx, machine)).To(Succeed())
	kvm := &infrav1.KubeVirtMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine",
				Name: machine.Name, UID: machine.UID, Controller: ptr.To(true)}}},
		Spec: spec,
	}
	g.Expect(tenant.Create(ctx, kvm)).To(Succeed())
	return kvm
}
