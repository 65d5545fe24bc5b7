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

package kubevirtmachinetemplate

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// Versions of the hash inputs; bump one when its input changes meaning.
const (
	classlessHashVersion  = "infrastructure.cozystack.io/classless/v1"
	datasourceHashVersion = "infrastructure.cozystack.io/datasource-override/v1"
)

// Classless is the resolution of a template without a class: its explicit
// image and datasource, hashed.
func Classless(spec *infrav1.KubeVirtMachineSpec) *infrav1.ResolvedMachine {
	datasource := spec.CloudInitDatasource
	if datasource == "" {
		datasource = infrav1.NoCloudDatasource
	}
	image := *spec.Image.DeepCopy()
	return &infrav1.ResolvedMachine{
		Image:               image,
		CloudInitDatasource: datasource,
		ContentHash:         hashStrings(append([]string{classlessHashVersion, string(datasource)}, imageParts(image)...)...),
	}
}

// FromResult freezes a class resolution. A datasource the template sets
// overrides the class's and enters the hash, because it changes how the
// machines boot.
func FromResult(className string, res *resolve.Result, datasource infrav1.CloudInitDatasource) (*infrav1.ResolvedMachine, field.ErrorList) {
	out := &infrav1.ResolvedMachine{
		WorkerClassName:        className,
		Bootstrap:              res.Bootstrap,
		KubernetesVersion:      res.KubernetesVersion,
		KubernetesVersionMatch: res.KubernetesVersionMatch,
		CloudInitDatasource:    infrav1.CloudInitDatasource(res.CloudInitDatasource),
		ContentHash:            res.Hash,
	}
	if res.Talos != nil {
		out.TalosVersion = res.Talos.Version
		out.SchematicID = res.Talos.SchematicID
	}
	switch img := res.Image; {
	case img.ContainerDisk != nil:
		out.Image.ContainerDisk = &infrav1.ContainerDiskSource{Reference: img.ContainerDisk.Reference}
	case img.HTTPImport != nil:
		out.Image.HTTPImport = &infrav1.HTTPImportSource{URL: img.HTTPImport.URL, CABundle: img.HTTPImport.CABundle}
	case img.Clone != nil:
		kind := infrav1.CloneFromDataSource
		if img.Clone.Kind == workerclassv1.GoldenPersistentVolumeClaim {
			kind = infrav1.CloneFromPersistentVolumeClaim
		}
		out.Image.Clone = &infrav1.CloneSource{Kind: kind, Namespace: img.Clone.Namespace, Name: img.Clone.Name}
	default:
		return nil, field.ErrorList{field.Invalid(field.NewPath("spec", "template", "spec", "workerClass", "name"), className,
			"the class resolves to no KubeVirt disk source")}
	}
	if datasource != "" && datasource != out.CloudInitDatasource {
		out.CloudInitDatasource = datasource
		out.ContentHash = hashStrings(datasourceHashVersion, res.Hash, string(datasource))
	}
	return out, nil
}

// imageParts lists an image source's fields in a fixed order for hashing.
func imageParts(img infrav1.ImageSource) []string {
	switch {
	case img.ContainerDisk != nil:
		return []string{"containerDisk", img.ContainerDisk.Reference}
	case img.HTTPImport != nil:
		return []string{"httpImport", img.HTTPImport.URL, img.HTTPImport.CABundle}
	case img.Clone != nil:
		return []string{"clone", string(img.Clone.Kind), img.Clone.Namespace, img.Clone.Name}
	}
	return nil
}

// hashStrings is the hex SHA-256 of the parts, each terminated by a NUL so
// that no two lists of parts hash alike.
func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
