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

package main

import (
	"github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

// Where the pool's class came from.
const (
	// sourcePool: the pool names its class.
	sourcePool = "pool"
	// sourcePlatformDefault: a CREATE without a class got the platform's
	// default class.
	sourcePlatformDefault = "platformDefault"
	// sourceStored: an UPDATE without a class keeps the stored one.
	sourceStored = "stored"
	// sourceLegacy: a classless pool stays on the legacy Talos path.
	sourceLegacy = "legacy"
)

// unresolved is the printed form of an admitted request that resolved
// nothing: a classless pool's UPDATE, or an UPDATE that changes nothing
// class-relevant.
type unresolved struct {
	Pool            string `json:"pool"`
	Operation       string `json:"operation"`
	WorkerClassName string `json:"workerClassName"`
	ClassSource     string `json:"classSource"`
	Note            string `json:"note"`
}

// outputOf prints an admission decision: the effective settings, or why
// nothing was resolved.
func outputOf(pool string, op admission.Operation, d admission.Decision) any {
	source := sourcePool
	switch {
	case d.Legacy():
		source = sourceLegacy
	case d.Defaulted:
		source = sourcePlatformDefault
	case d.Restored:
		source = sourceStored
	}
	switch {
	case d.Legacy():
		return unresolved{Pool: pool, Operation: string(op), ClassSource: source,
			Note: "a classless pool stays legacy Talos; nothing is looked up"}
	case d.Result == nil:
		return unresolved{Pool: pool, Operation: string(op), WorkerClassName: d.ClassName, ClassSource: source,
			Note: "nothing class-relevant changed; not resolved again"}
	}
	e := effectiveOf(pool, d.ClassName, source, d.Result)
	e.Substrate = d.Substrate
	if op == admission.Update {
		e.Operation = string(op)
	}
	return e
}

// effective is the printed form of a resolution.
type effective struct {
	Pool                   string                               `json:"pool"`
	Operation              string                               `json:"operation,omitempty"`
	WorkerClassName        string                               `json:"workerClassName"`
	ClassSource            string                               `json:"classSource"`
	Substrate              resolve.Substrate                    `json:"substrate"`
	Bootstrap              workerclassv1.BootstrapFamily        `json:"bootstrap"`
	KubernetesVersion      string                               `json:"kubernetesVersion"`
	KubernetesVersionMatch workerclassv1.KubernetesVersionMatch `json:"kubernetesVersionMatch"`
	CloudInitDatasource    workerclassv1.CloudInitDatasource    `json:"cloudInitDatasource"`
	Image                  image                                `json:"image"`
	Talos                  *talos                               `json:"talos,omitempty"`
	ContentHash            string                               `json:"contentHash"`
}

type image struct {
	ContainerDisk   *containerDisk   `json:"containerDisk,omitempty"`
	HTTPImport      *httpImport      `json:"httpImport,omitempty"`
	Clone           *clone           `json:"clone,omitempty"`
	ProxmoxTemplate *proxmoxTemplate `json:"proxmoxTemplate,omitempty"`
}

type containerDisk struct {
	Reference string `json:"reference"`
}

type httpImport struct {
	URL      string `json:"url"`
	CABundle string `json:"caBundle,omitempty"`
}

type clone struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type proxmoxTemplate struct {
	Tags []string `json:"tags"`
}

type talos struct {
	Version         string                                  `json:"version"`
	SchematicID     string                                  `json:"schematicID"`
	ImageFactoryURL string                                  `json:"imageFactoryURL"`
	ImageFactoryCA  string                                  `json:"imageFactoryCA,omitempty"`
	InstallerImage  string                                  `json:"installerImage"`
	RegistryMirrors map[string]workerclassv1.RegistryMirror `json:"registryMirrors"`
	KernelModules   []workerclassv1.KernelModule            `json:"kernelModules"`
}

func effectiveOf(pool, class, source string, res *resolve.Result) effective {
	e := effective{
		Pool: pool, WorkerClassName: class, ClassSource: source,
		Bootstrap: res.Bootstrap, KubernetesVersion: res.KubernetesVersion, KubernetesVersionMatch: res.KubernetesVersionMatch,
		CloudInitDatasource: res.CloudInitDatasource, ContentHash: res.Hash,
	}
	switch img := res.Image; {
	case img.ContainerDisk != nil:
		e.Image.ContainerDisk = &containerDisk{Reference: img.ContainerDisk.Reference}
	case img.HTTPImport != nil:
		e.Image.HTTPImport = &httpImport{URL: img.HTTPImport.URL, CABundle: img.HTTPImport.CABundle}
	case img.Clone != nil:
		e.Image.Clone = &clone{Kind: string(img.Clone.Kind), Namespace: img.Clone.Namespace, Name: img.Clone.Name}
	case img.ProxmoxTemplate != nil:
		e.Image.ProxmoxTemplate = &proxmoxTemplate{Tags: img.ProxmoxTemplate.Tags}
	}
	if t := res.Talos; t != nil {
		e.Talos = &talos{Version: t.Version, SchematicID: t.SchematicID, ImageFactoryURL: t.ImageFactoryURL,
			ImageFactoryCA: t.ImageFactoryCA, InstallerImage: t.InstallerImage,
			RegistryMirrors: t.RegistryMirrors, KernelModules: t.KernelModules}
		if e.Talos.RegistryMirrors == nil {
			e.Talos.RegistryMirrors = map[string]workerclassv1.RegistryMirror{}
		}
		if e.Talos.KernelModules == nil {
			e.Talos.KernelModules = []workerclassv1.KernelModule{}
		}
	}
	return e
}
