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

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// MachineNameLabel is set on every object rendered for a KubeVirtMachine
	// (VirtualMachine, its VirtualMachineInstance, DataVolumes, Secrets and
	// ConfigMaps). The controller caches and watches only objects that carry
	// it.
	MachineNameLabel = "infrastructure.cozystack.io/kubevirt-machine"

	// ManagementClusterLabel names, on every object the provider creates in
	// an infrastructure cluster of its own (--infrastructure-kubeconfig),
	// the management cluster whose machine it is: several management
	// clusters may share one infrastructure cluster, and a machine adopts
	// or deletes only the objects of its own management cluster's identity
	// (--management-cluster-identity).
	ManagementClusterLabel = "infrastructure.cozystack.io/management-cluster"

	// WorkerClassLabel names the WorkerClass a KubeVirtMachineTemplate uses.
	// The class controller finds the templates that use a class by this
	// label, without importing this API.
	WorkerClassLabel = "cozystack.io/worker-class"

	// FailureDomainLabel is the node label of the infrastructure cluster that
	// a Machine's failure domain selects.
	FailureDomainLabel = corev1.LabelTopologyZone
)

// ImageSource is where a machine's root disk comes from. Exactly one member
// is set.
// +kubebuilder:validation:XValidation:rule="[has(self.containerDisk), has(self.httpImport), has(self.clone)].filter(x, x).size() == 1",message="exactly one of containerDisk, httpImport or clone must be set"
type ImageSource struct {
	// containerDisk boots from a container disk image pinned by digest. The
	// disk is ephemeral: a new VirtualMachineInstance starts from the image
	// again, which loses the node's state.
	// +optional
	ContainerDisk *ContainerDiskSource `json:"containerDisk,omitempty"`

	// httpImport imports a disk image over HTTP(S) into a per-machine
	// DataVolume with CDI.
	// +optional
	HTTPImport *HTTPImportSource `json:"httpImport,omitempty"`

	// clone clones a golden DataSource or PersistentVolumeClaim into a
	// per-machine DataVolume with CDI.
	// +optional
	Clone *CloneSource `json:"clone,omitempty"`
}

// ContainerDiskSource is a container disk image.
type ContainerDiskSource struct {
	// reference is the image reference, pinned by digest
	// (registry/repository@sha256:<hex>), so every machine of a template
	// boots the same bytes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reference string `json:"reference"`
}

// HTTPImportSource is a disk image CDI imports over HTTP(S).
type HTTPImportSource struct {
	// url is the http or https URL of the raw (optionally xz or gz
	// compressed) or qcow2 disk image.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// caBundle is a PEM bundle of the certificate authorities CDI trusts for
	// this import, for image servers behind a private CA.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	CABundle string `json:"caBundle,omitempty"`
}

// CloneSourceKind is the kind of object a root disk is cloned from.
// +kubebuilder:validation:Enum=DataSource;PersistentVolumeClaim
type CloneSourceKind string

const (
	// CloneFromDataSource clones the PVC or snapshot a CDI DataSource points at.
	CloneFromDataSource CloneSourceKind = "DataSource"
	// CloneFromPersistentVolumeClaim clones a PersistentVolumeClaim.
	CloneFromPersistentVolumeClaim CloneSourceKind = "PersistentVolumeClaim"
)

