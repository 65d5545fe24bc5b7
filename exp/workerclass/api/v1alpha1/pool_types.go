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

// PoolSettings are the class-relevant fields of a tenant worker pool: the
// Kubernetes minor and the overrides resolved against the class baseline.
// KubeVirtMachineTemplate embeds them; pool admission reads them from the
// KubernetesNodes object. Nil means "not supplied" throughout; {} and [] are
// supplied values that replace the baseline.
type PoolSettings struct {
	// version is the Kubernetes minor, for example v1.35. The platform
	// picks the patch; a fixed image supplies its own and the pool must
	// select that image's minor.
	// +optional
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=16
	Version string `json:"version,omitempty"`

	// talos overrides the class's Talos scalars. An explicit empty value
	// is kept, not replaced by the baseline.
	// +optional
	Talos *TalosScalars `json:"talos,omitempty"`

	// kernelModules replaces the class's list; [] disables loading.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	KernelModules []KernelModule `json:"kernelModules,omitzero"`

	// registryMirrors replaces the class's map; {} clears it.
	// +optional
	RegistryMirrors map[string]RegistryMirror `json:"registryMirrors,omitzero"`

	// osImage replaces the class's KubeVirt source as a unit; {} selects
	// the default factory path.
	// +optional
	OSImage *OSImageSource `json:"osImage,omitempty"`

	// proxmox replaces the class's Proxmox template tags.
	// +optional
	Proxmox *ProxmoxOverrides `json:"proxmox,omitempty"`

	// sshKeys are public keys for a sudo-capable guest user. Kairos takes
	// zero or one; Talos only an empty list.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	SSHKeys []string `json:"sshKeys,omitzero"`

	// gpus the pool's workers get. A pool requesting nvidia.com GPUs gets
	// the NVIDIA kernel modules on Talos when no module list is supplied.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	GPUs []GPU `json:"gpus,omitempty"`
}

// ProxmoxOverrides are a pool's Proxmox overrides.
type ProxmoxOverrides struct {
	// templateTags replaces the class's tags; the final list must not be
	// empty.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	TemplateTags []string `json:"templateTags,omitzero"`
}
