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

// Package vmspec turns a KubeVirtMachine and its resolved image into the
// objects that run it: the VirtualMachine, the root DataVolume of an imported
// or cloned disk, the ConfigMap holding an import's CA bundle and the Secret
// carrying the bootstrap data as cloud-init user data. It is pure: no I/O,
// the same input always gives the same objects.
package vmspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/instancetype"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/migration"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
)

const (
	// UserDataKey is the Secret key KubeVirt reads cloud-init user data from.
	UserDataKey = "userdata"
	// ImportCAKey is the ConfigMap key holding an import's CA bundle. CDI
	// trusts every file of the mounted ConfigMap.
	ImportCAKey = "ca.pem"
	// KeepAfterCompletionAnnotation stops CDI from garbage-collecting a
	// finished DataVolume, so the machine keeps observing its root disk.
	KeepAfterCompletionAnnotation = "cdi.kubevirt.io/storage.deleteAfterCompletion"

	// RoleLabel is the role of the machine whose objects carry it, worker
	// or control-plane: CAPK's label, which Cluster API itself does not
	// set, and which tools that select CAPK's VMs and their Pods by role
	// (Cozystack's WorkloadMonitor) read.
	RoleLabel = "cluster.x-k8s.io/role"
	// WorkerRole is RoleLabel's value on a worker's objects.
	WorkerRole = "worker"
	// ControlPlaneRole is RoleLabel's value on a control plane machine's
	// objects.
	ControlPlaneRole = "control-plane"

	rootVolumeName      = "root"
	cloudInitVolumeName = "cloudinit"
	defaultNetworkName  = "default"
)

// Input is everything a machine's objects are rendered from.
type Input struct {
	// Machine supplies the name, namespace, UID and spec.
	Machine *infrav1.KubeVirtMachine
	// ClusterName labels every object.
	ClusterName string
	// DeploymentName is the Machine's MachineDeployment
	// (cluster.x-k8s.io/deployment-name), which labels every object when
	// set.
	DeploymentName string
	// ControlPlane tells that the Machine is a control plane's (it has
	// cluster.x-k8s.io/control-plane): RoleLabel is control-plane, else
	// worker.
	ControlPlane bool
	// Image is the root disk source: the machine's own spec.image, or the
	// template's resolved image.
	Image infrav1.ImageSource
	// Datasource is the resolved cloud-init datasource; empty means NoCloud.
	Datasource infrav1.CloudInitDatasource
	// FailureDomain is the Machine's failure domain, if any.
	FailureDomain string
	// UserData is the bootstrap Secret's value, attached unchanged.
	UserData []byte
	// Preference is the spec of the machine's preference, when it names one
	// that exists: its preferred CPU topology decides where a cpu/memory
	// sized VM's vCPUs go (KubeVirt checks the preference's CPU
	// requirement against that field), and a preferred disk bus leaves the
	// disks' bus to it.
	Preference *instancetypev1beta1.VirtualMachinePreferenceSpec
	// Unowned leaves the owner reference to the machine out: the objects go
	// to an infrastructure cluster other than the machine's, where it
	// cannot point. Their labels name the machine.
	Unowned bool
	// ExtraLabels are added to every object's labels and the instance's:
	// in an infrastructure cluster of its own, the management cluster's
	// identity (infracluster.Cluster.Labels).
	ExtraLabels map[string]string
	// ReservedNodeLabels are the node label keys of the nodes the VM may
	// not run on (placement.Policy.ReservedNodeLabels): its required node
	// affinity excludes them in every term.
	ReservedNodeLabels []string
}

// Objects are a machine's rendered objects.
type Objects struct {
	VirtualMachine *kubevirtv1.VirtualMachine
	// RootDataVolume is nil for container disks.
	RootDataVolume *cdiv1.DataVolume
	// ImportCA is nil unless an HTTP import has a CA bundle.
	ImportCA *corev1.ConfigMap
	UserData *corev1.Secret
}

// RootDataVolumeName is the name of a machine's root DataVolume.
func RootDataVolumeName(machineName string) string { return machineName + "-root" }

// UserDataSecretName is the name of a machine's cloud-init user data Secret.
func UserDataSecretName(machineName string) string { return machineName + "-userdata" }

// ImportCAConfigMapName is the name of a machine's import CA ConfigMap.
func ImportCAConfigMapName(machineName string) string { return machineName + "-import-ca" }

// IsEphemeral reports whether a root disk loses its content when the VM
// starts a new instance.
func IsEphemeral(image infrav1.ImageSource) bool { return image.ContainerDisk != nil }

