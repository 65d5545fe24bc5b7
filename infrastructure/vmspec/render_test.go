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
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

const (
	digestRef = "registry.example.com/workers/kairos-worker@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testCA    = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
)

// userData has bytes a text round trip would mangle: it must reach the
// Secret unchanged.
var userData = []byte("#cloud-config\nhostname: worker-0\n\x00\xff\r\n")

func machine(mutate ...func(*infrav1.KubeVirtMachine)) *infrav1.KubeVirtMachine {
	m := &infrav1.KubeVirtMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-0", Namespace: "tenant-a", UID: "uid-1"},
		Spec: infrav1.KubeVirtMachineSpec{
			CPU:    &infrav1.CPU{Cores: 2},
			Memory: ptr.To(resource.MustParse("4Gi")),
		},
	}
	for _, f := range mutate {
		f(m)
	}
	return m
}

func containerDisk() infrav1.ImageSource {
	return infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: digestRef}}
}

func input(m *infrav1.KubeVirtMachine, image infrav1.ImageSource) Input {
	return Input{Machine: m, ClusterName: "cluster-a", Image: image, UserData: userData}
}

func withRootDisk(size string) func(*infrav1.KubeVirtMachine) {
	return func(m *infrav1.KubeVirtMachine) {
		m.Spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse(size)), StorageClassName: "replicated"}
	}
}

func mustRender(t *testing.T, in Input) *Objects {
	t.Helper()
	out, errs := Render(in)
	if len(errs) > 0 {
		t.Fatalf("render: %v", errs.ToAggregate())
	}
	return out
}

func volume(vm *kubevirtv1.VirtualMachine, name string) kubevirtv1.Volume {
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return kubevirtv1.Volume{}
}

func TestImageSources(t *testing.T) {
	t.Run("container disk boots the digest-pinned image and creates no DataVolume", func(t *testing.T) {
		g := NewWithT(t)
		out := mustRender(t, input(machine(), containerDisk()))
		g.Expect(volume(out.VirtualMachine, "root").ContainerDisk).To(Equal(&kubevirtv1.ContainerDiskSource{
			Image: digestRef, ImagePullPolicy: corev1.PullIfNotPresent}))
		g.Expect(out.RootDataVolume).To(BeNil())
		g.Expect(out.ImportCA).To(BeNil())
		g.Expect(IsEphemeral(containerDisk())).To(BeTrue())
	})

	t.Run("HTTP import creates a sized DataVolume that trusts the CA ConfigMap", func(t *testing.T) {
		g := NewWithT(t)
		img := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{
			URL: "https://factory.example.com/image/abc/v1.13.6/nocloud-amd64.raw.xz", CABundle: testCA}}
		out := mustRender(t, input(machine(withRootDisk("20Gi")), img))
		dv := out.RootDataVolume
		g.Expect(dv.Name).To(Equal("worker-0-root"))
		g.Expect(dv.Spec.Source.HTTP).To(Equal(&cdiv1.DataVolumeSourceHTTP{URL: img.HTTPImport.URL, CertConfigMap: "worker-0-import-ca"}))
		g.Expect(dv.Spec.Storage.Resources.Requests).To(HaveKeyWithValue(corev1.ResourceStorage, resource.MustParse("20Gi")))
		g.Expect(dv.Spec.Storage.StorageClassName).To(Equal(ptr.To("replicated")))
		g.Expect(dv.Annotations).To(HaveKeyWithValue(KeepAfterCompletionAnnotation, "false"))
		g.Expect(out.ImportCA.Name).To(Equal("worker-0-import-ca"))
		g.Expect(out.ImportCA.Data).To(Equal(map[string]string{ImportCAKey: testCA}))
		g.Expect(volume(out.VirtualMachine, "root").DataVolume).To(Equal(&kubevirtv1.DataVolumeSource{Name: "worker-0-root"}))
		g.Expect(IsEphemeral(img)).To(BeFalse())
	})

	t.Run("HTTP import without a CA bundle uses the system trust", func(t *testing.T) {
		g := NewWithT(t)
		img := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/disk.raw.xz"}}
		out := mustRender(t, input(machine(withRootDisk("20Gi")), img))
		g.Expect(out.ImportCA).To(BeNil())
		g.Expect(out.RootDataVolume.Spec.Source.HTTP.CertConfigMap).To(BeEmpty())
	})

	t.Run("clone of a golden DataSource references it by sourceRef, defaulting to the machine's namespace", func(t *testing.T) {
		g := NewWithT(t)
		img := infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "talos-v1-13-6"}}
		out := mustRender(t, input(machine(), img))
		g.Expect(out.RootDataVolume.Spec.SourceRef).To(Equal(&cdiv1.DataVolumeSourceRef{
			Kind: cdiv1.DataVolumeDataSource, Namespace: ptr.To("tenant-a"), Name: "talos-v1-13-6"}))
		g.Expect(out.RootDataVolume.Spec.Source).To(BeNil())
		g.Expect(out.RootDataVolume.Spec.Storage.Resources.Requests).To(BeEmpty(), "a clone takes its source's size")
	})

	t.Run("clone of a golden PVC in another namespace uses source.pvc", func(t *testing.T) {
		g := NewWithT(t)
		img := infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromPersistentVolumeClaim, Namespace: "cozy-golden", Name: "talos"}}
		out := mustRender(t, input(machine(), img))
		g.Expect(out.RootDataVolume.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: "cozy-golden", Name: "talos"}))
	})
}

