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

package validation

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// builtinFamilies pins the built-in names to their families, so "talos"
// and "kairos" always mean what the documentation says.
var builtinFamilies = map[string]workerclassv1.BootstrapFamily{
	workerclassv1.TalosClassName:  workerclassv1.BootstrapTalos,
	workerclassv1.KairosClassName: workerclassv1.BootstrapKairos,
}

// ValidateClass checks a WorkerClass: its spec (ValidateClassSpec) and
// that the built-in names keep their family. The class webhook and the
// workerclass command both apply it.
func ValidateClass(c *workerclassv1.WorkerClass) field.ErrorList {
	errs := ValidateClassSpec(&c.Spec, field.NewPath("spec"))
	if family, builtin := builtinFamilies[c.Name]; builtin && c.Spec.Bootstrap != family {
		errs = append(errs, field.Invalid(field.NewPath("spec", "bootstrap"), c.Spec.Bootstrap,
			fmt.Sprintf("the built-in class %s must use bootstrap %s", c.Name, family)))
	}
	return errs
}

// ValidateClassSpec checks a WorkerClass spec on its own: field syntax,
// the fixed image, and that a Kairos class carries no Talos settings.
func ValidateClassSpec(spec *workerclassv1.WorkerClassSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch spec.Bootstrap {
	case workerclassv1.BootstrapTalos:
		if spec.Image != nil {
			errs = append(errs, field.Forbidden(path.Child("image"), "a fixed image is a Kairos artifact; a Talos class selects a builtin or factory source"))
		}
	case workerclassv1.BootstrapKairos:
		errs = append(errs, kairosClassForbidden(spec, path)...)
	case "":
		errs = append(errs, field.Required(path.Child("bootstrap"), "choose talos or kairos"))
	default:
		errs = append(errs, field.NotSupported(path.Child("bootstrap"), spec.Bootstrap, []workerclassv1.BootstrapFamily{workerclassv1.BootstrapTalos, workerclassv1.BootstrapKairos}))
	}
	if t := spec.Talos; t != nil {
		p := path.Child("talos")
		errs = append(errs, ValidateTalosScalars(&t.TalosScalars, p)...)
		errs = append(errs, ValidateRegistryMirrors(t.RegistryMirrors, p.Child("registryMirrors"))...)
		errs = append(errs, ValidateKernelModules(t.KernelModules, p.Child("kernelModules"))...)
	}
	if spec.KubeVirt != nil {
		errs = append(errs, ValidateOSImage(spec.KubeVirt.OSImage, path.Child("kubevirt", "osImage"))...)
	}
	if px := spec.Proxmox; px != nil {
		p := path.Child("proxmox")
		errs = append(errs, ValidateTemplateTags(px.TemplateTags, p.Child("templateTags"))...)
		if px.Version != "" {
			errs = append(errs, ValidateTalosVersion(px.Version, p.Child("version"))...)
		}
		if px.SchematicID != "" {
			errs = append(errs, ValidateSchematicID(px.SchematicID, p.Child("schematicID"))...)
		}
	}
	if img := spec.Image; img != nil {
		errs = append(errs, ValidateFixedImage(img, path.Child("image"))...)
	}
	switch spec.CloudInitDatasource {
	case "", workerclassv1.CloudInitNoCloud, workerclassv1.CloudInitConfigDrive:
	default:
		errs = append(errs, field.NotSupported(path.Child("cloudInitDatasource"), spec.CloudInitDatasource,
			[]workerclassv1.CloudInitDatasource{workerclassv1.CloudInitNoCloud, workerclassv1.CloudInitConfigDrive}))
	}
	return errs
}

// kairosClassForbidden rejects Talos settings, Talos disk sources and
// Proxmox templates on a Kairos class instead of reinterpreting them.
func kairosClassForbidden(spec *workerclassv1.WorkerClassSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t := spec.Talos; t != nil {
		if !TalosScalarsEmpty(&t.TalosScalars) || len(t.RegistryMirrors) > 0 || len(t.KernelModules) > 0 {
			errs = append(errs, field.Forbidden(path.Child("talos"), "Talos settings are not Kairos configuration; a Kairos class must leave them empty"))
		}
	}
	if spec.KubeVirt != nil && !OSImageEmpty(spec.KubeVirt.OSImage) {
		errs = append(errs, field.Forbidden(path.Child("kubevirt", "osImage"), "builtin and factory sources are Talos disks; a Kairos class uses image or the platform Kairos images"))
	}
	if px := spec.Proxmox; px != nil && (len(px.TemplateTags) > 0 || px.Version != "" || px.SchematicID != "") {
		errs = append(errs, field.Forbidden(path.Child("proxmox"), "Kairos supports KubeVirt only"))
	}
	return errs
}

// ValidateFixedImage checks that both fixed-image fields are present, the
// Kubernetes version is exact and the reference is pinned by digest.
func ValidateFixedImage(img *workerclassv1.FixedImage, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if img.KubernetesVersion == "" {
		errs = append(errs, field.Required(path.Child("kubernetesVersion"), "a fixed image needs both kubernetesVersion and reference"))
	} else if _, _, ok := ParseSemver(img.KubernetesVersion); !ok {
		errs = append(errs, field.Invalid(path.Child("kubernetesVersion"), img.KubernetesVersion, "must be the exact Kubernetes release packaged in the disk, such as v1.35.6"))
	}
	if img.Reference == "" {
		errs = append(errs, field.Required(path.Child("reference"), "a fixed image needs both kubernetesVersion and reference"))
	} else {
		errs = append(errs, ValidateDigestReference(img.Reference, path.Child("reference"))...)
	}
	return errs
}

// ValidateClassUpdate rejects any change of the spec.
func ValidateClassUpdate(oldSpec, newSpec *workerclassv1.WorkerClassSpec, path *field.Path) field.ErrorList {
	if !reflect.DeepEqual(oldSpec, newSpec) {
		return field.ErrorList{field.Forbidden(path, "the spec is immutable; publish another class for another baseline or image")}
	}
	return nil
}