// Labels are the labels of every object rendered for a machine: the
// caches and watches select by MachineNameLabel.
func Labels(clusterName, machineName string) map[string]string {
	return map[string]string{
		clusterv1.ClusterNameLabel: clusterName,
		infrav1.MachineNameLabel:   machineName,
	}
}

// ownLabels are the labels the provider puts on every object of the
// machine, which a tenant's metadata never overrides: ours, Cluster API's
// usual ones (as CAPK puts them on its VMs, with the deployment's name
// beside) and ExtraLabels.
func ownLabels(in Input) map[string]string {
	labels := Labels(in.ClusterName, in.Machine.Name)
	labels[RoleLabel] = WorkerRole
	if in.ControlPlane {
		labels[RoleLabel] = ControlPlaneRole
	}
	if in.DeploymentName != "" {
		labels[clusterv1.MachineDeploymentNameLabel] = in.DeploymentName
	}
	maps.Copy(labels, in.ExtraLabels)
	return labels
}

// Render renders a machine's objects, or the field errors that prevent it.
func Render(in Input) (*Objects, field.ErrorList) {
	if errs := validateInput(in); len(errs) > 0 {
		return nil, errs
	}
	meta := objectMetaFor(in)
	out := &Objects{UserData: userDataSecret(in, meta)}
	root := rootVolume(in, meta, out)
	vmi := instanceSpec(in, root, cloudInitVolume(in.Datasource, out.UserData.Name))
	out.VirtualMachine = virtualMachine(in, meta, vmi)
	return out, nil
}

// objectMeta names one of a machine's objects in the machine's namespace,
// with its labels and, unless the objects are unowned, the machine as owner.
type objectMeta func(name string) metav1.ObjectMeta

func objectMetaFor(in Input) objectMeta {
	m := in.Machine
	labels := ownLabels(in)
	var owners []metav1.OwnerReference
	if !in.Unowned {
		owners = []metav1.OwnerReference{ownerReference(m)}
	}
	return func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name:            name,
			Namespace:       m.Namespace,
			Labels:          copyMap(labels),
			OwnerReferences: slices.Clone(owners),
		}
	}
}

func userDataSecret(in Input, meta objectMeta) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta(UserDataSecretName(in.Machine.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{UserDataKey: append([]byte(nil), in.UserData...)},
	}
}

// rootVolume is the VM's root disk: the container disk itself, or the
// DataVolume (and an HTTP import's CA ConfigMap) it renders into out.
func rootVolume(in Input, meta objectMeta, out *Objects) kubevirtv1.Volume {
	volume := kubevirtv1.Volume{Name: rootVolumeName}
	if in.Image.ContainerDisk != nil {
		volume.ContainerDisk = &kubevirtv1.ContainerDiskSource{
			Image:           in.Image.ContainerDisk.Reference,
			ImagePullPolicy: corev1.PullIfNotPresent,
		}
		return volume
	}
	m := in.Machine
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: meta(RootDataVolumeName(m.Name)),
		Spec:       cdiv1.DataVolumeSpec{Storage: storageSpec(m.Spec.RootDisk)},
	}
	dv.Annotations = map[string]string{KeepAfterCompletionAnnotation: "false"}
	if in.Image.HTTPImport != nil {
		http := &cdiv1.DataVolumeSourceHTTP{URL: in.Image.HTTPImport.URL}
		if in.Image.HTTPImport.CABundle != "" {
			out.ImportCA = &corev1.ConfigMap{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: meta(ImportCAConfigMapName(m.Name)),
				Data:       map[string]string{ImportCAKey: in.Image.HTTPImport.CABundle},
			}
			http.CertConfigMap = out.ImportCA.Name
		}
		dv.Spec.Source = &cdiv1.DataVolumeSource{HTTP: http}
	} else {
		setCloneSource(&dv.Spec, in.Image.Clone, m.Namespace)
	}
	out.RootDataVolume = dv
	volume.DataVolume = &kubevirtv1.DataVolumeSource{Name: dv.Name}
	return volume
}

// cloudInitVolume hands the user data Secret to the guest through the
// datasource the machine asks for.
func cloudInitVolume(datasource infrav1.CloudInitDatasource, userDataSecretName string) kubevirtv1.Volume {
	volume := kubevirtv1.Volume{Name: cloudInitVolumeName}
	secretRef := &corev1.LocalObjectReference{Name: userDataSecretName}
	if datasource == infrav1.ConfigDriveDatasource {
		volume.CloudInitConfigDrive = &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: secretRef}
	} else {
		volume.CloudInitNoCloud = &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: secretRef}
	}
	return volume
}

