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

// Package resolve computes a pool's effective worker settings from its
// class, its overrides and the platform configuration. It is pure: no I/O,
// no clock, no lookups; equal inputs give equal results and hashes.
//
// The order is fixed: resolve the class baseline, apply the pool's
// overrides, select the image source, then check the final image's
// compatibility. Errors are field errors whose paths name the pool field,
// the class (workerclasses[<name>].spec...) or the platform
// (workerplatforms[default].spec...) that caused them.
package resolve

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// Substrate is where the pool's workers run.
type Substrate string

const (
	// KubeVirt workers are KubeVirt virtual machines. The zero Substrate
	// means KubeVirt.
	KubeVirt Substrate = "KubeVirt"
	// Proxmox workers are cloned from Proxmox templates (Talos only).
	Proxmox Substrate = "Proxmox"
)

// Substrates are the substrates the engine resolves pools on.
var Substrates = []Substrate{KubeVirt, Proxmox}

// ParseSubstrate reads a substrate as the manager's and the workerclass
// command's flags spell it (KubeVirt or Proxmox).
func ParseSubstrate(s string) (Substrate, error) {
	if slices.Contains(Substrates, Substrate(s)) {
		return Substrate(s), nil
	}
	return "", fmt.Errorf("must be KubeVirt or Proxmox, not %q", s)
}

// Input is everything resolution reads.
type Input struct {
	// Class is the pool's class; required.
	Class *workerclassv1.WorkerClass
	// Pool holds the pool's Kubernetes minor and overrides.
	Pool workerclassv1.PoolSettings
	// Platform is the platform configuration; nil reads as empty.
	Platform *workerclassv1.WorkerPlatformSpec
	// Substrate defaults to KubeVirt.
	Substrate Substrate
	// Path is the path of the pool's settings in error messages; defaults
	// to "spec".
	Path *field.Path
}

// Result is a pool's effective settings. Its maps and slices may share
// memory with the Input: treat them as read-only.
type Result struct {
	// Bootstrap is the class's family; overrides never change it.
	Bootstrap workerclassv1.BootstrapFamily
	// KubernetesVersion is the exact patch, for example v1.35.6.
	KubernetesVersion string
	// KubernetesVersionMatch is Exact for a fixed image and Minor for
	// platform images.
	KubernetesVersionMatch workerclassv1.KubernetesVersionMatch
	// Talos is nil for Kairos.
	Talos *TalosSettings
	// Image holds exactly one source.
	Image Image
	// CloudInitDatasource is the class's choice, NoCloud by default.
	CloudInitDatasource workerclassv1.CloudInitDatasource
	// Hash is a stable hex SHA-256 of everything that changes the
	// machine's bytes or boot.
	Hash string
}

// TalosSettings are the effective Talos settings.
type TalosSettings struct {
	Version             string
	SchematicID         string
	ImageFactoryURL     string
	ImageFactoryCA      string
	InstallerRepository string
	// InstallerImage is the in-guest installer, <repository>:<version>.
	InstallerImage  string
	RegistryMirrors map[string]workerclassv1.RegistryMirror
	KernelModules   []workerclassv1.KernelModule
}

// Image is the resolved disk source; exactly one field is set.
type Image struct {
	ContainerDisk   *ContainerDisk
	HTTPImport      *HTTPImport
	Clone           *Clone
	ProxmoxTemplate *ProxmoxTemplate
}

// ContainerDisk is a container disk pinned by digest.
type ContainerDisk struct {
	// Reference is fully qualified, for example
	// registry.example.com/workers/kairos-worker@sha256:<hex>.
	Reference string
}

// HTTPImport is a CDI HTTP import of a Talos image factory disk.
type HTTPImport struct {
	URL string
	// CABundle is the PEM bundle CDI trusts for the import; empty for the
	// system trust.
	CABundle string
}

// CloneSourceKind is the kind of a golden disk source.
type CloneSourceKind = workerclassv1.GoldenImageSourceKind

// Clone clones a golden disk from the platform catalog.
type Clone struct {
	Kind      CloneSourceKind
	Namespace string
	Name      string
}

// ProxmoxTemplate selects an existing Proxmox template by tags.
type ProxmoxTemplate struct {
	Tags []string
}