// CloneSource is a golden image CDI clones.
type CloneSource struct {
	// kind is DataSource or PersistentVolumeClaim.
	// +required
	Kind CloneSourceKind `json:"kind"`

	// namespace of the source; defaults to the machine's namespace.
	// A clone from another namespace (or of a DataSource that points into
	// one) is authorized by CDI's rules, never by the provider's own
	// permissions: at admission as the user who writes it, and before the
	// DataVolume is created as the ServiceAccount default of the machine's
	// namespace. Both need create on datavolumes/source
	// (cdi.kubevirt.io) in the namespace whose data is cloned.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// name of the source.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// CloudInitDatasource is how the bootstrap data reaches the guest.
// +kubebuilder:validation:Enum=NoCloud;ConfigDrive
type CloudInitDatasource string

const (
	// NoCloudDatasource attaches the bootstrap data as a cloud-init NoCloud
	// volume.
	NoCloudDatasource CloudInitDatasource = "NoCloud"
	// ConfigDriveDatasource attaches the bootstrap data as an OpenStack
	// config drive.
	ConfigDriveDatasource CloudInitDatasource = "ConfigDrive"
)

// InstancetypeKind is the kind of a KubeVirt instancetype.
// +kubebuilder:validation:Enum=VirtualMachineClusterInstancetype;VirtualMachineInstancetype
type InstancetypeKind string

const (
	// ClusterInstancetypeKind is the cluster-scoped instancetype kind.
	ClusterInstancetypeKind InstancetypeKind = "VirtualMachineClusterInstancetype"
	// NamespacedInstancetypeKind is the namespaced instancetype kind.
	NamespacedInstancetypeKind InstancetypeKind = "VirtualMachineInstancetype"
)

// InstancetypeReference names a KubeVirt instancetype that sizes the VM.
type InstancetypeReference struct {
	// kind is VirtualMachineClusterInstancetype (the default) or
	// VirtualMachineInstancetype (in the machine's namespace).
	// +optional
	Kind InstancetypeKind `json:"kind,omitempty"`

	// name of the instancetype.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// EffectiveKind is the reference's kind: cluster-scoped unless it says
// otherwise.
func (r *InstancetypeReference) EffectiveKind() InstancetypeKind {
	if r.Kind == "" {
		return ClusterInstancetypeKind
	}
	return r.Kind
}

// PreferenceKind is the kind of a KubeVirt preference.
// +kubebuilder:validation:Enum=VirtualMachineClusterPreference;VirtualMachinePreference
type PreferenceKind string

const (
	// ClusterPreferenceKind is the cluster-scoped preference kind.
	ClusterPreferenceKind PreferenceKind = "VirtualMachineClusterPreference"
	// NamespacedPreferenceKind is the namespaced preference kind.
	NamespacedPreferenceKind PreferenceKind = "VirtualMachinePreference"
)

// PreferenceReference names a KubeVirt preference for the VM.
type PreferenceReference struct {
	// kind is VirtualMachineClusterPreference (the default) or
	// VirtualMachinePreference (in the machine's namespace).
	// +optional
	Kind PreferenceKind `json:"kind,omitempty"`

	// name of the preference.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// EffectiveKind is the reference's kind: cluster-scoped unless it says
// otherwise.
func (r *PreferenceReference) EffectiveKind() PreferenceKind {
	if r.Kind == "" {
		return ClusterPreferenceKind
	}
	return r.Kind
}

// CPU is the virtual CPU topology of a VM sized without an instancetype.
type CPU struct {
	// cores is the number of virtual cores.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Cores int32 `json:"cores"`

	// dedicatedCPUPlacement pins each vCPU to a host CPU.
	// +optional
	DedicatedCPUPlacement bool `json:"dedicatedCPUPlacement,omitempty"`
}

// Architecture is a CPU architecture.
// +kubebuilder:validation:Enum=amd64;arm64;s390x
type Architecture string

const (
	// ArchitectureAmd64 is x86-64.
	ArchitectureAmd64 Architecture = "amd64"
	// ArchitectureArm64 is 64-bit ARM.
	ArchitectureArm64 Architecture = "arm64"
	// ArchitectureS390x is IBM Z.
	ArchitectureS390x Architecture = "s390x"
)

// RootDisk sizes and places the per-machine DataVolume of imported and
// cloned root disks. It has no effect on container disks.
type RootDisk struct {
	// size of the volume. Required for HTTP imports; a clone without a size
	// takes the size of its source.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName of the volume; the cluster default when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName string `json:"storageClassName,omitempty"`

	// accessModes of the volume; CDI's storage profile decides when empty.
	// Live migration needs ReadWriteMany.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`

	// volumeMode of the volume; CDI's storage profile decides when empty.
	// +optional
	// +kubebuilder:validation:Enum=Filesystem;Block
	VolumeMode *corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`
}

// InterfaceBinding is how a VM interface connects to its network.
// +kubebuilder:validation:Enum=Masquerade;Bridge
type InterfaceBinding string

const (
	// MasqueradeBinding NATs the guest behind the pod's address (pod network
	// only).
	MasqueradeBinding InterfaceBinding = "Masquerade"
	// BridgeBinding bridges the guest onto the network.
	BridgeBinding InterfaceBinding = "Bridge"
)

// Network is one VM network interface.
// +kubebuilder:validation:XValidation:rule="has(self.pod) != has(self.multus)",message="exactly one of pod or multus must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.binding) || self.binding != 'Masquerade' || has(self.pod)",message="Masquerade binding is only possible on the pod network"
type Network struct {
	// name of the interface and its network.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// pod attaches the interface to the pod network of the infrastructure
	// cluster.
	// +optional
	Pod *PodNetwork `json:"pod,omitempty"`

	// multus attaches the interface to a Multus NetworkAttachmentDefinition.
	// +optional
	Multus *MultusNetwork `json:"multus,omitempty"`

	// binding is Masquerade (the default on the pod network) or Bridge (the
	// default, and the only choice, on Multus networks).
	// +optional
	Binding InterfaceBinding `json:"binding,omitempty"`
}

// PodNetwork selects the pod network. It has no fields.
type PodNetwork struct{}

// MultusNetwork names a NetworkAttachmentDefinition.
type MultusNetwork struct {
	// networkName is <name> or <namespace>/<name> of the
	// NetworkAttachmentDefinition, which must be in the machine's own
	// namespace: another namespace's is refused.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	NetworkName string `json:"networkName"`

	// default makes this the VM pod's default network instead of the pod
	// network.
	// +optional
	Default bool `json:"default,omitempty"`
}

// GPU passes a GPU or vGPU through to the VM.
type GPU struct {
	// name of the device in the VM.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// deviceName is the resource name the infrastructure cluster's device
	// plugin advertises, e.g. nvidia.com/GA102GL_A10.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DeviceName string `json:"deviceName"`

	// nodeResourceName is the resource the guest's own device plugin
	// advertises on the workload Node for this GPU, counted in the
	// template's status.capacity for scale from zero. Defaults to
	// <vendor domain of deviceName>/gpu, e.g. nvidia.com/gpu.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeResourceName string `json:"nodeResourceName,omitempty"`
}

// HostDevice passes a host PCI or mediated device through to the VM.
type HostDevice struct {
	// name of the device in the VM.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// deviceName is the resource name the infrastructure cluster's device
	// plugin advertises.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DeviceName string `json:"deviceName"`
}

// EvictionStrategy is what happens to the VM when its infrastructure node is
// drained.
// +kubebuilder:validation:Enum=None;LiveMigrate;LiveMigrateIfPossible;External
type EvictionStrategy string

const (
	// EvictionNone shuts the VM down.
	EvictionNone EvictionStrategy = "None"
	// EvictionLiveMigrate live-migrates the VM and blocks the drain until it
	// can.
	EvictionLiveMigrate EvictionStrategy = "LiveMigrate"
	// EvictionLiveMigrateIfPossible live-migrates when possible and shuts the
	// VM down otherwise.
	EvictionLiveMigrateIfPossible EvictionStrategy = "LiveMigrateIfPossible"
	// EvictionExternal blocks the eviction and leaves it to an external
	// controller.
	EvictionExternal EvictionStrategy = "External"
)

// RunStrategy is when KubeVirt starts a new instance of the VM.
// +kubebuilder:validation:Enum=Always;RerunOnFailure;Once
type RunStrategy string

const (
	// RunAlways starts a new instance whenever the current one stops.
	RunAlways RunStrategy = "Always"
	// RunRerunOnFailure starts a new instance only after a failure.
	RunRerunOnFailure RunStrategy = "RerunOnFailure"
	// RunOnce never starts a second instance.
	RunOnce RunStrategy = "Once"
)