func TestDatasources(t *testing.T) {
	for _, tc := range []struct {
		name       string
		datasource infrav1.CloudInitDatasource
		configure  func(kubevirtv1.Volume) *corev1.LocalObjectReference
	}{
		{"empty datasource attaches NoCloud", "", func(v kubevirtv1.Volume) *corev1.LocalObjectReference {
			return v.CloudInitNoCloud.UserDataSecretRef
		}},
		{"NoCloud attaches the user data Secret as a NoCloud volume", infrav1.NoCloudDatasource, func(v kubevirtv1.Volume) *corev1.LocalObjectReference {
			return v.CloudInitNoCloud.UserDataSecretRef
		}},
		{"ConfigDrive attaches the user data Secret as a config drive", infrav1.ConfigDriveDatasource, func(v kubevirtv1.Volume) *corev1.LocalObjectReference {
			return v.CloudInitConfigDrive.UserDataSecretRef
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := input(machine(), containerDisk())
			in.Datasource = tc.datasource
			out := mustRender(t, in)
			v := volume(out.VirtualMachine, "cloudinit")
			g.Expect(tc.configure(v)).To(Equal(&corev1.LocalObjectReference{Name: "worker-0-userdata"}))
			g.Expect(v.CloudInitNoCloud != nil).NotTo(Equal(v.CloudInitConfigDrive != nil), "exactly one datasource")
		})
	}
}

func TestBootstrapDataIsAttachedUnchanged(t *testing.T) {
	g := NewWithT(t)
	out := mustRender(t, input(machine(), containerDisk()))
	g.Expect(out.UserData.Name).To(Equal("worker-0-userdata"))
	g.Expect(out.UserData.Data).To(Equal(map[string][]byte{UserDataKey: userData}))
	g.Expect(out.UserData.Type).To(Equal(corev1.SecretTypeOpaque))
	// The VM carries only a reference: no user data, no SSH users or keys.
	raw, err := json.Marshal(out.VirtualMachine)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).NotTo(ContainSubstring("cloud-config"))
	g.Expect(out.VirtualMachine.Spec.Template.Spec.AccessCredentials).To(BeEmpty())
}

func TestIdentity(t *testing.T) {
	g := NewWithT(t)
	out := mustRender(t, input(machine(withRootDisk("10Gi")), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: testCA}}))
	g.Expect(out.VirtualMachine.Name).To(Equal("worker-0"), "the VM is named after the machine")
	g.Expect(out.VirtualMachine.Spec.Template.Spec.Hostname).To(Equal("worker-0"))
	wantLabels := map[string]string{clusterv1.ClusterNameLabel: "cluster-a", infrav1.MachineNameLabel: "worker-0", RoleLabel: WorkerRole}
	g.Expect(out.VirtualMachine.Spec.Template.ObjectMeta.Labels).To(Equal(wantLabels), "the VMI carries the labels the watch maps by")
	for _, obj := range []metav1.Object{out.VirtualMachine, out.RootDataVolume, out.ImportCA, out.UserData} {
		g.Expect(obj.GetNamespace()).To(Equal("tenant-a"))
		g.Expect(obj.GetLabels()).To(Equal(wantLabels))
		g.Expect(obj.GetOwnerReferences()).To(ConsistOf(metav1.OwnerReference{
			APIVersion: infrav1.GroupVersion.String(), Kind: "KubeVirtMachine", Name: "worker-0", UID: "uid-1",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}))
	}

	// In an infrastructure cluster of their own the labels alone name the
	// machine: an owner reference cannot point across clusters.
	in := input(machine(withRootDisk("10Gi")), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: testCA}})
	in.Unowned = true
	in.ExtraLabels = map[string]string{infrav1.ManagementClusterLabel: "mgmt-a"}
	out = mustRender(t, in)
	remoteLabels := map[string]string{infrav1.ManagementClusterLabel: "mgmt-a"}
	maps.Copy(remoteLabels, wantLabels)
	g.Expect(out.VirtualMachine.Spec.Template.ObjectMeta.Labels).To(Equal(remoteLabels), "the VMI carries the management cluster's identity")
	for _, obj := range []metav1.Object{out.VirtualMachine, out.RootDataVolume, out.ImportCA, out.UserData} {
		g.Expect(obj.GetLabels()).To(Equal(remoteLabels))
		g.Expect(obj.GetOwnerReferences()).To(BeEmpty(), "%s", obj.GetName())
	}
}