// instanceSpec is the instance the VM starts: its disks, devices,
// networks and placement, and its size unless an instancetype sets it.
func instanceSpec(in Input, root, cloudInit kubevirtv1.Volume) kubevirtv1.VirtualMachineInstanceSpec {
	m := in.Machine
	spec := &m.Spec
	interfaces, networks := renderNetworks(spec.Networks)
	vmi := kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			Devices: kubevirtv1.Devices{
				Disks: []kubevirtv1.Disk{
					{Name: rootVolumeName, BootOrder: ptr.To[uint](1), DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: diskBus(in.Preference)}}},
					{Name: cloudInitVolumeName, DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: diskBus(in.Preference)}}},
				},
				Interfaces:  interfaces,
				GPUs:        renderGPUs(spec.GPUs),
				HostDevices: renderHostDevices(spec.HostDevices),
			},
		},
		Hostname:    m.Name,
		Networks:    networks,
		Volumes:     []kubevirtv1.Volume{root, cloudInit},
		Affinity:    affinity(spec.Affinity, in.ReservedNodeLabels, in.FailureDomain),
		Tolerations: append([]corev1.Toleration(nil), spec.Tolerations...),
		// The hoster's policy allowed their keys (placement.Policy).
		TopologySpreadConstraints: topologySpreadConstraints(spec.TopologySpreadConstraints),
		Architecture:              string(spec.Architecture),
	}
	if spec.Instancetype == nil {
		vmi.Domain.CPU, _ = instancetype.CPUTopology(uint32(spec.CPU.Cores), in.Preference)
		vmi.Domain.CPU.DedicatedCPUPlacement = spec.CPU.DedicatedCPUPlacement
		vmi.Domain.Memory = &kubevirtv1.Memory{Guest: ptr.To(spec.Memory.DeepCopy())}
	}
	if spec.EvictionStrategy != "" {
		vmi.EvictionStrategy = ptr.To(kubevirtv1.EvictionStrategy(spec.EvictionStrategy))
	}
	return vmi
}

// virtualMachine is the VM running the instance, with its run strategy
// and the instancetype and preference it names.
func virtualMachine(in Input, meta objectMeta, vmi kubevirtv1.VirtualMachineInstanceSpec) *kubevirtv1.VirtualMachine {
	spec := &in.Machine.Spec
	runStrategy := kubevirtv1.RunStrategyAlways
	if spec.RunStrategy != "" {
		runStrategy = kubevirtv1.VirtualMachineRunStrategy(spec.RunStrategy)
	}
	vmMeta := meta(in.Machine.Name)
	own := vmMeta.Labels
	vmMeta.Labels, vmMeta.Annotations = withTenantMetadata(own, spec.VirtualMachineMetadata)
	instanceMeta := metav1.ObjectMeta{}
	instanceMeta.Labels, instanceMeta.Annotations = withTenantMetadata(own, spec.InstanceMetadata)
	vm := &kubevirtv1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: vmMeta,
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &runStrategy,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: instanceMeta,
				Spec:       vmi,
			},
		},
	}
	if spec.Instancetype != nil {
		vm.Spec.Instancetype = &kubevirtv1.InstancetypeMatcher{Kind: string(spec.Instancetype.EffectiveKind()), Name: spec.Instancetype.Name}
	}
	if spec.Preference != nil {
		vm.Spec.Preference = &kubevirtv1.PreferenceMatcher{Kind: string(spec.Preference.EffectiveKind()), Name: spec.Preference.Name}
	}
	return vm
}

// withTenantMetadata is the tenant's labels with own's over them, and its
// annotations (nil for none): the provider's labels always win.
func withTenantMetadata(own map[string]string, tenant infrav1.ObjectMetadata) (map[string]string, map[string]string) {
	labels := copyMap(tenant.Labels)
	maps.Copy(labels, own)
	var annotations map[string]string
	if len(tenant.Annotations) > 0 {
		annotations = copyMap(tenant.Annotations)
	}
	return labels, annotations
}

