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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkerClassSpec is an immutable worker OS and bootstrap baseline.
// +kubebuilder:validation:XValidation:rule="!has(self.image) || self.bootstrap == 'kairos'",message="a fixed image is a Kairos artifact; Talos classes select a builtin or factory source"
type WorkerClassSpec struct {
	// bootstrap is the family every worker of the class boots with.
	// +required
	Bootstrap BootstrapFamily `json:"bootstrap"`

	// talos is the Talos baseline. Nonempty Talos settings on a Kairos
	// class are rejected.
	// +optional
	Talos *TalosBaseline `json:"talos,omitempty"`

	// kubevirt is the KubeVirt disk source of a Talos class.
	// +optional
	KubeVirt *KubeVirtClassSource `json:"kubevirt,omitempty"`

	// proxmox is the Proxmox template selection of a Talos class.
	// +optional
	Proxmox *ProxmoxTemplateSource `json:"proxmox,omitempty"`

	// image is a fixed Kairos disk; both of its fields are required
	// together. Without it a Kairos class uses the platform Kairos image
	// for the pool's Kubernetes minor.
	// +optional
	Image *FixedImage `json:"image,omitempty"`

	// cloudInitDatasource is how KubeVirt workers receive their bootstrap
	// data. Defaults to NoCloud.
	// +optional
	CloudInitDatasource CloudInitDatasource `json:"cloudInitDatasource,omitempty"`
}

// KubeVirtClassSource is a class's KubeVirt disk source.
type KubeVirtClassSource struct {
	// osImage selects the builtin golden catalog or the image factory.
	// +optional
	OSImage *OSImageSource `json:"osImage,omitempty"`
}

// ProxmoxTemplateSource selects an existing Proxmox template by tags and
// declares the Talos version and schematic the template was built from.
type ProxmoxTemplateSource struct {
	// templateTags select the template; a pool may replace the list.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	TemplateTags []string `json:"templateTags,omitzero"`

	// version is the Talos release the template declares. When set it must
	// agree with the effective Talos version.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`

	// schematicID is the schematic the template declares. When set it must
	// agree with the effective Talos schematic.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SchematicID string `json:"schematicID,omitempty"`
}

// WorkerClassStatus reports how much the class is used. Anyone who may
// read classes reads it, tenants included, so it counts pools, templates
// and namespaces and never names them: a hoster lists the users with the
// cozystack.io/worker-class label across namespaces.
type WorkerClassStatus struct {
	// conditions: InUse and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// poolCount is the number of pools that use the class.
	// +optional
	PoolCount int32 `json:"poolCount,omitempty"`

	// templateCount is the number of KubeVirtMachineTemplates that use the
	// class.
	// +optional
	TemplateCount int32 `json:"templateCount,omitempty"`

	// namespaceCount is the number of namespaces whose pools or templates
	// use the class.
	// +optional
	NamespaceCount int32 `json:"namespaceCount,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Condition types and reasons of a WorkerClass.
const (
	// InUseCondition is True while pools or templates use the class.
	InUseCondition = "InUse"
	// InUseReason and NotInUseReason explain InUseCondition.
	InUseReason    = "InUse"
	NotInUseReason = "NotInUse"
	// UsersUnknownReason means the users could not be listed.
	UsersUnknownReason = "UsersUnknown"

	// ReadyCondition is True when the class's users are known.
	ReadyCondition = "Ready"
	// ReadyReason and NotReadyReason explain ReadyCondition.
	ReadyReason    = "Ready"
	NotReadyReason = "NotReady"
)

// GetConditions returns the class's conditions.
func (c *WorkerClass) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the class's conditions.
func (c *WorkerClass) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=cozystack
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Bootstrap",type=string,JSONPath=`.spec.bootstrap`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image.reference`,priority=1
// +kubebuilder:printcolumn:name="Pools",type=integer,JSONPath=`.status.poolCount`
// +kubebuilder:printcolumn:name="Templates",type=integer,JSONPath=`.status.templateCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// WorkerClass describes how a managed Kubernetes worker boots and joins its
// cluster. The hoster publishes classes; tenants select one per pool. The
// spec is immutable: publish another class for another baseline.
type WorkerClass struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable; publish another class instead"
	Spec WorkerClassSpec `json:"spec"`

	// +optional
	Status WorkerClassStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// WorkerClassList is a list of WorkerClasses.
type WorkerClassList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkerClass `json:"items"`
}