// TestClusterAPILabels: every object carries Cluster API's usual labels,
// as CAPK puts them on its VMs: the cluster, the role read from the
// Machine's control-plane label, and the Machine's MachineDeployment when
// it has one.
func TestClusterAPILabels(t *testing.T) {
	for _, tc := range []struct {
		name         string
		deployment   string
		controlPlane bool
		want         map[string]string
	}{
		{name: "a worker of a MachineDeployment", deployment: "tenant-md-0",
			want: map[string]string{RoleLabel: WorkerRole, clusterv1.MachineDeploymentNameLabel: "tenant-md-0"}},
		{name: "a worker of no MachineDeployment", want: map[string]string{RoleLabel: WorkerRole}},
		{name: "a control plane's machine", controlPlane: true, want: map[string]string{RoleLabel: ControlPlaneRole}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := input(machine(withRootDisk("10Gi")), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: testCA}})
			in.DeploymentName, in.ControlPlane = tc.deployment, tc.controlPlane
			out := mustRender(t, in)
			want := map[string]string{clusterv1.ClusterNameLabel: "cluster-a", infrav1.MachineNameLabel: "worker-0"}
			maps.Copy(want, tc.want)
			g.Expect(out.VirtualMachine.Spec.Template.ObjectMeta.Labels).To(Equal(want))
			for _, obj := range []metav1.Object{out.VirtualMachine, out.RootDataVolume, out.ImportCA, out.UserData} {
				g.Expect(obj.GetLabels()).To(Equal(want), "%s", obj.GetName())
			}
		})
	}
}

// TestTenantMetadataAndSpread: the VM carries the tenant's VM labels and
// annotations, its instances the instance labels and annotations and the
// spread constraints, each beside the provider's labels, and nothing of
// one reaches the other.
func TestTenantMetadataAndSpread(t *testing.T) {
	g := NewWithT(t)
	spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: "cluster-a"}}}}
	m := machine(func(m *infrav1.KubeVirtMachine) {
		m.Spec.VirtualMachineMetadata = infrav1.ObjectMetadata{Labels: map[string]string{"node-role.kubernetes.io/worker": ""},
			Annotations: map[string]string{"example.com/owner": "team-a"}}
		m.Spec.InstanceMetadata = infrav1.ObjectMetadata{Labels: map[string]string{"apps.cozystack.io/application.name": "tenant"},
			Annotations: map[string]string{kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation: "true"}}
		m.Spec.TopologySpreadConstraints = spread
	})
	in := input(m, containerDisk())
	in.DeploymentName = "tenant-md-0"
	out := mustRender(t, in)
	own := map[string]string{clusterv1.ClusterNameLabel: "cluster-a", infrav1.MachineNameLabel: "worker-0", RoleLabel: WorkerRole,
		clusterv1.MachineDeploymentNameLabel: "tenant-md-0"}
	vm := out.VirtualMachine
	g.Expect(vm.Labels).To(Equal(with(own, "node-role.kubernetes.io/worker", "")))
	g.Expect(vm.Annotations).To(Equal(map[string]string{"example.com/owner": "team-a"}))
	g.Expect(vm.Spec.Template.ObjectMeta.Labels).To(Equal(with(own, "apps.cozystack.io/application.name", "tenant")))
	g.Expect(vm.Spec.Template.ObjectMeta.Annotations).To(Equal(map[string]string{kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation: "true"}))
	g.Expect(vm.Spec.Template.Spec.TopologySpreadConstraints).To(Equal(spread))
	g.Expect(out.UserData.Labels).To(Equal(own), "the tenant's metadata is the VM's and its instances' only")
	g.Expect(out.UserData.Annotations).To(BeEmpty())

	// Without any, the VM and its instances carry the provider's labels
	// and no annotations.
	out = mustRender(t, input(machine(), containerDisk()))
	g.Expect(out.VirtualMachine.Annotations).To(BeNil())
	g.Expect(out.VirtualMachine.Spec.Template.ObjectMeta.Annotations).To(BeNil())
	g.Expect(out.VirtualMachine.Spec.Template.Spec.TopologySpreadConstraints).To(BeNil())
}