func validateInput(in Input) field.ErrorList {
	var errs field.ErrorList
	if in.Machine == nil {
		return field.ErrorList{field.Required(field.NewPath("machine"), "a KubeVirtMachine is required")}
	}
	m := in.Machine
	spec := field.NewPath("spec")
	for _, msg := range validation.IsDNS1123Label(m.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), m.Name,
			"the VirtualMachine, its hostname and providerID take the machine's name: "+msg))
	}
	if in.ClusterName == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "labels").Key(clusterv1.ClusterNameLabel), "the machine must belong to a cluster"))
	}
	if m.Spec.Instancetype == nil {
		if m.Spec.CPU == nil || m.Spec.CPU.Cores < 1 {
			errs = append(errs, field.Required(spec.Child("cpu", "cores"), "set cpu and memory, or an instancetype"))
		}
		if m.Spec.Memory == nil || m.Spec.Memory.Sign() <= 0 {
			errs = append(errs, field.Required(spec.Child("memory"), "set cpu and memory, or an instancetype"))
		}
	}
	imagePath := spec.Child("image")
	set := 0
	for _, present := range []bool{in.Image.ContainerDisk != nil, in.Image.HTTPImport != nil, in.Image.Clone != nil} {
		if present {
			set++
		}
	}
	switch {
	case set != 1:
		errs = append(errs, field.Invalid(imagePath, set, "exactly one of containerDisk, httpImport or clone must be set"))
	case in.Image.ContainerDisk != nil && in.Image.ContainerDisk.Reference == "":
		errs = append(errs, field.Required(imagePath.Child("containerDisk", "reference"), "a container disk needs an image reference"))
	case in.Image.HTTPImport != nil && in.Image.HTTPImport.URL == "":
		errs = append(errs, field.Required(imagePath.Child("httpImport", "url"), "an HTTP import needs a URL"))
	case in.Image.HTTPImport != nil && (m.Spec.RootDisk == nil || m.Spec.RootDisk.Size == nil || m.Spec.RootDisk.Size.Sign() <= 0):
		errs = append(errs, field.Required(spec.Child("rootDisk", "size"), "an HTTP import needs the size of the volume it imports into"))
	case in.Image.Clone != nil && in.Image.Clone.Name == "":
		errs = append(errs, field.Required(imagePath.Child("clone", "name"), "a clone needs the name of its source"))
	}
	if set == 1 {
		errs = append(errs, migration.Validate(&m.Spec, in.Image, spec)...)
	}
	// The webhooks' and the template resolution's rule: vCPUs the
	// preference cannot place are refused everywhere alike. The
	// instancetype is KubeVirt's to apply and not read here.
	errs = append(errs, instancetype.Validate(&m.Spec, nil, in.Preference, spec)...)
	errs = append(errs, ValidateNetworkNamespaces(m.Spec.Networks, m.Namespace, spec.Child("networks"))...)
	errs = append(errs, ValidateMetadataAndSpread(&m.Spec, spec)...)
	switch in.Datasource {
	case "", infrav1.NoCloudDatasource, infrav1.ConfigDriveDatasource:
	default:
		errs = append(errs, field.NotSupported(spec.Child("cloudInitDatasource"), in.Datasource,
			[]infrav1.CloudInitDatasource{infrav1.NoCloudDatasource, infrav1.ConfigDriveDatasource}))
	}
	return errs
}

func ownerReference(m *infrav1.KubeVirtMachine) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         infrav1.GroupVersion.String(),
		Kind:               "KubeVirtMachine",
		Name:               m.Name,
		UID:                m.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

func storageSpec(disk *infrav1.RootDisk) *cdiv1.StorageSpec {
	storage := &cdiv1.StorageSpec{}
	if disk == nil {
		return storage
	}
	if disk.Size != nil {
		storage.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: disk.Size.DeepCopy()}
	}
	if disk.StorageClassName != "" {
		storage.StorageClassName = ptr.To(disk.StorageClassName)
	}
	storage.AccessModes = append([]corev1.PersistentVolumeAccessMode(nil), disk.AccessModes...)
	if disk.VolumeMode != nil {
		storage.VolumeMode = ptr.To(*disk.VolumeMode)
	}
	return storage
}

func cloneNamespace(src *infrav1.CloneSource, machineNamespace string) string {
	if src.Namespace != "" {
		return src.Namespace
	}
	return machineNamespace
}

// setCloneSource points a DataVolume of a machine in machineNamespace at
// what it clones.
func setCloneSource(spec *cdiv1.DataVolumeSpec, src *infrav1.CloneSource, machineNamespace string) {
	if src.Kind == infrav1.CloneFromDataSource {
		spec.SourceRef = &cdiv1.DataVolumeSourceRef{
			Kind:      cdiv1.DataVolumeDataSource,
			Namespace: ptr.To(cloneNamespace(src, machineNamespace)),
			Name:      src.Name,
		}
		return
	}
	spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{
		Namespace: cloneNamespace(src, machineNamespace),
		Name:      src.Name,
	}}
}

