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

// WorkerPlatformSpec is the platform configuration that resolution reads:
// the default class, Kubernetes patches for platform images, the Talos
// factory defaults, the golden catalog and the platform Kairos images.
type WorkerPlatformSpec struct {
	// defaultClass is written into pools created without a class. It is
	// read at admission time only; changing it never retargets stored
	// pools.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DefaultClass string `json:"defaultClass"`

	// kubernetesVersions maps each supported Kubernetes minor to the exact
	// patch that platform images run. A fixed image keeps its own patch.
	// +optional
	// +listType=map
	// +listMapKey=minor
	// +kubebuilder:validation:MaxItems=32
	KubernetesVersions []KubernetesVersion `json:"kubernetesVersions,omitempty"`

	// talosFactory holds the Talos defaults used when neither class nor
	// pool supplies a value.
	// +optional
	TalosFactory TalosFactoryDefaults `json:"talosFactory,omitzero"`

	// goldenImages is the builtin catalog: Talos version and schematic to
	// the DataSource or PVC a worker disk is cloned from.
	// +optional
	// +listType=map
	// +listMapKey=version
	// +listMapKey=schematicID
	// +kubebuilder:validation:MaxItems=256
	GoldenImages []GoldenImage `json:"goldenImages,omitempty"`

	// kairosImages are the platform Kairos container disks, one per
	// Kubernetes minor, pinned by digest. They are experimental: a rebuild
	// changes the digest and so replaces workers.
	// +optional
	// +listType=map
	// +listMapKey=minor
	// +kubebuilder:validation:MaxItems=32
	KairosImages []KairosImage `json:"kairosImages,omitempty"`
}

// KubernetesVersion maps a minor to its platform patch.
type KubernetesVersion struct {
	// minor, for example v1.35.
	// +required
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=16
	Minor string `json:"minor"`
	// patch, for example v1.35.6; its minor must be minor.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Patch string `json:"patch"`
}

// Defaults of TalosFactoryDefaults applied when the platform leaves a field
// empty.
const (
	DefaultTalosFactoryURL    = "https://factory.talos.dev"
	DefaultTalosImagePlatform = "nocloud"
	DefaultTalosArchitecture  = "amd64"
)

// TalosFactoryDefaults are the platform's Talos settings.
type TalosFactoryDefaults struct {
	// url is the image factory endpoint; defaults to
	// https://factory.talos.dev.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
	// version is the default Talos release.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// schematicID is the default schematic.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SchematicID string `json:"schematicID,omitempty"`
	// installerRepository is the default installer repository; when empty
	// the installer comes from the image factory.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	InstallerRepository string `json:"installerRepository,omitempty"`
	// imagePlatform is the Talos platform of factory disk images; defaults
	// to nocloud.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ImagePlatform string `json:"imagePlatform,omitempty"`
	// architecture of factory disk images; defaults to amd64.
	// +optional
	// +kubebuilder:validation:Enum=amd64;arm64
	Architecture string `json:"architecture,omitempty"`
}

// GoldenImageSourceKind is the kind of object a golden disk is cloned from.
// +kubebuilder:validation:Enum=DataSource;PersistentVolumeClaim
type GoldenImageSourceKind string

const (
	// GoldenDataSource clones from a CDI DataSource.
	GoldenDataSource GoldenImageSourceKind = "DataSource"
	// GoldenPersistentVolumeClaim clones from a PVC.
	GoldenPersistentVolumeClaim GoldenImageSourceKind = "PersistentVolumeClaim"
)

// GoldenImage is one entry of the builtin catalog.
type GoldenImage struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	SchematicID string `json:"schematicID"`
	// +required
	Source GoldenImageSource `json:"source"`
}

// GoldenImageSource is the object a golden disk is cloned from.
type GoldenImageSource struct {
	// +required
	Kind GoldenImageSourceKind `json:"kind"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// KairosImage is the platform Kairos disk for one Kubernetes minor.
type KairosImage struct {
	// +required
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=16
	Minor string `json:"minor"`
	// reference is a container disk pinned by digest.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reference string `json:"reference"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=cozystack
// +kubebuilder:printcolumn:name="Default class",type=string,JSONPath=`.spec.defaultClass`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="the platform configuration is a singleton named default"

// WorkerPlatform is the platform configuration singleton, named default.
// Only one exists, so exactly one default class exists at a time.
type WorkerPlatform struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec WorkerPlatformSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// WorkerPlatformList is a list of WorkerPlatforms.
type WorkerPlatformList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkerPlatform `json:"items"`
}