// TestProviderLabelsWin: were a tenant's label one of the provider's,
// past every rule that refuses it, the provider's value would be kept.
func TestProviderLabelsWin(t *testing.T) {
	g := NewWithT(t)
	own := map[string]string{infrav1.MachineNameLabel: "worker-0"}
	labels, annotations := withTenantMetadata(own, infrav1.ObjectMetadata{Labels: map[string]string{infrav1.MachineNameLabel: "worker-1", "team": "a"}})
	g.Expect(labels).To(Equal(map[string]string{infrav1.MachineNameLabel: "worker-0", "team": "a"}))
	g.Expect(annotations).To(BeNil())
}

func with(labels map[string]string, key, value string) map[string]string {
	out := maps.Clone(labels)
	out[key] = value
	return out
}

func TestSizing(t *testing.T) {
	t.Run("cpu and memory set the domain", func(t *testing.T) {
		g := NewWithT(t)
		m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec.CPU.DedicatedCPUPlacement = true })
		domain := mustRender(t, input(m, containerDisk())).VirtualMachine.Spec.Template.Spec.Domain
		g.Expect(domain.CPU).To(Equal(&kubevirtv1.CPU{Cores: 2, DedicatedCPUPlacement: true}))
		g.Expect(domain.Memory.Guest.Equal(resource.MustParse("4Gi"))).To(BeTrue())
	})
	t.Run("an instancetype and preference size the VM and leave the domain unsized", func(t *testing.T) {
		g := NewWithT(t)
		m := machine(func(m *infrav1.KubeVirtMachine) {
			m.Spec.CPU, m.Spec.Memory = nil, nil
			m.Spec.Instancetype = &infrav1.InstancetypeReference{Name: "u1.large"}
			m.Spec.Preference = &infrav1.PreferenceReference{Kind: infrav1.NamespacedPreferenceKind, Name: "linux"}
		})
		vm := mustRender(t, input(m, containerDisk())).VirtualMachine
		g.Expect(vm.Spec.Instancetype).To(Equal(&kubevirtv1.InstancetypeMatcher{Kind: "VirtualMachineClusterInstancetype", Name: "u1.large"}))
		g.Expect(vm.Spec.Preference).To(Equal(&kubevirtv1.PreferenceMatcher{Kind: "VirtualMachinePreference", Name: "linux"}))
		g.Expect(vm.Spec.Template.Spec.Domain.CPU).To(BeNil())
		g.Expect(vm.Spec.Template.Spec.Domain.Memory).To(BeNil())
	})
	t.Run("architecture is passed to the instance", func(t *testing.T) {
		g := NewWithT(t)
		m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec.Architecture = infrav1.ArchitectureArm64 })
		g.Expect(mustRender(t, input(m, containerDisk())).VirtualMachine.Spec.Template.Spec.Architecture).To(Equal("arm64"))
	})
}

// TestCPUTopologyFollowsThePreference: KubeVirt checks a preference's CPU
// requirement against the field of its preferred topology only, so the
// vCPUs of a cpu/memory sized VM go where the preference puts an
// instancetype's (sockets by default).
func TestCPUTopologyFollowsThePreference(t *testing.T) {
	topology := func(t instancetypev1beta1.PreferredCPUTopology) *instancetypev1beta1.VirtualMachinePreferenceSpec {
		return &instancetypev1beta1.VirtualMachinePreferenceSpec{CPU: &instancetypev1beta1.CPUPreferences{PreferredCPUTopology: ptr.To(t)}}
	}
	spread := func(ratio uint32, across instancetypev1beta1.SpreadAcross) *instancetypev1beta1.VirtualMachinePreferenceSpec {
		p := topology(instancetypev1beta1.Spread)
		p.CPU.SpreadOptions = &instancetypev1beta1.SpreadOptions{Ratio: ptr.To(ratio), Across: ptr.To(across)}
		return p
	}
	for _, c := range []struct {
		name       string
		vCPUs      int32
		preference *instancetypev1beta1.VirtualMachinePreferenceSpec
		want       kubevirtv1.CPU
		problem    string
	}{
		{name: "no preference: cores of one socket", vCPUs: 4, want: kubevirtv1.CPU{Cores: 4}},
		{name: "a preference without a topology: sockets", vCPUs: 4, preference: &instancetypev1beta1.VirtualMachinePreferenceSpec{}, want: kubevirtv1.CPU{Sockets: 4, Cores: 1, Threads: 1}},
		{name: "sockets", vCPUs: 2, preference: topology(instancetypev1beta1.Sockets), want: kubevirtv1.CPU{Sockets: 2, Cores: 1, Threads: 1}},
		{name: "any is filled as sockets", vCPUs: 2, preference: topology(instancetypev1beta1.Any), want: kubevirtv1.CPU{Sockets: 2, Cores: 1, Threads: 1}},
		{name: "cores", vCPUs: 6, preference: topology(instancetypev1beta1.Cores), want: kubevirtv1.CPU{Sockets: 1, Cores: 6, Threads: 1}},
		{name: "threads", vCPUs: 2, preference: topology(instancetypev1beta1.Threads), want: kubevirtv1.CPU{Sockets: 1, Cores: 1, Threads: 2}},
		{name: "deprecated preferCores", vCPUs: 3, preference: topology(instancetypev1beta1.DeprecatedPreferCores), want: kubevirtv1.CPU{Sockets: 1, Cores: 3, Threads: 1}},
		{name: "spread at the default ratio", vCPUs: 8, preference: topology(instancetypev1beta1.Spread), want: kubevirtv1.CPU{Sockets: 4, Cores: 2, Threads: 1}},
		{name: "spread across cores and threads", vCPUs: 8, preference: spread(4, instancetypev1beta1.SpreadAcrossCoresThreads), want: kubevirtv1.CPU{Sockets: 1, Cores: 2, Threads: 4}},
		{name: "spread across sockets, cores and threads", vCPUs: 8, preference: spread(2, instancetypev1beta1.SpreadAcrossSocketsCoresThreads), want: kubevirtv1.CPU{Sockets: 2, Cores: 2, Threads: 2}},
		{name: "a count that does not spread is refused", vCPUs: 3, preference: topology(instancetypev1beta1.Spread), problem: "use a multiple of 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			in := input(machine(func(m *infrav1.KubeVirtMachine) { m.Spec.CPU.Cores = c.vCPUs }), containerDisk())
			in.Preference = c.preference
			out, errs := Render(in)
			if c.problem != "" {
				g.Expect(errs).To(ConsistOf(And(HaveField("Field", "spec.cpu.cores"), HaveField("Detail", ContainSubstring(c.problem)))))
				return
			}
			g.Expect(errs).To(BeEmpty())
			g.Expect(*out.VirtualMachine.Spec.Template.Spec.Domain.CPU).To(Equal(c.want))
		})
	}
}

