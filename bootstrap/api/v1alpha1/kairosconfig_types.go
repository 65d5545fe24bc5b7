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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JoinMode selects which of the two join renderings a KairosConfig gets.
// Exactly one is rendered, so a node never joins twice.
// +kubebuilder:validation:Enum=Stages;ClusterProvider
type JoinMode string

const (
	// JoinModeStages renders plain yip stages that write a kubeadm
	// JoinConfiguration (mode 0600) and run `kubeadm join`. It serves any
	// Kairos disk that ships kubeadm, kubelet and a container runtime.
	JoinModeStages JoinMode = "Stages"

	// JoinModeClusterProvider renders the `cluster:` block that Kairos's
	// kubeadm provider (kairos-io/provider-kubeadm) reads: worker role, the
	// control plane endpoint, the Machine's Kubernetes version and the join
	// configuration. It serves disks built with such a provider, which then
	// runs kubeadm itself.
	JoinModeClusterProvider JoinMode = "ClusterProvider"
)

// KairosConfigSpec is the per-Machine input of the Kairos bootstrap
// provider. Everything else the join needs (token, endpoint, CA pin,
// hostname and providerID) comes from the Cluster and the Machine.
// Kairos is not general cloud-init: only these settings are accepted.
type KairosConfigSpec struct {
	// joinMode selects the rendering: Stages (kubeadm run by plain stages)
	// or ClusterProvider (the `cluster:` block of a Kairos kubeadm provider).
	// +optional
	// +kubebuilder:default=Stages
	JoinMode JoinMode `json:"joinMode,omitempty"`

	// sshKeys holds zero or one SSH public key, in authorized_keys format
	// without options. A key authorizes the sudo-capable guest user
	// `kairos`; an empty list configures no SSH login. More than one key,
	// and anything that is not a public key, is rejected.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=16384
	SSHKeys []string `json:"sshKeys,omitempty"`

	// nodeLabels are registered by the kubelet when the node joins. Keys in
	// the kubernetes.io and k8s.io namespaces are limited to those a kubelet
	// may set on itself.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// nodeTaints are registered with the node, next to the
	// node.cluster.x-k8s.io/uninitialized:NoSchedule taint that is always
	// added and that Cluster API removes once the Machine is initialized.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	NodeTaints []NodeTaint `json:"nodeTaints,omitempty"`

	// kubeletExtraArgs are extra kubelet flags (name without leading
	// dashes). Flags the provider sets itself (provider-id, node-labels,
	// hostname-override and the kubeconfig flags) are rejected.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	KubeletExtraArgs []Arg `json:"kubeletExtraArgs,omitempty"`

	// files are written to the node before it joins, inline or from a
	// Secret in the KairosConfig's namespace.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=32
	Files []File `json:"files,omitempty"`

	// joinTimeouts bound the phases of `kubeadm join`. Unset values keep
	// kubeadm's defaults.
	// +optional
	JoinTimeouts JoinTimeouts `json:"joinTimeouts,omitempty,omitzero"`
}

// NodeTaint is a taint registered with the node when it joins.
type NodeTaint struct {
	// key is the taint key, a qualified name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`

	// value is the taint value.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Value string `json:"value,omitempty"`

	// effect is NoSchedule, PreferNoSchedule or NoExecute.
	// +required
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	Effect corev1.TaintEffect `json:"effect"`
}

// Arg is one kubelet flag.
type Arg struct {
	// name is the flag name without leading dashes, e.g. max-pods.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// value is the flag value.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`
}

