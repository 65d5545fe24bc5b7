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

// KubeVirtClusterSpec describes the infrastructure of a cluster whose control
// plane is hosted elsewhere: there is nothing to create, only facts to pass
// through to Cluster API.
type KubeVirtClusterSpec struct {
	// controlPlaneEndpoint is passed through to the Cluster. Leave it empty
	// when the control plane provider reports the endpoint. Immutable once
	// set.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// failureDomains the cluster's machines can be spread over. A name is a
	// value of the topology.kubernetes.io/zone label of the infrastructure
	// cluster's nodes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`
}

// KubeVirtClusterInitializationStatus is the provisioning state the Cluster
// API contract reads.
// +kubebuilder:validation:MinProperties=1
type KubeVirtClusterInitializationStatus struct {
	// provisioned is true once the cluster infrastructure is ready.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// KubeVirtClusterStatus is the observed state of a KubeVirtCluster.
// +kubebuilder:validation:MinProperties=1
type KubeVirtClusterStatus struct {
	// conditions: Ready and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization is the provisioning state the Cluster API contract
	// reads.
	// +optional
	Initialization KubeVirtClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// failureDomains copied from spec.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// observedGeneration is the latest generation the controller observed.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubevirtclusters,scope=Namespaced,categories=cluster-api,shortName=kvc
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KubeVirtCluster is the infrastructure of a cluster whose workers run as
// KubeVirt VMs and whose control plane is hosted elsewhere.
type KubeVirtCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the cluster infrastructure.
	// +optional
	Spec KubeVirtClusterSpec `json:"spec,omitempty,omitzero"`

	// status is the observed state.
	// +optional
	Status KubeVirtClusterStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the cluster's conditions.
func (c *KubeVirtCluster) GetConditions() []metav1.Condition {
	return c.Status.Conditions
}

// SetConditions sets the cluster's conditions.
func (c *KubeVirtCluster) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KubeVirtClusterList is a list of KubeVirtClusters.
type KubeVirtClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirtCluster `json:"items"`
}

// KubeVirtClusterTemplateSpec is the KubeVirtCluster a ClusterClass stamps
// out.
type KubeVirtClusterTemplateSpec struct {
	// template is the KubeVirtCluster.
	// +required
	Template KubeVirtClusterTemplateResource `json:"template"`
}

// KubeVirtClusterTemplateResource is the KubeVirtCluster of a template.
type KubeVirtClusterTemplateResource struct {
	// metadata of the KubeVirtCluster.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the KubeVirtCluster.
	// +optional
	Spec KubeVirtClusterSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubevirtclustertemplates,scope=Namespaced,categories=cluster-api,shortName=kvct
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KubeVirtClusterTemplate is an immutable template of KubeVirtClusters for
// ClusterClass.
type KubeVirtClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the template.
	// +required
	Spec KubeVirtClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// KubeVirtClusterTemplateList is a list of KubeVirtClusterTemplates.
type KubeVirtClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirtClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes,
		&KubeVirtCluster{}, &KubeVirtClusterList{},
		&KubeVirtClusterTemplate{}, &KubeVirtClusterTemplateList{})
}