// TestDisksUseVirtio: the disks are on the paravirtual bus, not the SATA
// bus KubeVirt defaults to on q35, unless the preference names a bus.
func TestDisksUseVirtio(t *testing.T) {
	g := NewWithT(t)
	vm := mustRender(t, input(machine(), containerDisk())).VirtualMachine
	for _, d := range vm.Spec.Template.Spec.Domain.Devices.Disks {
		g.Expect(d.Disk.Bus).To(Equal(kubevirtv1.DiskBusVirtio), "disk %s", d.Name)
	}
	in := input(machine(), containerDisk())
	in.Preference = &instancetypev1beta1.VirtualMachinePreferenceSpec{Devices: &instancetypev1beta1.DevicePreferences{PreferredDiskBus: kubevirtv1.DiskBusSCSI}}
	for _, d := range mustRender(t, in).VirtualMachine.Spec.Template.Spec.Domain.Devices.Disks {
		g.Expect(d.Disk.Bus).To(BeEmpty(), "disk %s: the preference's bus applies", d.Name)
	}
}

func TestNetworks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		networks   []infrav1.Network
		interfaces []kubevirtv1.Interface
		vmNetworks []kubevirtv1.Network
	}{
		{
			name:       "no networks means one masquerade interface on the pod network",
			interfaces: []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}}},
			vmNetworks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
		},
		{
			name: "pod network with bridge binding and a Multus network",
			networks: []infrav1.Network{
				{Name: "pod", Pod: &infrav1.PodNetwork{}, Binding: infrav1.BridgeBinding},
				{Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: "tenant-a/storage"}},
			},
			interfaces: []kubevirtv1.Interface{
				{Name: "pod", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}},
				{Name: "storage", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}},
			},
			vmNetworks: []kubevirtv1.Network{
				{Name: "pod", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}},
				{Name: "storage", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "tenant-a/storage"}}},
			},
		},
		{
			name:       "a default Multus network replaces the pod network",
			networks:   []infrav1.Network{{Name: "vlan", Multus: &infrav1.MultusNetwork{NetworkName: "vlan10", Default: true}}},
			interfaces: []kubevirtv1.Interface{{Name: "vlan", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}}},
			vmNetworks: []kubevirtv1.Network{{Name: "vlan", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "vlan10", Default: true}}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec.Networks = tc.networks })
			spec := mustRender(t, input(m, containerDisk())).VirtualMachine.Spec.Template.Spec
			g.Expect(spec.Domain.Devices.Interfaces).To(Equal(tc.interfaces))
			g.Expect(spec.Networks).To(Equal(tc.vmNetworks))
		})
	}
}

