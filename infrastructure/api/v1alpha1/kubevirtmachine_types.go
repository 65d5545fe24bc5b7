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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// MachineFinalizer lets the controller delete the VirtualMachine and its
// disks, and wait until they are gone, before the KubeVirtMachine goes.
const MachineFinalizer = "infrastructure.cozystack.io/kubevirtmachine"

// KubeVirtMachineSpec is the VM a machine runs.
// +kubebuilder:validation:XValidation:rule="has(self.instancetype) ? !has(self.cpu) && !has(self.memory) : has(self.cpu) && has(self.memory)",message="set instancetype, or cpu and memory, not both"
// +kubebuilder:validation:XValidation:rule="!has(self.workerClass) || !has(self.image)",message="a spec that selects a workerClass takes its image from the class; image must be empty"
type KubeVirtMachineSpec struct {
	// providerID is kubevirt://<KubeVirtMachine name>. The controller sets it.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// workerClass selects the WorkerClass the image and bootstrap family
	// are resolved from, with the pool's Kubernetes minor and overrides.
	// The KubeVirtMachineTemplate resolves it once into status.resolved;
	// a KubeVirtMachine carries Cluster API's copy and boots the
	// template's resolved image. It sits in the machine spec so that a
	// ClusterClass patch, which reaches only spec.template.spec, can set
	// it. Unset for a classless machine, which sets image.
	// +optional
	WorkerClass *WorkerClassSelection `json:"workerClass,omitempty"`

	// image is the root disk source of a machine that does not use a
	// WorkerClass. Leave it empty when workerClass is set: the template's
	// frozen status.resolved image is used then.
	// +optional
	Image *ImageSource `json:"image,omitempty"`

	// cloudInitDatasource is how the bootstrap data reaches the guest:
	// NoCloud or ConfigDrive. Empty means the class's choice for class-based
	// templates, and NoCloud otherwise.
	// +optional
	CloudInitDatasource CloudInitDatasource `json:"cloudInitDatasource,omitempty"`

	// instancetype sizes the VM from a KubeVirt instancetype. Mutually
	// exclusive with cpu and memory.
	// +optional
	Instancetype *InstancetypeReference `json:"instancetype,omitempty"`

	// preference applies a KubeVirt preference to the VM.
	// +optional
	Preference *PreferenceReference `json:"preference,omitempty"`

	// cpu is the VM's virtual CPU when no instancetype is used.
	// +optional
	CPU *CPU `json:"cpu,omitempty"`

	// memory is the VM's guest memory when no instancetype is used.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`

	// architecture of the VM; the preference's preferred architecture, or
	// amd64, when empty.
	// +optional
	Architecture Architecture `json:"architecture,omitempty"`

	// rootDisk sizes and places the root DataVolume of imported and cloned
	// images.
	// +optional
	RootDisk *RootDisk `json:"rootDisk,omitempty"`

	// networks are the VM's interfaces. Empty means one interface on the pod
	// network with masquerade binding.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.filter(n, has(n.pod)).size() <= 1",message="at most one interface can use the pod network"
	Networks []Network `json:"networks,omitempty"`

	// gpus passed through to the VM.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	GPUs []GPU `json:"gpus,omitempty"`

	// hostDevices passed through to the VM.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	HostDevices []HostDevice `json:"hostDevices,omitempty"`

	// affinity of the VM's pod on the infrastructure cluster. A Machine's
	// failure domain adds a required node affinity on
	// topology.kubernetes.io/zone.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// tolerations of the VM's pod.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// evictionStrategy when the VM's infrastructure node is drained;
	// KubeVirt's cluster-wide default when empty.
	// +optional
	EvictionStrategy EvictionStrategy `json:"evictionStrategy,omitempty"`

	// runStrategy is when KubeVirt starts a new instance of the VM; Always
	// when empty. A new instance of a container-disk VM boots a blank disk,
	// which this provider reports as EphemeralDiskLost.
	// +optional
	RunStrategy RunStrategy `json:"runStrategy,omitempty"`

	// virtualMachineMetadata are labels and annotations of the
	// VirtualMachine, beside the provider's own (which win). Keys of the
	// provider (infrastructure.cozystack.io), of KubeVirt (kubevirt.io and
	// its subdomains) and of Cluster API (cluster.x-k8s.io and its
	// subdomains) are refused.
	// +optional
	VirtualMachineMetadata ObjectMetadata `json:"virtualMachineMetadata,omitempty,omitzero"`

	// instanceMetadata are labels and annotations of the VM's instances
	// (the VirtualMachine's spec.template.metadata), which KubeVirt copies
	// to their virt-launcher Pods; the provider's own labels win. The keys
	// refused on virtualMachineMetadata are refused here too, but for the
	// annotation kubevirt.io/allow-pod-bridge-network-live-migration, and so
	// are the network plugins' Pod annotations (Multus, Kube-OVN,
	// OVN-Kubernetes, Calico): the instance's networks are the spec's.
	// +optional
	InstanceMetadata ObjectMetadata `json:"instanceMetadata,omitempty,omitzero"`

	// topologySpreadConstraints of the VM's instances. The topologyKey is
	// kubernetes.io/hostname or one of the node label keys the hoster lets
	// tenants select nodes by (--tenant-node-affinity-keys); the
	// labelSelector counts only Pods of the machine's own namespace.
	// +optional
	// +listType=map
	// +listMapKey=topologyKey
	// +listMapKey=whenUnsatisfiable
	// +kubebuilder:validation:MaxItems=8
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
}

