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

// Conditions and reasons of a KairosConfig (v1beta2 conditions).
const (
	// ReadyCondition summarizes the other conditions; Cluster API mirrors it
	// to the Machine's BootstrapConfigReady condition.
	ReadyCondition = "Ready"

	// ReadyReason is Ready's reason when the bootstrap data is available.
	ReadyReason = "Ready"
	// NotReadyReason is Ready's reason while the data is not available.
	NotReadyReason = "NotReady"
	// ReadyUnknownReason is Ready's reason when availability is unknown.
	ReadyUnknownReason = "ReadyUnknown"

	// DataSecretAvailableCondition is true once the bootstrap data Secret
	// has been written. While it is false its reason says what it waits for.
	DataSecretAvailableCondition = "DataSecretAvailable"

	// DataSecretAvailableReason: the bootstrap data Secret exists.
	DataSecretAvailableReason = "Available"
	// WaitingForClusterInfrastructureReason: the Cluster's infrastructure is
	// not provisioned, so the workload cluster cannot be reached yet.
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"

	// WaitingForOwnerReason: no Machine owns the config yet (Cluster API's
	// Machine controller makes its Machine the owner).
	WaitingForOwnerReason = "WaitingForOwner"
	// WaitingForClusterReason: the Cluster the config belongs to does not
	// exist; the message names it.
	WaitingForClusterReason = "WaitingForCluster"
	// WaitingForControlPlaneInitializedReason: the Cluster's control plane is
	// not initialized, so there is nothing to join yet.
	WaitingForControlPlaneInitializedReason = "WaitingForControlPlaneInitialized"
	// WaitingForControlPlaneEndpointReason: Cluster.spec.controlPlaneEndpoint
	// is not set.
	WaitingForControlPlaneEndpointReason = "WaitingForControlPlaneEndpoint"
	// WaitingForInfrastructureNameReason: Machine.spec.infrastructureRef.name
	// is empty, so the hostname and providerID are not known yet.
	WaitingForInfrastructureNameReason = "WaitingForInfrastructureName"
	// WaitingForInfrastructureReason: the Machine's infrastructure object does
	// not exist yet, so the image's Kubernetes version cannot be checked.
	WaitingForInfrastructureReason = "WaitingForInfrastructure"
	// WaitingForClusterCAReason: the cluster CA Secret (<cluster>-ca) is
	// missing or holds no certificate, so the CA pin cannot be computed.
	WaitingForClusterCAReason = "WaitingForClusterCA"
	// WaitingForWorkloadClusterReason: the workload cluster's API server is
	// not reachable through the ClusterCache, so no token can be created.
	WaitingForWorkloadClusterReason = "WaitingForWorkloadCluster"
	// WaitingForInfrastructureTemplateReason: the infrastructure machine
	// template names a WorkerClass but has not resolved it yet, so the
	// class's bootstrap family cannot be checked.
	WaitingForInfrastructureTemplateReason = "WaitingForInfrastructureTemplate"
	// BootstrapFamilyMismatchReason: the infrastructure machine template was
	// resolved from a WorkerClass whose workers do not boot Kairos (Talos,
	// say); nothing is rendered, for good: the resolution is frozen.
	BootstrapFamilyMismatchReason = "BootstrapFamilyMismatch"
	// InfrastructureKindNotSupportedReason: the Machine's infrastructure
	// reference, or its infrastructure object's cloned-from annotations,
	// name a kind other than the KubeVirt provider's; the controller reads
	// no other kind, and nothing is rendered.
	InfrastructureKindNotSupportedReason = "InfrastructureKindNotSupported"
	// KubernetesVersionMismatchReason: the image's Kubernetes version does not
	// match Machine.spec.version; nothing is rendered.
	KubernetesVersionMismatchReason = "KubernetesVersionMismatch"
	// KubernetesVersionRequiredReason: the config's joinMode is
	// ClusterProvider and its Machine has no spec.version, which Kairos's
	// kubeadm provider needs to choose kubeadm's configuration API;
	// nothing is rendered.
	KubernetesVersionRequiredReason = "KubernetesVersionRequired"
	// FileSourceNotAvailableReason: a file's contentFrom Secret or key is
	// missing; asked again after 10 s, then twice as long each time, at
	// most every 5 minutes.
	FileSourceNotAvailableReason = "FileSourceNotAvailable"
	// FileSourceForbiddenReason: a file's contentFrom Secret is one of
	// Cluster API's own (the cluster's CAs and keys, its kubeconfig, another
	// Machine's bootstrap data); nothing is rendered, for good.
	FileSourceForbiddenReason = "FileSourceForbidden"
	// TemplateNodeLabelsForbiddenReason: the infrastructure machine
	// template's status.nodeLabels hold a label the config's own nodeLabels
	// may not (one a kubelet may not set on itself, or of invalid syntax);
	// nothing is rendered, for good: the labels are frozen with the
	// resolution.
	TemplateNodeLabelsForbiddenReason = "TemplateNodeLabelsForbidden"
	// InternalErrorReason: an unexpected error; the controller log has it.
	InternalErrorReason = "InternalError"

	// BootstrapDataTooLargeReason: the rendered bootstrap data would not
	// fit in a Secret (1 MiB); the message gives both sizes. No token is
	// minted for it.
	BootstrapDataTooLargeReason = "BootstrapDataTooLarge"

	// SecretValueTooLargeReason: a Secret the controller reads (the
	// cluster CA, the config's token record) holds a value larger than any
	// it legitimately holds there, so the cache did not keep it and it is
	// not read; the message names the Secret, the key and the limit.
	// Nothing is rendered until the Secret is fixed.
	SecretValueTooLargeReason = "SecretValueTooLarge"
)

const (
	// ConfigFinalizer lets the controller revoke the Machine's bootstrap
	// token in the workload cluster before the KairosConfig goes away.
	ConfigFinalizer = "bootstrap.cozystack.io/kairosconfig"

	// DataFormatCloudConfig is the bootstrap Secret's `format` value.
	DataFormatCloudConfig = "cloud-config"
)
