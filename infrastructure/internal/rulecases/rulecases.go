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

// Package rulecases is one table of machine specs, with the instancetype,
// preference and KubeVirt configuration they meet, and where real KubeVirt
// v1.7 refuses their VMs. The webhooks' tests, the template resolution's,
// the renderer's and the envtest suite (against virt-api itself) all run
// it, so the places that apply KubeVirt's rules cannot drift apart. Tests
// only.
package rulecases

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
)

// Devices the cases ask for. KubeVirt (Configured) permits A10 and E810.
const (
	A10  = "nvidia.com/GA102GL_A10"
	L40S = "nvidia.com/AD102GL_L40S"
	E810 = "intel.com/E810"
)

// Placement is the hoster's placement policy the cases are written
// under: the defaults, with the cases' devices allowed, so that what
// refuses a case is KubeVirt's rule and not the hoster's.
func Placement() placement.Policy {
	p := placement.DefaultPolicy()
	p.DeviceNames = []string{A10, L40S, E810}
	return p
}

// Names of the instancetype and preference a case's spec refers to, as
// namespaced objects.
const (
	InstancetypeName = "rules-it"
	PreferenceName   = "rules-pref"
)

// Case is a machine spec and what KubeVirt makes of it.
//
// Where each place refuses a case with a Field: the webhooks and the
// template's resolution when it is not Configuration; the resolution alone
// (KubeVirtFeatureNotEnabled) when it is; the renderer, which is not given
// the instancetype, when it is not Configuration and has no Instancetype.
// virt-api refuses the rendered VM of every case refused for its spec.
type Case struct {
	Name string
	// Spec is a classless machine spec with a container disk; it names
	// InstancetypeName and PreferenceName when Instancetype and
	// Preference are set.
	Spec infrav1.KubeVirtMachineSpec
	// Instancetype and Preference are the specs of the objects the spec
	// names; nil for none.
	Instancetype *instancetypev1beta1.VirtualMachineInstancetypeSpec
	Preference   *instancetypev1beta1.VirtualMachinePreferenceSpec
	// KubeVirt is the KubeVirt CR's configuration; Configured when nil.
	KubeVirt *kubevirtv1.KubeVirtConfiguration
	// Field is where the provider refuses the spec (under a spec path),
	// empty when KubeVirt runs its VM.
	Field string
	// Configuration tells that the refusal is the installed KubeVirt's
	// configuration, not the spec: the webhooks and the renderer accept
	// it, the template's resolution waits with KubeVirtFeatureNotEnabled.
	Configuration bool
}

// Configured is the KubeVirt configuration of the cases that do not set
// their own, and of the envtest suite: the HostDevices gate, A10 and E810
// permitted.
func Configured() *kubevirtv1.KubeVirtConfiguration {
	return &kubevirtv1.KubeVirtConfiguration{
		DeveloperConfiguration: &kubevirtv1.DeveloperConfiguration{FeatureGates: []string{"HostDevices"}},
		PermittedHostDevices: &kubevirtv1.PermittedHostDevices{PciHostDevices: []kubevirtv1.PciHostDevice{
			{PCIVendorSelector: "10DE:2236", ResourceName: A10},
			{PCIVendorSelector: "8086:1593", ResourceName: E810},
		}},
	}
}

// KubeVirtCR is the deployed KubeVirt CR of a case, as virt-operator
// reports it on amd64.
func (c Case) KubeVirtCR() *kubevirtv1.KubeVirt {
	configuration := c.KubeVirt
	if configuration == nil {
		configuration = Configured()
	}
	return &kubevirtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"},
		Spec:       kubevirtv1.KubeVirtSpec{Configuration: *configuration.DeepCopy()},
		Status:     kubevirtv1.KubeVirtStatus{Phase: kubevirtv1.KubeVirtPhaseDeployed, DefaultArchitecture: "amd64"},
	}
}

// SpecRefused tells whether the case is refused for its spec: by the
// webhooks and the template's resolution.
func (c Case) SpecRefused() bool { return c.Field != "" && !c.Configuration }

// RenderRefused tells whether the renderer refuses the case: it is given
// the preference, not the instancetype.
func (c Case) RenderRefused() bool { return c.SpecRefused() && c.Instancetype == nil }

