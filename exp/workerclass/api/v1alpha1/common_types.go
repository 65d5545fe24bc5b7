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

import "k8s.io/apimachinery/pkg/runtime/schema"

// The kinds that use classes. They are not served by this API group; the
// class controller reads them as metadata only, and pool admission as
// unstructured objects, so nothing here imports their Go types.
var (
	// PoolGroupVersionKind is the tenant pool API, KubernetesNodes.
	PoolGroupVersionKind = schema.GroupVersionKind{Group: "apps.cozystack.io", Version: "v1alpha1", Kind: "KubernetesNodes"}
	// PoolResource is the pool API's resource.
	PoolResource = schema.GroupVersionResource{Group: "apps.cozystack.io", Version: "v1alpha1", Resource: "kubernetesnodes"}
	// KubeVirtMachineTemplateGroupVersionKind is the infrastructure
	// template that names a class.
	KubeVirtMachineTemplateGroupVersionKind = schema.GroupVersionKind{Group: "infrastructure.cozystack.io", Version: "v1alpha1", Kind: "KubeVirtMachineTemplate"}
)

// Well-known names shared by admission, the class controller and the
// providers that consume classes.
const (
	// WorkerClassLabel names the class a pool or KubeVirtMachineTemplate
	// uses. The class controller finds a class's users by this label.
	WorkerClassLabel = "cozystack.io/worker-class"

	// WorkerClassInUseFinalizer keeps a class that pools or templates still
	// use from being deleted.
	WorkerClassInUseFinalizer = "cozystack.io/worker-class-in-use"

	// TalosClassName and KairosClassName are the built-in classes that exist
	// after install.
	TalosClassName  = "talos"
	KairosClassName = "kairos"

	// PlatformName is the name of the WorkerPlatform singleton.
	PlatformName = "default"
)

// BootstrapFamily is how a worker boots and joins its cluster.
// +kubebuilder:validation:Enum=talos;kairos
type BootstrapFamily string

const (
	// BootstrapTalos boots Talos Linux configured by the Talos bootstrap
	// provider.
	BootstrapTalos BootstrapFamily = "talos"
	// BootstrapKairos boots an immutable Kairos disk that joins through
	// the Kairos kubeadm bootstrap provider.
	BootstrapKairos BootstrapFamily = "kairos"
)

// CloudInitDatasource is the cloud-init volume that carries the bootstrap
// data to a KubeVirt worker.
// +kubebuilder:validation:Enum=NoCloud;ConfigDrive
type CloudInitDatasource string

const (
	// CloudInitNoCloud attaches the bootstrap data as a NoCloud volume.
	CloudInitNoCloud CloudInitDatasource = "NoCloud"
	// CloudInitConfigDrive attaches the bootstrap data as a ConfigDrive
	// volume.
	CloudInitConfigDrive CloudInitDatasource = "ConfigDrive"
)

// TalosScalars are the single-valued Talos settings. A nil field is not
// supplied; a non-nil empty string is an explicit empty value, which is kept
// as it is and never replaced by a lower layer.
type TalosScalars struct {
	// version is the Talos release, for example v1.13.6.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version *string `json:"version,omitempty"`

	// schematicID is the Talos image factory schematic (64 hex characters).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SchematicID *string `json:"schematicID,omitempty"`

	// imageFactoryURL is the Talos image factory endpoint that serves disk
	// images and installers, for example https://factory.talos.dev.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	ImageFactoryURL *string `json:"imageFactoryURL,omitempty"`

	// imageFactoryCA is a PEM bundle trusted by CDI when it imports a disk
	// image over HTTPS from the image factory. It does not change the
	// guest's or the cluster's trust.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	ImageFactoryCA *string `json:"imageFactoryCA,omitempty"`

	// installerRepository is the image repository (without tag) that the
	// guest pulls the Talos installer from. When empty, the installer comes
	// from the image factory for the effective schematic.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	InstallerRepository *string `json:"installerRepository,omitempty"`
}

// TalosBaseline is a class's Talos baseline: the scalars plus the lists and
// maps a pool may replace as a whole.
type TalosBaseline struct {
	TalosScalars `json:",inline"`

	// registryMirrors configures the guest's image pulls, keyed by registry
	// host. {} is an explicit empty map.
	// +optional
	RegistryMirrors map[string]RegistryMirror `json:"registryMirrors,omitzero"`

	// kernelModules are loaded at boot. [] is an explicit empty list that
	// disables loading, including the automatic NVIDIA modules.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	KernelModules []KernelModule `json:"kernelModules,omitzero"`
}

// KernelModule is a kernel module to load at boot.
type KernelModule struct {
	// name of the module, for example nvme_tcp.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// parameters passed to the module, each key=value.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Parameters []string `json:"parameters,omitempty"`
}

// RegistryMirror lists the endpoints that serve one registry's images.
type RegistryMirror struct {
	// endpoints are tried in order.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Endpoints []string `json:"endpoints"`

	// skipFallback stops the guest from pulling from the registry itself
	// when every endpoint fails, as Talos' machine.registries.mirrors
	// field of that name does. Without it a mirror routes pulls but does
	// not enforce an air gap. Cozystack's pools carry it.
	// +optional
	SkipFallback bool `json:"skipFallback,omitempty"`
}

// OSImageSource selects where a Talos worker's KubeVirt disk comes from:
// the platform's builtin golden catalog or the Talos image factory. At most
// one may be set; an empty source ({}) selects the default factory path.
// +kubebuilder:validation:XValidation:rule="!(has(self.builtin) && has(self.factory))",message="builtin and factory cannot both be set"
type OSImageSource struct {
	// builtin clones a golden disk from the platform catalog.
	// +optional
	Builtin *BuiltinImageSource `json:"builtin,omitempty"`

	// factory imports the disk over HTTP from a Talos image factory.
	// +optional
	Factory *FactoryImageSource `json:"factory,omitempty"`
}

// BuiltinImageSource names a golden disk by Talos version and schematic.
// Empty values use the effective Talos settings.
type BuiltinImageSource struct {
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SchematicID string `json:"schematicID,omitempty"`
}

// FactoryImageSource names a Talos image factory disk. Empty values use the
// effective Talos settings.
type FactoryImageSource struct {
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SchematicID string `json:"schematicID,omitempty"`
	// endpoint is the image factory URL.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`
}

// FixedImage is a particular worker disk: a container disk pinned by digest
// together with the exact Kubernetes version of the kubelet and kubeadm
// packaged in it.
type FixedImage struct {
	// kubernetesVersion is the exact Kubernetes release in the disk, for
	// example v1.35.6.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	KubernetesVersion string `json:"kubernetesVersion"`

	// reference is a publicly pullable container disk pinned by digest,
	// for example registry.example.com/workers/kairos-worker@sha256:<hex>.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reference string `json:"reference"`
}

// GPU is a GPU a pool requests, named by its resource name, for example
// nvidia.com/AD102GL_L40S.
type GPU struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// KubernetesVersionMatch says how strictly a worker's Kubernetes version is
// tied to its image: Exact for a fixed image that packages one patch, Minor
// for platform images that follow the platform's patch for a minor.
// +kubebuilder:validation:Enum=Exact;Minor
type KubernetesVersionMatch string

const (
	// KubernetesVersionMatchExact means the image packages exactly this
	// patch.
	KubernetesVersionMatchExact KubernetesVersionMatch = "Exact"
	// KubernetesVersionMatchMinor means the image serves the minor; the
	// patch comes from the platform's version map.
	KubernetesVersionMatchMinor KubernetesVersionMatch = "Minor"
)
