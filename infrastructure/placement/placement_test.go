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

package placement

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

const gpu = "nvidia.com/GA102GL_A10"

func requiredTerms(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func expression(key string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpExists}
}

func podTerm(namespaces []string, selector *metav1.LabelSelector) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, Namespaces: namespaces, NamespaceSelector: selector,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}
}

func spread(key string, when corev1.UnsatisfiableConstraintAction, mutate func(*corev1.TopologySpreadConstraint)) corev1.TopologySpreadConstraint {
	c := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: when,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cluster.x-k8s.io/cluster-name": "tenant"}}}
	if mutate != nil {
		mutate(&c)
	}
	return c
}

// TestValidate: a tenant's spec may ask for what the hoster's policy
// allows and nothing more; each refusal is on the field that asks for it
// and says what the hoster allows.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		spec   infrav1.KubeVirtMachineSpec
		// want maps each refused field to words its error carries.
		want map[string]string
	}{
		{name: "nothing placed", policy: Policy{}, spec: infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 2}}},

		// Tolerations.
		{name: "what every Pod tolerates anyway", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		}}},
		{name: "the control plane's taint", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
			{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		}}, want: map[string]string{"spec.tolerations[1].key": `toleration key "node-role.kubernetes.io/control-plane" is not one a tenant may use; ` +
			"the hoster allows node.kubernetes.io/not-ready, node.kubernetes.io/unreachable (--tenant-toleration-keys)"}},
		{name: "every taint at once", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Tolerations: []corev1.Toleration{
			{Operator: corev1.TolerationOpExists},
		}}, want: map[string]string{"spec.tolerations[0].key": "an empty key with operator Exists tolerates every taint"}},
		{name: "a key the hoster allows", policy: Policy{TolerationKeys: []string{"example.com/gpu"}}, spec: infrav1.KubeVirtMachineSpec{Tolerations: []corev1.Toleration{
			{Key: "example.com/gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule},
		}}},
		{name: "no key when the hoster allows none", policy: Policy{}, spec: infrav1.KubeVirtMachineSpec{Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
		}}, want: map[string]string{"spec.tolerations[0].key": "the hoster allows none (--tenant-toleration-keys)"}},

		// Node affinity.
		{name: "zone and architecture", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: requiredTerms(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expression(corev1.LabelTopologyZone), expression(corev1.LabelArchStable)}},
		)}},
		{name: "the control plane's label in a required term", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: requiredTerms(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expression(corev1.LabelTopologyZone)}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expression("node-role.kubernetes.io/control-plane")}},
		)}, want: map[string]string{
			"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchExpressions[0].key": `node label "node-role.kubernetes.io/control-plane" is not one a tenant may select nodes by; ` +
				"the hoster allows kubernetes.io/arch, kubernetes.io/os, topology.kubernetes.io/region, topology.kubernetes.io/zone (--tenant-node-affinity-keys)"}},
		{name: "a node picked by name", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: requiredTerms(
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"cp-1"}}}},
		)}, want: map[string]string{
			"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key": `node field "metadata.name"`}},
		{name: "a reserved label in a preferred term", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{expression("example.com/infrastructure-reserved")}}}},
		}}}, want: map[string]string{
			"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key": "example.com/infrastructure-reserved"}},

		// Topology spread.
		{name: "spread by hostname, zone and the tenant's own Pods", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			spread(corev1.LabelHostname, corev1.ScheduleAnyway, func(c *corev1.TopologySpreadConstraint) {
				c.MatchLabelKeys = []string{"cluster.x-k8s.io/deployment-name"}
				c.NodeAffinityPolicy, c.NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyIgnore), ptr.To(corev1.NodeInclusionPolicyHonor)
			}),
			spread(corev1.LabelTopologyZone, corev1.DoNotSchedule, nil),
		}}},
		{name: "spread by hostname when the hoster allows no node label", policy: Policy{}, spec: infrav1.KubeVirtMachineSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			spread(corev1.LabelHostname, corev1.DoNotSchedule, nil),
		}}},
		{name: "spread by a label the hoster keeps", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			spread(corev1.LabelHostname, corev1.DoNotSchedule, nil),
			spread("example.com/infrastructure-reserved", corev1.DoNotSchedule, nil),
		}}, want: map[string]string{"spec.topologySpreadConstraints[1].topologyKey": `node label "example.com/infrastructure-reserved" is not one a tenant may spread by ` +
			"(a spread places instances only on nodes with its key); the hoster allows kubernetes.io/arch, kubernetes.io/os, topology.kubernetes.io/region, " +
			"topology.kubernetes.io/zone (--tenant-node-affinity-keys), and kubernetes.io/hostname"}},
		{name: "spread by zone when the hoster allows no node label", policy: Policy{}, spec: infrav1.KubeVirtMachineSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			spread(corev1.LabelTopologyZone, corev1.ScheduleAnyway, nil),
		}}, want: map[string]string{"spec.topologySpreadConstraints[0].topologyKey": "the hoster allows none (--tenant-node-affinity-keys), and kubernetes.io/hostname"}},

		// Pod (anti-)affinity.
		{name: "pod affinity within the machine's namespace", policy: Policy{}, spec: infrav1.KubeVirtMachineSpec{Affinity: &corev1.Affinity{
			PodAffinity:     &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{podTerm(nil, nil), podTerm([]string{"tenant-a"}, nil)}},
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: podTerm(nil, nil)}}},
		}}},
		{name: "pod affinity to another namespace", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: &corev1.Affinity{
			PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{podTerm([]string{"tenant-a", "kube-system"}, nil)}},
		}}, want: map[string]string{
			"spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[1]": `namespace "kube-system" is not the machine's`}},
		{name: "preferred pod anti-affinity to every namespace", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: &corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 1, PodAffinityTerm: podTerm(nil, &metav1.LabelSelector{})}}},
		}}, want: map[string]string{
			"spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaceSelector": "selects Pods of other namespaces"}},
		{name: "required pod anti-affinity by namespace labels", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{Affinity: &corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				podTerm(nil, &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "b"}})}},
		}}, want: map[string]string{
			"spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector": "only Pods of their own namespace tenant-a"}},

		// Dedicated CPUs.
		{name: "dedicated CPUs by default", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 2, DedicatedCPUPlacement: true}},
			want: map[string]string{"spec.cpu.dedicatedCPUPlacement": "--tenant-dedicated-cpu-placement=false"}},
		{name: "dedicated CPUs the hoster allows", policy: Policy{DedicatedCPUPlacement: true}, spec: infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 2, DedicatedCPUPlacement: true}}},

		// Devices.
		{name: "a GPU by default", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{GPUs: []infrav1.GPU{{Name: "gpu1", DeviceName: gpu}}},
			want: map[string]string{"spec.gpus[0].deviceName": `device "nvidia.com/GA102GL_A10" is not one a tenant may use; the hoster allows none (--tenant-device-names)`}},
		{name: "a host device by default", policy: DefaultPolicy(), spec: infrav1.KubeVirtMachineSpec{HostDevices: []infrav1.HostDevice{{Name: "nic", DeviceName: "intel.com/E810"}}},
			want: map[string]string{"spec.hostDevices[0].deviceName": `device "intel.com/E810"`}},
		{name: "a GPU the hoster allows, and a host device it does not", policy: Policy{DeviceNames: []string{gpu}}, spec: infrav1.KubeVirtMachineSpec{
			GPUs:        []infrav1.GPU{{Name: "gpu1", DeviceName: gpu}},
			HostDevices: []infrav1.HostDevice{{Name: "nic", DeviceName: "intel.com/E810"}},
		}, want: map[string]string{"spec.hostDevices[0].deviceName": "the hoster allows " + gpu + " (--tenant-device-names)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := tc.policy.Validate(&tc.spec, "tenant-a", field.NewPath("spec"))
			got := map[string]string{}
			for _, e := range errs {
				g.Expect(e.Type).To(Equal(field.ErrorTypeForbidden))
				got[e.Field] = e.Error()
			}
			g.Expect(got).To(HaveLen(len(tc.want)), "%v", errs)
			for path, words := range tc.want {
				g.Expect(got).To(HaveKeyWithValue(path, ContainSubstring(words)))
			}
		})
	}
}