func TestValidateNetworkNamespaces(t *testing.T) {
	g := NewWithT(t)
	path := field.NewPath("spec", "networks")
	g.Expect(ValidateNetworkNamespaces([]infrav1.Network{
		{Name: "pod", Pod: &infrav1.PodNetwork{}},
		{Name: "own", Multus: &infrav1.MultusNetwork{NetworkName: "storage"}},
		{Name: "qualified", Multus: &infrav1.MultusNetwork{NetworkName: "tenant-a/storage"}},
	}, "tenant-a", path)).To(BeEmpty(), "a name without a namespace, or with the machine's, is the machine's namespace's")
	errs := ValidateNetworkNamespaces([]infrav1.Network{
		{Name: "own", Multus: &infrav1.MultusNetwork{NetworkName: "storage"}},
		{Name: "theirs", Multus: &infrav1.MultusNetwork{NetworkName: "tenant-b/storage"}},
	}, "tenant-a", path)
	g.Expect(errs.ToAggregate().Error()).To(Equal("spec.networks[1].multus.networkName: Forbidden: tenant-b/storage is a NetworkAttachmentDefinition of namespace tenant-b; " +
		"a machine of namespace tenant-a attaches only its own namespace's networks"))
}

func TestGPUsAndHostDevices(t *testing.T) {
	g := NewWithT(t)
	m := machine(func(m *infrav1.KubeVirtMachine) {
		m.Spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}, {Name: "gpu2", DeviceName: "nvidia.com/GA102GL_A10", NodeResourceName: "nvidia.com/a10"}}
		m.Spec.HostDevices = []infrav1.HostDevice{{Name: "nic", DeviceName: "intel.com/E810"}}
	})
	devices := mustRender(t, input(m, containerDisk())).VirtualMachine.Spec.Template.Spec.Domain.Devices
	g.Expect(devices.GPUs).To(Equal([]kubevirtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}, {Name: "gpu2", DeviceName: "nvidia.com/GA102GL_A10"}}))
	g.Expect(devices.HostDevices).To(Equal([]kubevirtv1.HostDevice{{Name: "nic", DeviceName: "intel.com/E810"}}))
}

func TestPlacement(t *testing.T) {
	zone := func(fd string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{fd}}
	}
	ssd := corev1.NodeSelectorRequirement{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}
	gpu := corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpExists}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{ssd}}}}

	t.Run("without a failure domain the affinity is the spec's", func(t *testing.T) {
		g := NewWithT(t)
		aff := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}
		m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec.Affinity = aff })
		g.Expect(mustRender(t, input(m, containerDisk())).VirtualMachine.Spec.Template.Spec.Affinity).To(Equal(aff))
	})
	t.Run("a failure domain without an affinity requires the zone", func(t *testing.T) {
		g := NewWithT(t)
		in := input(machine(), containerDisk())
		in.FailureDomain = "zone-a"
		aff := mustRender(t, in).VirtualMachine.Spec.Template.Spec.Affinity
		g.Expect(aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal(
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone("zone-a")}}}))
	})
	t.Run("a failure domain joins every required term and leaves the spec untouched", func(t *testing.T) {
		g := NewWithT(t)
		aff := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{ssd}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{gpu}},
			}},
			PreferredDuringSchedulingIgnoredDuringExecution: preferred,
		}}
		before := aff.DeepCopy()
		m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec.Affinity = aff })
		in := input(m, containerDisk())
		in.FailureDomain = "zone-b"
		got := mustRender(t, in).VirtualMachine.Spec.Template.Spec.Affinity
		g.Expect(got.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal([]corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{ssd, zone("zone-b")}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{gpu, zone("zone-b")}},
		}))
		g.Expect(got.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(Equal(preferred))
		g.Expect(aff).To(Equal(before), "the machine's spec is not mutated")
	})

	// The hoster's reserved nodes: no tenant term escapes the exclusion,
	// with or without a failure domain.
	controlPlane := corev1.NodeSelectorRequirement{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpDoesNotExist}
	reservedInfra := corev1.NodeSelectorRequirement{Key: "example.com/infrastructure-reserved", Operator: corev1.NodeSelectorOpDoesNotExist}
	twoTerms := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{ssd}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{gpu}},
		}},
		PreferredDuringSchedulingIgnoredDuringExecution: preferred,
	}}
	for _, tc := range []struct {
		name          string
		affinity      *corev1.Affinity
		reserved      []string
		failureDomain string
		want          []corev1.NodeSelectorTerm
	}{
		{name: "no affinity: one term that excludes the reserved nodes",
			reserved: []string{controlPlane.Key},
			want:     []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{controlPlane}}}},
		{name: "every label the hoster reserves is excluded",
			reserved: []string{controlPlane.Key, reservedInfra.Key},
			want:     []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{controlPlane, reservedInfra}}}},
		{name: "the exclusion joins every one of the tenant's ORed terms",
			affinity: twoTerms, reserved: []string{controlPlane.Key},
			want: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{ssd, controlPlane}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{gpu, controlPlane}},
			}},
		{name: "with a failure domain, both join every term",
			affinity: twoTerms, reserved: []string{controlPlane.Key}, failureDomain: "zone-a",
			want: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{ssd, controlPlane, zone("zone-a")}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{gpu, controlPlane, zone("zone-a")}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			before := tc.affinity.DeepCopy()
			m := machine(func(m *infrav1.KubeVirtMachine) { m.Spec.Affinity = tc.affinity.DeepCopy() })
			in := input(m, containerDisk())
			in.ReservedNodeLabels, in.FailureDomain = tc.reserved, tc.failureDomain
			got := mustRender(t, in).VirtualMachine.Spec.Template.Spec.Affinity
			g.Expect(got.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal(tc.want))
			if tc.affinity != nil {
				g.Expect(got.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(Equal(preferred), "preferences are the tenant's")
			}
			g.Expect(m.Spec.Affinity).To(Equal(before), "the machine's spec is not mutated")
		})
	}

	t.Run("tolerations, eviction strategy and run strategy are passed through", func(t *testing.T) {
		g := NewWithT(t)
		tolerations := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vms", Effect: corev1.TaintEffectNoSchedule}}
		m := machine(func(m *infrav1.KubeVirtMachine) {
			m.Spec.Tolerations = tolerations
			m.Spec.EvictionStrategy = infrav1.EvictionLiveMigrate
			m.Spec.RunStrategy = infrav1.RunOnce
		})
		vm := mustRender(t, input(m, containerDisk())).VirtualMachine
		g.Expect(vm.Spec.Template.Spec.Tolerations).To(Equal(tolerations))
		g.Expect(vm.Spec.Template.Spec.EvictionStrategy).To(Equal(ptr.To(kubevirtv1.EvictionStrategyLiveMigrate)))
		g.Expect(vm.Spec.RunStrategy).To(Equal(ptr.To(kubevirtv1.RunStrategyOnce)))
	})
	t.Run("run strategy defaults to Always and eviction to KubeVirt's default", func(t *testing.T) {
		g := NewWithT(t)
		vm := mustRender(t, input(machine(), containerDisk())).VirtualMachine
		g.Expect(vm.Spec.RunStrategy).To(Equal(ptr.To(kubevirtv1.RunStrategyAlways)))
		g.Expect(vm.Spec.Template.Spec.EvictionStrategy).To(BeNil())
	})
}

func TestRenderRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    Input
		field string
	}{
		{"an HTTP import without a disk size", input(machine(), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw"}}), "spec.rootDisk.size"},
		{"no image source", input(machine(), infrav1.ImageSource{}), "spec.image"},
		{"two image sources", input(machine(), infrav1.ImageSource{ContainerDisk: containerDisk().ContainerDisk, Clone: &infrav1.CloneSource{Name: "x"}}), "spec.image"},
		{"a container disk without a reference", input(machine(), infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{}}), "spec.image.containerDisk.reference"},
		{"a name that is not a DNS label", input(machine(func(m *infrav1.KubeVirtMachine) { m.Name = strings.Repeat("w", 64) }), containerDisk()), "metadata.name"},
		{"a machine without a cluster", Input{Machine: machine(), Image: containerDisk()}, "metadata.labels[cluster.x-k8s.io/cluster-name]"},
		{"neither instancetype nor cpu", input(machine(func(m *infrav1.KubeVirtMachine) { m.Spec.CPU = nil }), containerDisk()), "spec.cpu.cores"},
		{"neither instancetype nor memory", input(machine(func(m *infrav1.KubeVirtMachine) { m.Spec.Memory = nil }), containerDisk()), "spec.memory"},
		{"an unknown datasource", func() Input { in := input(machine(), containerDisk()); in.Datasource = "Ignition"; return in }(), "spec.cloudInitDatasource"},
		{"no machine", Input{}, "machine"},
		{"a Multus network of another namespace", input(machine(func(m *infrav1.KubeVirtMachine) {
			m.Spec.Networks = []infrav1.Network{{Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: "infra/storage"}}}
		}), containerDisk()), "spec.networks[0].multus.networkName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, errs := Render(tc.in)
			g.Expect(out).To(BeNil(), "nothing is half-rendered")
			g.Expect(errs).NotTo(BeEmpty())
			fields := []string{}
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			g.Expect(fields).To(ContainElement(tc.field))
		})
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	g := NewWithT(t)
	in := input(machine(withRootDisk("10Gi")), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: testCA}})
	in.FailureDomain = "zone-a"
	a, b := mustRender(t, in), mustRender(t, in)
	g.Expect(reflect.DeepEqual(a, b)).To(BeTrue())
}