// ObjectMetadata are labels and annotations a tenant adds to an object the
// provider creates.
// +kubebuilder:validation:MinProperties=1
type ObjectMetadata struct {
	// labels added to the object.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the object.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Annotations map[string]string `json:"annotations,omitempty"`
}

// WorkerClassSelection names a WorkerClass and the pool settings it is
// resolved with.
type WorkerClassSelection struct {
	// name of the cluster-scoped WorkerClass.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// PoolSettings are the pool's Kubernetes minor and the overrides the
	// class baseline is resolved with (version, talos, kernelModules,
	// registryMirrors, osImage, proxmox, gpus). sshKeys takes no key (the
	// webhook refuses one): nothing renders it; a guest's key is
	// KairosConfig(Template) spec.sshKeys.
	workerclassv1.PoolSettings `json:",inline"`
}

// KubeVirtMachineInitializationStatus is the provisioning state the Cluster
// API contract reads.
// +kubebuilder:validation:MinProperties=1
type KubeVirtMachineInitializationStatus struct {
	// provisioned is true once the VM's instance is ready and has an
	// address. It is never reset.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// KubeVirtMachineStatus is the observed state of a KubeVirtMachine.
// +kubebuilder:validation:MinProperties=1
type KubeVirtMachineStatus struct {
	// conditions: Ready (mirrored to the Machine's InfrastructureReady),
	// VirtualMachineProvisioned, BootDiskReady and Paused. Ready is Unknown
	// while provisioning progresses and False only for failures that a
	// replacement Machine can fix.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization is the provisioning state the Cluster API contract
	// reads.
	// +optional
	Initialization KubeVirtMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// addresses of the VM's interfaces, as its instance reports them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain the VM was placed in.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// nodeName is the infrastructure cluster node running the VM.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// provisionedInstanceUID is the VirtualMachineInstance that first became
	// ready. On a container disk any other instance started from a blank
	// disk, so the node's state is gone.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ProvisionedInstanceUID string `json:"provisionedInstanceUID,omitempty"`

	// observedGeneration is the latest generation the controller observed.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubevirtmachines,scope=Namespaced,categories=cluster-api,shortName=kvm
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Machine",type="string",JSONPath=".metadata.ownerReferences[?(@.kind==\"Machine\")].name",description="Machine"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Node",type="string",JSONPath=".status.nodeName",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KubeVirtMachine is one Cluster API machine backed by a KubeVirt
// VirtualMachine of the same name in the same namespace.
type KubeVirtMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the VM the machine runs.
	// +required
	Spec KubeVirtMachineSpec `json:"spec"`

	// status is the observed state of the machine.
	// +optional
	Status KubeVirtMachineStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the machine's conditions.
func (m *KubeVirtMachine) GetConditions() []metav1.Condition {
	return m.Status.Conditions
}

// SetConditions sets the machine's conditions.
func (m *KubeVirtMachine) SetConditions(conditions []metav1.Condition) {
	m.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KubeVirtMachineList is a list of KubeVirtMachines.
type KubeVirtMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirtMachine `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KubeVirtMachine{}, &KubeVirtMachineList{})
}