// CloneDataVolume is the root DataVolume of a machine named name in
// namespace as far as CDI's clone authorization reads it: where it lives and
// what it clones. Admission authorizes a clone source before any machine
// exists with it.
func CloneDataVolume(src *infrav1.CloneSource, namespace, name string) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RootDataVolumeName(name)}}
	setCloneSource(&dv.Spec, src, namespace)
	return dv
}

// diskBus is the bus of the VM's disks: virtio, the paravirtual bus a
// Linux worker boots fastest from (KubeVirt's own default on q35 is an
// emulated SATA controller), unless the preference names a bus, which
// KubeVirt applies to disks that state none.
func diskBus(preference *instancetypev1beta1.VirtualMachinePreferenceSpec) kubevirtv1.DiskBus {
	if preference != nil && preference.Devices != nil && preference.Devices.PreferredDiskBus != "" {
		return ""
	}
	return kubevirtv1.DiskBusVirtio
}

// ValidateNetworkNamespaces refuses a Multus networkName that names a
// NetworkAttachmentDefinition of another namespace than namespace, the
// machine's: Multus attaches any namespace's network a VM's pod names
// unless it isolates namespaces, so a tenant could otherwise join another
// tenant's or the hoster's network. A name without a namespace is the
// machine's namespace's.
func ValidateNetworkNamespaces(networks []infrav1.Network, namespace string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, n := range networks {
		if n.Multus == nil {
			continue
		}
		if ns, _, found := strings.Cut(n.Multus.NetworkName, "/"); found && ns != namespace {
			errs = append(errs, field.Forbidden(path.Index(i).Child("multus", "networkName"),
				fmt.Sprintf("%s is a NetworkAttachmentDefinition of namespace %s; a machine of namespace %s attaches only its own namespace's networks", n.Multus.NetworkName, ns, namespace)))
		}
	}
	return errs
}

func renderNetworks(in []infrav1.Network) ([]kubevirtv1.Interface, []kubevirtv1.Network) {
	if len(in) == 0 {
		in = []infrav1.Network{{Name: defaultNetworkName, Pod: &infrav1.PodNetwork{}}}
	}
	interfaces := make([]kubevirtv1.Interface, 0, len(in))
	networks := make([]kubevirtv1.Network, 0, len(in))
	for _, n := range in {
		iface := kubevirtv1.Interface{Name: n.Name}
		network := kubevirtv1.Network{Name: n.Name}
		binding := n.Binding
		if n.Pod != nil {
			network.Pod = &kubevirtv1.PodNetwork{}
			if binding == "" {
				binding = infrav1.MasqueradeBinding
			}
		} else if n.Multus != nil {
			network.Multus = &kubevirtv1.MultusNetwork{NetworkName: n.Multus.NetworkName, Default: n.Multus.Default}
			binding = infrav1.BridgeBinding
		}
		if binding == infrav1.MasqueradeBinding {
			iface.Masquerade = &kubevirtv1.InterfaceMasquerade{}
		} else {
			iface.Bridge = &kubevirtv1.InterfaceBridge{}
		}
		interfaces = append(interfaces, iface)
		networks = append(networks, network)
	}
	return interfaces, networks
}

func renderGPUs(in []infrav1.GPU) []kubevirtv1.GPU {
	if len(in) == 0 {
		return nil
	}
	out := make([]kubevirtv1.GPU, 0, len(in))
	for _, g := range in {
		out = append(out, kubevirtv1.GPU{Name: g.Name, DeviceName: g.DeviceName})
	}
	return out
}

func renderHostDevices(in []infrav1.HostDevice) []kubevirtv1.HostDevice {
	if len(in) == 0 {
		return nil
	}
	out := make([]kubevirtv1.HostDevice, 0, len(in))
	for _, d := range in {
		out = append(out, kubevirtv1.HostDevice{Name: d.Name, DeviceName: d.DeviceName})
	}
	return out
}

// affinity is the spec's affinity kept off the reserved nodes and in the
// failure domain. Required node selector terms are ORed, so both
// requirements join every term.
func affinity(in *corev1.Affinity, reservedNodeLabels []string, failureDomain string) *corev1.Affinity {
	out := placement.ReservedNodesExcluded(in, reservedNodeLabels)
	if failureDomain == "" {
		return out
	}
	zone := corev1.NodeSelectorRequirement{Key: infrav1.FailureDomainLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{failureDomain}}
	return placement.RequiredOnEveryTerm(out, zone)
}

func topologySpreadConstraints(in []corev1.TopologySpreadConstraint) []corev1.TopologySpreadConstraint {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.TopologySpreadConstraint, 0, len(in))
	for i := range in {
		out = append(out, *in[i].DeepCopy())
	}
	return out
}

func copyMap(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}