// FuzzRender renders arbitrary machine specs and images: it never panics,
// fails with field errors or renders a VM that boots exactly one root disk
// with the bootstrap data unchanged.
func FuzzRender(f *testing.F) {
	seeds := []Input{
		input(machine(), containerDisk()),
		input(machine(withRootDisk("20Gi")), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: testCA}}),
		input(machine(func(m *infrav1.KubeVirtMachine) {
			m.Spec.CPU, m.Spec.Memory = nil, nil
			m.Spec.Instancetype = &infrav1.InstancetypeReference{Name: "u1.large"}
			m.Spec.Networks = []infrav1.Network{{Name: "vlan", Multus: &infrav1.MultusNetwork{NetworkName: "vlan10", Default: true}}}
			m.Spec.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10"}}
		}), infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}),
	}
	for i, s := range seeds {
		spec, err := json.Marshal(s.Machine.Spec)
		if err != nil {
			f.Fatal(err)
		}
		image, err := json.Marshal(s.Image)
		if err != nil {
			f.Fatal(err)
		}
		preference := []string{``, `{}`, `{"cpu":{"preferredCPUTopology":"spread","spreadOptions":{"ratio":3}},"devices":{"preferredDiskBus":"scsi"}}`}[i]
		f.Add(spec, image, []byte(preference), s.UserData, []string{"", "zone-a", "zone-b"}[i], []string{"", "NoCloud", "ConfigDrive"}[i])
	}
	f.Fuzz(func(t *testing.T, specJSON, imageJSON, preferenceJSON, data []byte, failureDomain, datasource string) {
		m := machine()
		m.Spec = infrav1.KubeVirtMachineSpec{}
		var image infrav1.ImageSource
		if json.Unmarshal(specJSON, &m.Spec) != nil || json.Unmarshal(imageJSON, &image) != nil {
			t.Skip("not JSON of the API types")
		}
		var preference *instancetypev1beta1.VirtualMachinePreferenceSpec
		if len(preferenceJSON) > 0 && json.Unmarshal(preferenceJSON, &preference) != nil {
			t.Skip("not JSON of a preference")
		}
		in := Input{Machine: m, ClusterName: "c", Image: image, Datasource: infrav1.CloudInitDatasource(datasource), FailureDomain: failureDomain, UserData: data, Preference: preference}
		out, errs := Render(in)
		again, againErrs := Render(in)
		if !reflect.DeepEqual(out, again) || !reflect.DeepEqual(errs, againErrs) {
			t.Fatal("rendering is not deterministic")
		}
		if len(errs) > 0 {
			if out != nil {
				t.Fatal("errors with objects")
			}
			for _, e := range errs {
				if e.Field == "" {
					t.Fatalf("error without a field path: %v", e)
				}
			}
			return
		}
		if !bytes.Equal(out.UserData.Data[UserDataKey], data) {
			t.Fatal("bootstrap data changed")
		}
		vm := out.VirtualMachine
		if vm.Name != m.Name || vm.Spec.Template.Spec.Hostname != m.Name {
			t.Fatalf("VM %q hostname %q for machine %q", vm.Name, vm.Spec.Template.Spec.Hostname, m.Name)
		}
		roots := 0
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.Name == "root" && (v.ContainerDisk != nil) != (v.DataVolume != nil) {
				roots++
			}
		}
		if roots != 1 || (out.RootDataVolume == nil) != (image.ContainerDisk != nil) {
			t.Fatalf("root disk: %d volumes, DataVolume %v, image %+v", roots, out.RootDataVolume != nil, image)
		}
		// A sized VM keeps its vCPU count whatever the preferred topology.
		if cpu := vm.Spec.Template.Spec.Domain.CPU; m.Spec.Instancetype == nil {
			vCPUs := max(cpu.Sockets, 1) * max(cpu.Cores, 1) * max(cpu.Threads, 1)
			if int64(vCPUs) != int64(m.Spec.CPU.Cores) {
				t.Fatalf("%d vCPUs rendered as %+v", m.Spec.CPU.Cores, cpu)
			}
		}
	})
}

// BenchmarkRender reports the cost of rendering one machine's objects for
// each image source.
func BenchmarkRender(b *testing.B) {
	for _, bc := range []struct {
		name string
		in   Input
	}{
		{"containerDisk", input(machine(), containerDisk())},
		{"httpImport", input(machine(withRootDisk("20Gi")), infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: testCA}})},
		{"clone-with-gpus-and-zone", func() Input {
			in := input(machine(func(m *infrav1.KubeVirtMachine) {
				m.Spec.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10"}}
				m.Spec.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}}, {Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: "storage"}}}
			}), infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}})
			in.FailureDomain = "zone-a"
			return in
		}()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, errs := Render(bc.in); len(errs) > 0 {
					b.Fatal(errs.ToAggregate())
				}
			}
		})
	}
}
