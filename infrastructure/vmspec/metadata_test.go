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

package vmspec

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// TestValidateMetadataAndSpread: a tenant's labels and annotations are of
// Kubernetes' syntax and of no key the provider, KubeVirt, Cluster API or
// (on the instance) a network plugin acts on, and its spread constraints
// are ones the API server creates a Pod with; each refusal is on its key
// or field.
func TestValidateMetadataAndSpread(t *testing.T) {
	bridge := kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation
	spread := func(mutate func(*corev1.TopologySpreadConstraint)) func(*infrav1.KubeVirtMachineSpec) {
		return func(s *infrav1.KubeVirtMachineSpec) {
			c := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cluster.x-k8s.io/cluster-name": "tenant"}}}
			mutate(&c)
			s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{c}
		}
	}
	vmLabels := func(kv ...string) func(*infrav1.KubeVirtMachineSpec) {
		return func(s *infrav1.KubeVirtMachineSpec) { s.VirtualMachineMetadata.Labels = pairs(kv) }
	}
	vmAnnotations := func(kv ...string) func(*infrav1.KubeVirtMachineSpec) {
		return func(s *infrav1.KubeVirtMachineSpec) { s.VirtualMachineMetadata.Annotations = pairs(kv) }
	}
	instanceLabels := func(kv ...string) func(*infrav1.KubeVirtMachineSpec) {
		return func(s *infrav1.KubeVirtMachineSpec) { s.InstanceMetadata.Labels = pairs(kv) }
	}
	instanceAnnotations := func(kv ...string) func(*infrav1.KubeVirtMachineSpec) {
		return func(s *infrav1.KubeVirtMachineSpec) { s.InstanceMetadata.Annotations = pairs(kv) }
	}
	for _, tc := range []struct {
		name   string
		mutate func(*infrav1.KubeVirtMachineSpec)
		// want maps each refused field to words its error carries.
		want map[string]string
	}{
		{name: "nothing added", mutate: func(*infrav1.KubeVirtMachineSpec) {}},
		{name: "Cozystack's instance labels and annotation", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			instanceLabels("apps.cozystack.io/application.kind", "Kubernetes", "apps.cozystack.io/application.name", "tenant",
				"node-role.kubernetes.io/worker", "")(s)
			instanceAnnotations(bridge, "true")(s)
			vmLabels("node-role.kubernetes.io/worker", "")(s)
		}},
		{name: "a label that is not a label", mutate: vmLabels("a b", "c"),
			want: map[string]string{"spec.virtualMachineMetadata.labels[a b]": "name part must consist of alphanumeric characters"}},
		{name: "a label value too long", mutate: instanceLabels("team", strings.Repeat("a", 64)),
			want: map[string]string{"spec.instanceMetadata.labels[team]": "must be no more than 63 bytes"}},
		{name: "an annotation key that is not a key", mutate: vmAnnotations("-bad", "x"),
			want: map[string]string{"spec.virtualMachineMetadata.annotations[-bad]": "name part must consist of alphanumeric characters"}},
		{name: "annotations larger than an object carries", mutate: instanceAnnotations("a", strings.Repeat("x", 256*1024)),
			want: map[string]string{"spec.instanceMetadata.annotations": "may not be more than 262144 bytes"}},

		// Keys of the provider, KubeVirt and Cluster API.
		{name: "the provider's machine label", mutate: instanceLabels(infrav1.MachineNameLabel, "other"),
			want: map[string]string{"spec.instanceMetadata.labels[infrastructure.cozystack.io/kubevirt-machine]": "keys of infrastructure.cozystack.io and its subdomains are the provider's"}},
		{name: "the provider's management cluster label", mutate: vmLabels(infrav1.ManagementClusterLabel, "other"),
			want: map[string]string{"spec.virtualMachineMetadata.labels[infrastructure.cozystack.io/management-cluster]": "the provider's"}},
		{name: "Cluster API's deployment name", mutate: instanceLabels("cluster.x-k8s.io/deployment-name", "other"),
			want: map[string]string{"spec.instanceMetadata.labels[cluster.x-k8s.io/deployment-name]": "are Cluster API's; the provider sets cluster-name, deployment-name and role itself"}},
		{name: "a subdomain of Cluster API's", mutate: vmAnnotations("topology.cluster.x-k8s.io/dry-run", ""),
			want: map[string]string{"spec.virtualMachineMetadata.annotations[topology.cluster.x-k8s.io/dry-run]": "Cluster API's"}},
		{name: "KubeVirt's hook sidecars", mutate: instanceAnnotations("hooks.kubevirt.io/hookSidecars", `[{"image": "x"}]`),
			want: map[string]string{"spec.instanceMetadata.annotations[hooks.kubevirt.io/hookSidecars]": "KubeVirt's, which acts on them"}},
		{name: "KubeVirt's VM label", mutate: vmLabels("kubevirt.io/vm", "other"),
			want: map[string]string{"spec.virtualMachineMetadata.labels[kubevirt.io/vm]": "KubeVirt's"}},
		{name: "the bridge live-migration annotation as a label", mutate: instanceLabels(bridge, "true"),
			want: map[string]string{"spec.instanceMetadata.labels[kubevirt.io/allow-pod-bridge-network-live-migration]": "KubeVirt's"}},
		{name: "the bridge live-migration annotation on the VM", mutate: vmAnnotations(bridge, "true"),
			want: map[string]string{"spec.virtualMachineMetadata.annotations[kubevirt.io/allow-pod-bridge-network-live-migration]": "set it in spec.instanceMetadata.annotations instead"}},
		{name: "a domain that only ends like KubeVirt's", mutate: vmLabels("notkubevirt.io/x", "y")},

		// Network plugins read the launcher Pod's annotations.
		{name: "Multus networks on the instance", mutate: instanceAnnotations("k8s.v1.cni.cncf.io/networks", "tenant-b/storage"),
			want: map[string]string{"spec.instanceMetadata.annotations[k8s.v1.cni.cncf.io/networks]": "a network plugin's"}},
		{name: "a Kube-OVN subnet on the instance", mutate: instanceAnnotations("ovn.kubernetes.io/logical_switch", "tenant-b"),
			want: map[string]string{"spec.instanceMetadata.annotations[ovn.kubernetes.io/logical_switch]": "a network plugin's"}},
		{name: "a Kube-OVN attachment address on the instance", mutate: instanceAnnotations("storage.tenant-b.ovn.kubernetes.io/ip_address", "10.0.0.5"),
			want: map[string]string{"spec.instanceMetadata.annotations[storage.tenant-b.ovn.kubernetes.io/ip_address]": "a network plugin's"}},
		{name: "a network plugin's key on the VM, which no Pod carries", mutate: vmAnnotations("k8s.v1.cni.cncf.io/networks", "x")},

		// Spread constraints.
		{name: "a spread as Cozystack's", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.TopologyKey, c.MinDomains = corev1.LabelTopologyZone, ptr.To[int32](2)
			c.MatchLabelKeys = []string{"cluster.x-k8s.io/deployment-name"}
			c.NodeAffinityPolicy, c.NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor), ptr.To(corev1.NodeInclusionPolicyIgnore)
		})},
		{name: "no skew", mutate: spread(func(c *corev1.TopologySpreadConstraint) { c.MaxSkew = 0 }),
			want: map[string]string{"spec.topologySpreadConstraints[0].maxSkew": "must be greater than zero"}},
		{name: "no topology key", mutate: spread(func(c *corev1.TopologySpreadConstraint) { c.TopologyKey = "" }),
			want: map[string]string{"spec.topologySpreadConstraints[0].topologyKey": "the node label it spreads across"}},
		{name: "an unknown action", mutate: spread(func(c *corev1.TopologySpreadConstraint) { c.WhenUnsatisfiable = "Maybe" }),
			want: map[string]string{"spec.topologySpreadConstraints[0].whenUnsatisfiable": `supported values: "DoNotSchedule", "ScheduleAnyway"`}},
		{name: "minDomains when scheduling anyway", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.WhenUnsatisfiable, c.MinDomains = corev1.ScheduleAnyway, ptr.To[int32](2)
		}), want: map[string]string{"spec.topologySpreadConstraints[0].minDomains": "only with whenUnsatisfiable DoNotSchedule"}},
		{name: "no domains", mutate: spread(func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr.To[int32](0) }),
			want: map[string]string{"spec.topologySpreadConstraints[0].minDomains": "must be greater than zero"}},
		{name: "a node affinity policy KubeVirt's Pod cannot take", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.NodeAffinityPolicy = ptr.To[corev1.NodeInclusionPolicy]("Always")
		}), want: map[string]string{"spec.topologySpreadConstraints[0].nodeAffinityPolicy": `supported values: "Honor", "Ignore"`}},
		{name: "a node taints policy KubeVirt's Pod cannot take", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.NodeTaintsPolicy = ptr.To[corev1.NodeInclusionPolicy]("honor")
		}), want: map[string]string{"spec.topologySpreadConstraints[0].nodeTaintsPolicy": `supported values: "Honor", "Ignore"`}},
		{name: "a selector that is not one", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
		}), want: map[string]string{"spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator": "not a valid selector operator"}},
		{name: "matchLabelKeys without a selector", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.LabelSelector, c.MatchLabelKeys = nil, []string{"app"}
		}), want: map[string]string{"spec.topologySpreadConstraints[0].matchLabelKeys": "must not be set without a labelSelector"}},
		{name: "a key in matchLabelKeys and the selector", mutate: spread(func(c *corev1.TopologySpreadConstraint) {
			c.MatchLabelKeys = []string{"cluster.x-k8s.io/cluster-name"}
		}), want: map[string]string{"spec.topologySpreadConstraints[0].matchLabelKeys[0]": "exists in both matchLabelKeys and labelSelector"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := &infrav1.KubeVirtMachineSpec{}
			tc.mutate(spec)
			errs := ValidateMetadataAndSpread(spec, field.NewPath("spec"))
			got := map[string]string{}
			for _, e := range errs {
				got[e.Field] += e.Error()
			}
			g.Expect(got).To(HaveLen(len(tc.want)), "%v", errs)
			for f, words := range tc.want {
				g.Expect(got).To(HaveKeyWithValue(f, ContainSubstring(words)))
			}
		})
	}
}

// TestRenderRefusesReservedMetadata: the renderer applies the rule to a
// machine written past the webhooks.
func TestRenderRefusesReservedMetadata(t *testing.T) {
	g := NewWithT(t)
	m := machine(func(m *infrav1.KubeVirtMachine) {
		m.Spec.InstanceMetadata.Labels = map[string]string{infrav1.MachineNameLabel: "worker-1"}
	})
	out, errs := Render(input(m, containerDisk()))
	g.Expect(out).To(BeNil())
	g.Expect(fields(errs)).To(ConsistOf("spec.instanceMetadata.labels[infrastructure.cozystack.io/kubevirt-machine]"))
}

func pairs(kv []string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