// Objects are the case's instancetype and preference in namespace.
func (c Case) Objects(namespace string) []client.Object {
	var objs []client.Object
	if c.Instancetype != nil {
		objs = append(objs, &instancetypev1beta1.VirtualMachineInstancetype{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: InstancetypeName}, Spec: *c.Instancetype.DeepCopy()})
	}
	if c.Preference != nil {
		objs = append(objs, &instancetypev1beta1.VirtualMachinePreference{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: PreferenceName}, Spec: *c.Preference.DeepCopy()})
	}
	return objs
}

func spec(mutate func(*infrav1.KubeVirtMachineSpec)) infrav1.KubeVirtMachineSpec {
	s := infrav1.KubeVirtMachineSpec{
		Image: &infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{
			Reference: "registry.example.com/workers/kairos-worker@sha256:1111111111111111111111111111111111111111111111111111111111111111"}},
		CPU:    &infrav1.CPU{Cores: 2},
		Memory: ptr.To(resource.MustParse("4Gi")),
	}
	if mutate != nil {
		mutate(&s)
	}
	return s
}

// sized replaces cpu and memory by the instancetype.
func sized(s *infrav1.KubeVirtMachineSpec) {
	s.CPU, s.Memory = nil, nil
	s.Instancetype = &infrav1.InstancetypeReference{Kind: infrav1.NamespacedInstancetypeKind, Name: InstancetypeName}
}

func preferred(s *infrav1.KubeVirtMachineSpec) {
	s.Preference = &infrav1.PreferenceReference{Kind: infrav1.NamespacedPreferenceKind, Name: PreferenceName}
}

func instancetype(vCPUs uint32, gpus []string, hostDevices []string) *instancetypev1beta1.VirtualMachineInstancetypeSpec {
	it := &instancetypev1beta1.VirtualMachineInstancetypeSpec{
		CPU:    instancetypev1beta1.CPUInstancetype{Guest: vCPUs},
		Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("8Gi")},
	}
	for i, g := range gpus {
		it.GPUs = append(it.GPUs, kubevirtv1.GPU{Name: "itgpu" + string(rune('a'+i)), DeviceName: g})
	}
	for i, d := range hostDevices {
		it.HostDevices = append(it.HostDevices, kubevirtv1.HostDevice{Name: "itdev" + string(rune('a'+i)), DeviceName: d})
	}
	return it
}

func spread(ratio uint32, across instancetypev1beta1.SpreadAcross) *instancetypev1beta1.VirtualMachinePreferenceSpec {
	p := &instancetypev1beta1.VirtualMachinePreferenceSpec{CPU: &instancetypev1beta1.CPUPreferences{
		PreferredCPUTopology: ptr.To(instancetypev1beta1.Spread)}}
	if ratio != 0 {
		p.CPU.SpreadOptions = &instancetypev1beta1.SpreadOptions{Ratio: ptr.To(ratio), Across: ptr.To(across)}
	}
	return p
}

func gpu(device string) infrav1.GPU { return infrav1.GPU{Name: "vmgpu", DeviceName: device} }

func hostDevice(device string) infrav1.HostDevice {
	return infrav1.HostDevice{Name: "vmdev", DeviceName: device}
}

