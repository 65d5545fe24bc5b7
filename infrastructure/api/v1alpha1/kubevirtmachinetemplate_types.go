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
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// KubeVirtMachineTemplateSpec is a machine template, optionally bound to a
// WorkerClass through spec.template.spec.workerClass.
// +kubebuilder:validation:XValidation:rule="has(self.template.spec.workerClass) || has(self.template.spec.image)",message="set spec.template.spec.workerClass, or an explicit spec.template.spec.image for a classless template"
type KubeVirtMachineTemplateSpec struct {
	// template is the KubeVirtMachine every Machine of the template gets.
	// Its spec.workerClass, when set, is resolved once into
	// status.resolved.
	// +required
	Template KubeVirtMachineTemplateResource `json:"template"`
}

// KubeVirtMachineTemplateResource is the KubeVirtMachine a template stamps
// out.
type KubeVirtMachineTemplateResource struct {
	// metadata of the KubeVirtMachines.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the KubeVirtMachines.
	// +required
	Spec KubeVirtMachineSpec `json:"spec"`
}

// ResolvedMachine is the result of resolving a template, frozen once written.
type ResolvedMachine struct {
	// workerClassName the result was resolved from; empty for a classless
	// template.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	WorkerClassName string `json:"workerClassName,omitempty"`

	// bootstrap is the bootstrap family of the class; empty for a classless
	// template.
	// +optional
	Bootstrap workerclassv1.BootstrapFamily `json:"bootstrap,omitempty"`

	// kubernetesVersion is the exact Kubernetes version (vMAJOR.MINOR.PATCH)
	// of the image; empty for a classless template.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// kubernetesVersionMatch tells a bootstrap provider how a Machine's
	// version must match kubernetesVersion.
	// +optional
	KubernetesVersionMatch workerclassv1.KubernetesVersionMatch `json:"kubernetesVersionMatch,omitempty"`

	// image is the root disk source every machine of the template boots.
	// +required
	Image ImageSource `json:"image"`

	// talosVersion of a Talos image.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TalosVersion string `json:"talosVersion,omitempty"`

	// schematicID of a Talos image factory image.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SchematicID string `json:"schematicID,omitempty"`

	// cloudInitDatasource the machines attach their bootstrap data with.
	// +required
	CloudInitDatasource CloudInitDatasource `json:"cloudInitDatasource"`

	// contentHash is a stable hash of everything that changes the machines'
	// bytes or boot.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	ContentHash string `json:"contentHash"`
}

// NodeInfo is the architecture and operating system of the template's nodes,
// for the cluster autoscaler's scale from zero.
// +kubebuilder:validation:MinProperties=1
type NodeInfo struct {
	// architecture of the node's CPU.
	// +optional
	Architecture Architecture `json:"architecture,omitempty"`

	// operatingSystem of the node, always linux here.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// KubeVirtMachineTemplateStatus is the resolved, frozen state of a template.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.resolved) || (has(self.resolved) && self.resolved == oldSelf.resolved)",message="status.resolved is frozen once written"
type KubeVirtMachineTemplateStatus struct {
	// conditions: Resolved and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// resolved is the image, versions and datasource the template's machines
	// use, written once.
	// +optional
	Resolved *ResolvedMachine `json:"resolved,omitempty"`

	// capacity of one machine (cpu, memory, GPUs by node resource name,
	// ephemeral-storage) for the cluster autoscaler's scale from zero.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// nodeInfo of one machine for the cluster autoscaler's scale from zero.
	// +optional
	NodeInfo NodeInfo `json:"nodeInfo,omitempty,omitzero"`

	// nodeLabels the template's machines' nodes register with, derived
	// from what the machines get: cluster-api/accelerator=<gpu type> for
	// machines with GPUs (the label the cluster autoscaler's Cluster API
	// provider recognizes a GPU node by). The Kairos bootstrap provider
	// renders them beside the KairosConfig's own nodeLabels, which win.
	// Written with status.resolved, once.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// observedGeneration is the latest generation the controller observed.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubevirtmachinetemplates,scope=Namespaced,categories=cluster-api,shortName=kvmt
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Class",type="string",JSONPath=".spec.template.spec.workerClass.name"
// +kubebuilder:printcolumn:name="Resolved",type="string",JSONPath=`.status.conditions[?(@.type=="Resolved")].status`
// +kubebuilder:printcolumn:name="Kubernetes",type="string",JSONPath=".status.resolved.kubernetesVersion"
// +kubebuilder:printcolumn:name="Hash",type="string",JSONPath=".status.resolved.contentHash",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KubeVirtMachineTemplate is an immutable template of KubeVirtMachines. A
// class-based template is resolved once; the result is frozen in status.
type KubeVirtMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the template.
	// +required
	Spec KubeVirtMachineTemplateSpec `json:"spec"`

	// status is the frozen resolution.
	// +optional
	Status KubeVirtMachineTemplateStatus `json:"status,omitempty,omitzero"`
}

// CopiesImage reports whether image is the template's own
// spec.template.spec.image, which Cluster API copies into every machine it
// makes from the template: a machine with that image took it from its
// template rather than naming it.
func (t *KubeVirtMachineTemplate) CopiesImage(image *ImageSource) bool {
	return reflect.DeepEqual(t.Spec.Template.Spec.Image, image)
}

// GetConditions returns the template's conditions.
func (t *KubeVirtMachineTemplate) GetConditions() []metav1.Condition {
	return t.Status.Conditions
}

// SetConditions sets the template's conditions.
func (t *KubeVirtMachineTemplate) SetConditions(conditions []metav1.Condition) {
	t.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KubeVirtMachineTemplateList is a list of KubeVirtMachineTemplates.
type KubeVirtMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirtMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KubeVirtMachineTemplate{}, &KubeVirtMachineTemplateList{})
}
