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
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// ValidatePlatform checks the platform configuration singleton.
func ValidatePlatform(p *workerclassv1.WorkerPlatform) field.ErrorList {
	var errs field.ErrorList
	if p.Name != workerclassv1.PlatformName {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), p.Name, "the platform configuration is a singleton named "+workerclassv1.PlatformName))
	}
	return append(errs, ValidatePlatformSpec(&p.Spec, field.NewPath("spec"))...)
}

// ValidatePlatformSpec checks the default class, the version map, the
// Talos factory defaults, the golden catalog and the Kairos images.
func ValidatePlatformSpec(spec *workerclassv1.WorkerPlatformSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.DefaultClass == "" {
		errs = append(errs, field.Required(path.Child("defaultClass"), "name the class new pools receive"))
	} else if msgs := utilvalidation.IsDNS1123Subdomain(spec.DefaultClass); len(msgs) > 0 {
		errs = append(errs, field.Invalid(path.Child("defaultClass"), spec.DefaultClass, "must be a WorkerClass name"))
	}

	minors := make(map[string]struct{}, len(spec.KubernetesVersions))
	for i, kv := range spec.KubernetesVersions {
		p := path.Child("kubernetesVersions").Index(i)
		if _, _, ok := ParseMinor(kv.Minor); !ok {
			errs = append(errs, field.Invalid(p.Child("minor"), kv.Minor, "must be a Kubernetes minor such as v1.35"))
		} else if _, dup := minors[kv.Minor]; dup {
			errs = append(errs, field.Duplicate(p.Child("minor"), kv.Minor))
		}
		minors[kv.Minor] = struct{}{}
		if _, _, ok := ParseSemver(kv.Patch); !ok {
			errs = append(errs, field.Invalid(p.Child("patch"), kv.Patch, "must be an exact Kubernetes release such as v1.35.6"))
		} else if !SameMinor(kv.Patch, kv.Minor) {
			errs = append(errs, field.Invalid(p.Child("patch"), kv.Patch, "the patch must belong to minor "+kv.Minor))
		}
	}

	f := spec.TalosFactory
	fp := path.Child("talosFactory")
	if f.URL != "" {
		errs = append(errs, ValidateURL(f.URL, fp.Child("url"))...)
	}
	if f.Version != "" {
		errs = append(errs, ValidateTalosVersion(f.Version, fp.Child("version"))...)
	}
	if f.SchematicID != "" {
		errs = append(errs, ValidateSchematicID(f.SchematicID, fp.Child("schematicID"))...)
	}
	if f.InstallerRepository != "" {
		errs = append(errs, ValidateRepository(f.InstallerRepository, fp.Child("installerRepository"))...)
	}
	if f.ImagePlatform != "" {
		if msgs := utilvalidation.IsDNS1123Label(f.ImagePlatform); len(msgs) > 0 {
			errs = append(errs, field.Invalid(fp.Child("imagePlatform"), f.ImagePlatform, "must be a Talos platform name such as nocloud"))
		}
	}
	switch f.Architecture {
	case "", "amd64", "arm64":
	default:
		errs = append(errs, field.NotSupported(fp.Child("architecture"), f.Architecture, []string{"amd64", "arm64"}))
	}

	type goldenKey struct{ version, schematic string }
	goldens := make(map[goldenKey]struct{}, len(spec.GoldenImages))
	for i, g := range spec.GoldenImages {
		p := path.Child("goldenImages").Index(i)
		errs = append(errs, ValidateTalosVersion(g.Version, p.Child("version"))...)
		errs = append(errs, ValidateSchematicID(g.SchematicID, p.Child("schematicID"))...)
		key := goldenKey{g.Version, g.SchematicID}
		if _, dup := goldens[key]; dup {
			errs = append(errs, field.Duplicate(p, g.Version+"/"+g.SchematicID))
		}
		goldens[key] = struct{}{}
		sp := p.Child("source")
		switch g.Source.Kind {
		case workerclassv1.GoldenDataSource, workerclassv1.GoldenPersistentVolumeClaim:
		default:
			errs = append(errs, field.NotSupported(sp.Child("kind"), g.Source.Kind,
				[]workerclassv1.GoldenImageSourceKind{workerclassv1.GoldenDataSource, workerclassv1.GoldenPersistentVolumeClaim}))
		}
		if msgs := utilvalidation.IsDNS1123Label(g.Source.Namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(sp.Child("namespace"), g.Source.Namespace, "must be a namespace name"))
		}
		if msgs := utilvalidation.IsDNS1123Subdomain(g.Source.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(sp.Child("name"), g.Source.Name, "must be an object name"))
		}
	}

	kairos := make(map[string]struct{}, len(spec.KairosImages))
	for i, k := range spec.KairosImages {
		p := path.Child("kairosImages").Index(i)
		if _, _, ok := ParseMinor(k.Minor); !ok {
			errs = append(errs, field.Invalid(p.Child("minor"), k.Minor, "must be a Kubernetes minor such as v1.35"))
		} else if _, dup := kairos[k.Minor]; dup {
			errs = append(errs, field.Duplicate(p.Child("minor"), k.Minor))
		}
		kairos[k.Minor] = struct{}{}
		errs = append(errs, ValidateDigestReference(k.Reference, p.Child("reference"))...)
	}
	return errs
}