// TestFlags: the defaults are DefaultPolicy's, a list is comma-separated, and
// an empty value, or only commas (a clusterctl variable cannot be
// empty), is the empty list.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Policy
	}{
		{name: "no flags", want: DefaultPolicy()},
		{name: "lists and the bool", args: []string{
			"--tenant-toleration-keys=example.com/gpu, node.kubernetes.io/not-ready",
			"--tenant-node-affinity-keys=topology.kubernetes.io/zone",
			"--tenant-device-names=" + gpu,
			"--tenant-dedicated-cpu-placement",
			"--reserved-node-labels=node-role.kubernetes.io/control-plane,example.com/infrastructure-reserved",
		}, want: Policy{
			TolerationKeys:        []string{"example.com/gpu", "node.kubernetes.io/not-ready"},
			NodeAffinityKeys:      []string{"topology.kubernetes.io/zone"},
			DeviceNames:           []string{gpu},
			DedicatedCPUPlacement: true,
			ReservedNodeLabels:    []string{"node-role.kubernetes.io/control-plane", "example.com/infrastructure-reserved"},
		}},
		{name: "empty lists", args: []string{"--tenant-toleration-keys=", "--tenant-node-affinity-keys=,", "--reserved-node-labels="},
			want: Policy{TolerationKeys: []string{}, NodeAffinityKeys: []string{}, ReservedNodeLabels: []string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
			var p Policy
			p.AddFlags(fs)
			g.Expect(fs.Parse(tc.args)).To(Succeed())
			g.Expect(p).To(Equal(tc.want))
			g.Expect(p.Check()).To(Succeed())
		})
	}
	t.Run("a key that could never match is refused", func(t *testing.T) {
		g := NewWithT(t)
		err := Policy{TolerationKeys: []string{"bad key"}, ReservedNodeLabels: []string{"/x"}}.Check()
		g.Expect(err).To(HaveOccurred())
		g.Expect(strings.Count(err.Error(), "Invalid value")).To(BeNumerically(">=", 2))
		g.Expect(err.Error()).To(ContainSubstring(`tenant-toleration-keys[0]: Invalid value: "bad key"`))
	})
}