// File is a file written to the node before it joins.
// +kubebuilder:validation:XValidation:rule="!(has(self.content) && has(self.contentFrom))",message="content and contentFrom are mutually exclusive"
type File struct {
	// path is the absolute path of the file.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=512
	Path string `json:"path"`

	// owner is the file's owner as `user` or `user:group`; root when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=65
	Owner string `json:"owner,omitempty"`

	// permissions are the file's mode in octal, e.g. "0644". Defaults to
	// 0644 for inline content and 0600 for content from a Secret, which may
	// not be readable by others.
	// +optional
	// +kubebuilder:validation:Pattern=`^0?[0-7]{3}$`
	Permissions string `json:"permissions,omitempty"`

	// content is the file's inline content.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Content string `json:"content,omitempty"`

	// contentFrom reads the content from a Secret key.
	// +optional
	ContentFrom FileSource `json:"contentFrom,omitempty,omitzero"`
}

// FileSource names where a file's content comes from.
type FileSource struct {
	// secret is a key of a Secret in the KairosConfig's namespace.
	// +required
	Secret SecretKeySource `json:"secret,omitempty,omitzero"`
}

// SecretKeySource is one key of a Secret.
type SecretKeySource struct {
	// name is the Secret's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// JoinTimeouts bound the phases of `kubeadm join`, in seconds.
// +kubebuilder:validation:MinProperties=1
type JoinTimeouts struct {
	// discoverySeconds bounds discovery: reading and verifying cluster-info
	// with the bootstrap token and CA pin. A node whose token was revoked
	// gives up after this long instead of retrying forever.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	DiscoverySeconds *int32 `json:"discoverySeconds,omitempty"`

	// tlsBootstrapSeconds bounds the kubelet's TLS bootstrap.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TLSBootstrapSeconds *int32 `json:"tlsBootstrapSeconds,omitempty"`

	// kubeletHealthCheckSeconds bounds the wait for a healthy kubelet.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	KubeletHealthCheckSeconds *int32 `json:"kubeletHealthCheckSeconds,omitempty"`

	// kubernetesAPICallSeconds bounds each API call kubeadm makes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	KubernetesAPICallSeconds *int32 `json:"kubernetesAPICallSeconds,omitempty"`
}

// KairosConfigStatus is the observed state of a KairosConfig.
// +kubebuilder:validation:MinProperties=1
type KairosConfigStatus struct {
	// conditions are the v1beta2 conditions: Ready, DataSecretAvailable and
	// Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the bootstrap contract's initialization
	// milestones.
	// +optional
	Initialization KairosConfigInitializationStatus `json:"initialization,omitempty,omitzero"`

	// dataSecretName is the name of the Secret holding the bootstrap data.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DataSecretName string `json:"dataSecretName,omitempty"`

	// observedGeneration is the latest generation the controller observed.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// KairosConfigInitializationStatus holds the bootstrap contract's
// initialization milestones.
// +kubebuilder:validation:MinProperties=1
type KairosConfigInitializationStatus struct {
	// dataSecretCreated is true once the bootstrap data Secret exists.
	// +optional
	DataSecretCreated *bool `json:"dataSecretCreated,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairosconfigs,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Join mode",type="string",JSONPath=".spec.joinMode",description="How the node joins"
// +kubebuilder:printcolumn:name="Data secret created",type="string",JSONPath=`.status.initialization.dataSecretCreated`,description="Bootstrap data Secret exists"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=`.status.conditions[?(@.type=="DataSecretAvailable")].reason`,description="Why the data is or is not available"
// +kubebuilder:printcolumn:name="Paused",type="string",JSONPath=`.status.conditions[?(@.type=="Paused")].status`,description="Reconciliation paused",priority=10
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// KairosConfig is the bootstrap configuration of one Machine whose disk is
// an immutable Kairos image joining with kubeadm.
type KairosConfig struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired bootstrap configuration.
	// +optional
	Spec KairosConfigSpec `json:"spec,omitempty,omitzero"`

	// status is the observed state.
	// +optional
	Status KairosConfigStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the v1beta2 conditions.
func (c *KairosConfig) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the v1beta2 conditions.
func (c *KairosConfig) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KairosConfigList is a list of KairosConfigs.
type KairosConfigList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the KairosConfigs.
	Items []KairosConfig `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosConfig{}, &KairosConfigList{})
}
