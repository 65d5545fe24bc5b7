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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// KairosConfigTemplateSpec holds the template a MachineDeployment or a
// ClusterClass stamps KairosConfigs from.
type KairosConfigTemplateSpec struct {
	// template is the KairosConfig to stamp.
	// +required
	Template KairosConfigTemplateResource `json:"template,omitzero"`
}

// KairosConfigTemplateResource is the metadata and spec of the stamped
// KairosConfigs.
type KairosConfigTemplateResource struct {
	// metadata is copied onto the stamped KairosConfigs.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec is the KairosConfig spec.
	// +optional
	Spec KairosConfigSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairosconfigtemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Join mode",type="string",JSONPath=".spec.template.spec.joinMode",description="How the nodes join"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// KairosConfigTemplate is an immutable template of KairosConfigs.
type KairosConfigTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +optional
	Spec KairosConfigTemplateSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// KairosConfigTemplateList is a list of KairosConfigTemplates.
type KairosConfigTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the KairosConfigTemplates.
	Items []KairosConfigTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosConfigTemplate{}, &KairosConfigTemplateList{})
}