// Cases are the rules' table.
func Cases() []Case {
	return []Case{
		// GPUs and host devices beside an instancetype's
		// (pkg/instancetype/apply: applyGPUs, applyHostDevices).
		{Name: "an instancetype's GPU", Spec: spec(sized), Instancetype: instancetype(4, []string{A10}, nil)},
		{Name: "a GPU in the VM beside an instancetype without GPUs",
			Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); s.GPUs = []infrav1.GPU{gpu(A10)} }), Instancetype: instancetype(4, nil, nil)},
		{Name: "the instancetype's GPU listed again in the VM",
			Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); s.GPUs = []infrav1.GPU{gpu(A10)} }), Instancetype: instancetype(4, []string{A10}, nil),
			Field: "gpus"},
		{Name: "another GPU in the VM beside an instancetype's",
			Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); s.GPUs = []infrav1.GPU{gpu(E810)} }), Instancetype: instancetype(4, []string{A10}, nil),
			Field: "gpus"},
		{Name: "a host device in the VM beside an instancetype's",
			Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); s.HostDevices = []infrav1.HostDevice{hostDevice(A10)} }), Instancetype: instancetype(4, nil, []string{E810}),
			Field: "hostDevices"},
		{Name: "a GPU in the VM beside an instancetype's host device",
			Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); s.GPUs = []infrav1.GPU{gpu(A10)} }), Instancetype: instancetype(4, nil, []string{E810})},

		// vCPUs a spread preference cannot divide
		// (pkg/instancetype/preference/validation: CheckSpreadCPUTopology).
		{Name: "4 cores spread at the default ratio", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { preferred(s); s.CPU.Cores = 4 }),
			Preference: spread(0, "")},
		{Name: "3 cores spread at the default ratio", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { preferred(s); s.CPU.Cores = 3 }),
			Preference: spread(0, ""), Field: "cpu.cores"},
		{Name: "6 cores spread across sockets, cores and threads at 2", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { preferred(s); s.CPU.Cores = 6 }),
			Preference: spread(2, instancetypev1beta1.SpreadAcrossSocketsCoresThreads), Field: "cpu.cores"},
		{Name: "an instancetype's 3 vCPUs spread", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); preferred(s) }),
			Instancetype: instancetype(3, nil, nil), Preference: spread(0, ""), Field: "instancetype.name"},
		// KubeVirt's preference webhook allows only 2 across cores and
		// threads.
		{Name: "an instancetype's 6 vCPUs spread across cores and threads", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); preferred(s) }),
			Instancetype: instancetype(6, nil, nil), Preference: spread(2, instancetypev1beta1.SpreadAcrossCoresThreads)},
		{Name: "an instancetype's 8 vCPUs spread across sockets, cores and threads at 3", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { sized(s); preferred(s) }),
			Instancetype: instancetype(8, nil, nil), Preference: spread(3, instancetypev1beta1.SpreadAcrossSocketsCoresThreads), Field: "instancetype.name"},
		{Name: "3 cores in sockets", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { preferred(s); s.CPU.Cores = 3 }),
			Preference: &instancetypev1beta1.VirtualMachinePreferenceSpec{}},

		// The installed KubeVirt's configuration (virt-api's feature gate
		// checks, virt-controller's permittedHostDevices).
		{Name: "a host device without the HostDevices gate",
			Spec:     spec(func(s *infrav1.KubeVirtMachineSpec) { s.HostDevices = []infrav1.HostDevice{hostDevice(E810)} }),
			KubeVirt: &kubevirtv1.KubeVirtConfiguration{}, Field: "hostDevices", Configuration: true},
		{Name: "an instancetype's host device without the HostDevices gate", Spec: spec(sized),
			Instancetype: instancetype(4, nil, []string{E810}), KubeVirt: &kubevirtv1.KubeVirtConfiguration{}, Field: "instancetype.name", Configuration: true},
		{Name: "a host device with the HostDevices gate",
			Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.HostDevices = []infrav1.HostDevice{hostDevice(E810)} })},
		{Name: "a GPU KubeVirt does not permit", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.GPUs = []infrav1.GPU{gpu(L40S)} }),
			Field: "gpus[0].deviceName", Configuration: true},
		{Name: "an instancetype's GPU KubeVirt does not permit", Spec: spec(sized), Instancetype: instancetype(4, []string{L40S}, nil),
			Field: "instancetype.name", Configuration: true},
		{Name: "any GPU when KubeVirt permits no list", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.GPUs = []infrav1.GPU{gpu(L40S)} }),
			KubeVirt: &kubevirtv1.KubeVirtConfiguration{}},
		{Name: "a GPU KubeVirt does not permit, with GPUs from DRA", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.GPUs = []infrav1.GPU{gpu(L40S)} }),
			KubeVirt: &kubevirtv1.KubeVirtConfiguration{
				DeveloperConfiguration: &kubevirtv1.DeveloperConfiguration{FeatureGates: []string{"GPUsWithDRA"}},
				PermittedHostDevices:   Configured().PermittedHostDevices}},
		{Name: "a host device KubeVirt does not permit", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.HostDevices = []infrav1.HostDevice{hostDevice(L40S)} }),
			Field: "hostDevices[0].deviceName", Configuration: true},
		{Name: "arm64 without the MultiArchitecture gate", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.Architecture = infrav1.ArchitectureArm64 }),
			Field: "architecture", Configuration: true},
		{Name: "a preference's arm64 without the MultiArchitecture gate", Spec: spec(preferred),
			Preference: &instancetypev1beta1.VirtualMachinePreferenceSpec{PreferredArchitecture: ptr.To("arm64")}, Field: "preference.name", Configuration: true},
		{Name: "arm64 with the MultiArchitecture gate", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.Architecture = infrav1.ArchitectureArm64 }),
			KubeVirt: &kubevirtv1.KubeVirtConfiguration{DeveloperConfiguration: &kubevirtv1.DeveloperConfiguration{FeatureGates: []string{"MultiArchitecture"}}}},
		{Name: "KubeVirt's own architecture", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.Architecture = infrav1.ArchitectureAmd64 }),
			KubeVirt: &kubevirtv1.KubeVirtConfiguration{}},

		// A tenant's metadata and spread (vmspec.ValidateMetadataAndSpread,
		// placement.Policy) and a bridged pod network's live migration
		// (internal/migration: virt-handler's VerifyVMIMigratable).
		{Name: "Cozystack's VM and instance labels and annotations", Spec: spec(cozystackMetadata)},
		{Name: "a spread by hostname and by zone of the tenant's own Pods", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
				spreadBy(corev1.LabelHostname, corev1.ScheduleAnyway),
				spreadBy(corev1.LabelTopologyZone, corev1.DoNotSchedule),
			}
			s.TopologySpreadConstraints[0].MatchLabelKeys = []string{"cluster.x-k8s.io/deployment-name"}
			s.TopologySpreadConstraints[1].NodeAffinityPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
			s.TopologySpreadConstraints[1].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyIgnore)
		})},
		{Name: "a bridged pod network live-migrating with KubeVirt's annotation", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			bridgedPodNetwork(s)
			cozystackMetadata(s)
			s.EvictionStrategy = infrav1.EvictionLiveMigrate
		})},
		{Name: "a bridged pod network live-migrating without the annotation", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			bridgedPodNetwork(s)
			s.EvictionStrategy = infrav1.EvictionLiveMigrate
		}), Field: "evictionStrategy"},
		{Name: "a bridged pod network evicted by an external controller", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			bridgedPodNetwork(s)
			s.EvictionStrategy = infrav1.EvictionExternal
		})},
		{Name: "the provider's machine label on the instance", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.InstanceMetadata.Labels = map[string]string{infrav1.MachineNameLabel: "another"}
		}), Field: "instanceMetadata.labels[" + infrav1.MachineNameLabel + "]"},
		{Name: "KubeVirt's hook sidecar annotation on the instance", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.InstanceMetadata.Annotations = map[string]string{"hooks.kubevirt.io/hookSidecars": `[{"image": "registry.example.com/sidecar:1"}]`}
		}), Field: "instanceMetadata.annotations[hooks.kubevirt.io/hookSidecars]"},
		{Name: "Cluster API's label on the VirtualMachine", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.VirtualMachineMetadata.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "another"}
		}), Field: "virtualMachineMetadata.labels[cluster.x-k8s.io/cluster-name]"},
		{Name: "a spread whose node affinity policy the launcher Pod cannot take", Spec: spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{spreadBy(corev1.LabelHostname, corev1.DoNotSchedule)}
			s.TopologySpreadConstraints[0].NodeAffinityPolicy = ptr.To[corev1.NodeInclusionPolicy]("Always")
		}), Field: "topologySpreadConstraints[0].nodeAffinityPolicy"},
	}
}

// cozystackMetadata is the metadata Cozystack's worker VMs carry: its
// application labels, the node role, and the annotation that lets a
// bridged pod network live-migrate.
func cozystackMetadata(s *infrav1.KubeVirtMachineSpec) {
	s.VirtualMachineMetadata.Labels = map[string]string{"node-role.kubernetes.io/worker": ""}
	s.InstanceMetadata.Labels = map[string]string{
		"apps.cozystack.io/application.group": "apps.cozystack.io",
		"apps.cozystack.io/application.kind":  "Kubernetes",
		"apps.cozystack.io/application.name":  "tenant",
		"node-role.kubernetes.io/worker":      "",
	}
	s.InstanceMetadata.Annotations = map[string]string{kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation: "true"}
}

func bridgedPodNetwork(s *infrav1.KubeVirtMachineSpec) {
	s.Networks = []infrav1.Network{{Name: "default", Pod: &infrav1.PodNetwork{}, Binding: infrav1.BridgeBinding}}
}

func spreadBy(key string, when corev1.UnsatisfiableConstraintAction) corev1.TopologySpreadConstraint {
	return corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: when,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cluster.x-k8s.io/cluster-name": "tenant"}}}
}
