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
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// ValidateTalosVersion checks a Talos release such as v1.13.6.
func ValidateTalosVersion(v string, path *field.Path) field.ErrorList {
	if _, _, ok := ParseSemver(v); !ok {
		return field.ErrorList{field.Invalid(path, v, "must be a Talos release such as v1.13.6")}
	}
	return nil
}

// ValidateSchematicID checks a Talos image factory schematic ID.
func ValidateSchematicID(s string, path *field.Path) field.ErrorList {
	if !IsSchematicID(s) {
		return field.ErrorList{field.Invalid(path, s, "must be a schematic ID: 64 lowercase hexadecimal characters")}
	}
	return nil
}

// ValidateTalosScalars checks the syntax of nonempty Talos scalars. Empty
// values are allowed here: whether an empty value can resolve is decided
// by resolution.
func ValidateTalosScalars(t *workerclassv1.TalosScalars, path *field.Path) field.ErrorList {
	if t == nil {
		return nil
	}
	var errs field.ErrorList
	if v := deref(t.Version); v != "" {
		errs = append(errs, ValidateTalosVersion(v, path.Child("version"))...)
	}
	if v := deref(t.SchematicID); v != "" {
		errs = append(errs, ValidateSchematicID(v, path.Child("schematicID"))...)
	}
	if v := deref(t.ImageFactoryURL); v != "" {
		errs = append(errs, ValidateURL(v, path.Child("imageFactoryURL"))...)
	}
	if v := deref(t.ImageFactoryCA); v != "" {
		errs = append(errs, ValidateCABundle(v, path.Child("imageFactoryCA"))...)
	}
	if v := deref(t.InstallerRepository); v != "" {
		errs = append(errs, ValidateRepository(v, path.Child("installerRepository"))...)
	}
	return errs
}

// ValidateKernelModules checks module names (unique) and parameters.
func ValidateKernelModules(modules []workerclassv1.KernelModule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]struct{}, len(modules))
	for i, m := range modules {
		p := path.Index(i)
		if !isModuleName(m.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), m.Name, "must be a kernel module name: letters, digits, '_' and '-'"))
		} else if _, dup := seen[m.Name]; dup {
			errs = append(errs, field.Duplicate(p.Child("name"), m.Name))
		}
		seen[m.Name] = struct{}{}
		for j, param := range m.Parameters {
			key, _, _ := strings.Cut(param, "=")
			if key == "" || strings.ContainsAny(param, " \t\r\n") {
				errs = append(errs, field.Invalid(p.Child("parameters").Index(j), param, "must be key=value without whitespace"))
			}
		}
	}
	return errs
}

func isModuleName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidateRegistryMirrors checks mirror keys and endpoints.
func ValidateRegistryMirrors(mirrors map[string]workerclassv1.RegistryMirror, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for host, mirror := range mirrors {
		p := path.Key(host)
		errs = append(errs, ValidateRegistryHost(host, p)...)
		if len(mirror.Endpoints) == 0 {
			errs = append(errs, field.Required(p.Child("endpoints"), "a mirror needs at least one endpoint"))
		}
		for i, ep := range mirror.Endpoints {
			errs = append(errs, ValidateURL(ep, p.Child("endpoints").Index(i))...)
		}
	}
	return errs
}

// ValidateOSImage checks a KubeVirt disk source: builtin or factory, never
// both, with well-formed values.
func ValidateOSImage(src *workerclassv1.OSImageSource, path *field.Path) field.ErrorList {
	if src == nil {
		return nil
	}
	var errs field.ErrorList
	if src.Builtin != nil && src.Factory != nil {
		errs = append(errs, field.Forbidden(path, "builtin and factory cannot both be set"))
	}
	if b := src.Builtin; b != nil {
		p := path.Child("builtin")
		if b.Version != "" {
			errs = append(errs, ValidateTalosVersion(b.Version, p.Child("version"))...)
		}
		if b.SchematicID != "" {
			errs = append(errs, ValidateSchematicID(b.SchematicID, p.Child("schematicID"))...)
		}
	}
	if f := src.Factory; f != nil {
		p := path.Child("factory")
		if f.Version != "" {
			errs = append(errs, ValidateTalosVersion(f.Version, p.Child("version"))...)
		}
		if f.SchematicID != "" {
			errs = append(errs, ValidateSchematicID(f.SchematicID, p.Child("schematicID"))...)
		}
		if f.Endpoint != "" {
			errs = append(errs, ValidateURL(f.Endpoint, p.Child("endpoint"))...)
		}
	}
	return errs
}

// ValidateTemplateTags checks Proxmox template tags.
func ValidateTemplateTags(tags []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, tag := range tags {
		if !isTag(tag) {
			errs = append(errs, field.Invalid(path.Index(i), tag, "must be a Proxmox tag: letters, digits, '_', '+', '.' and '-'"))
		}
	}
	return errs
}

func isTag(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("_+.-", rune(c)) {
			return false
		}
	}
	return true
}

// ValidatePoolSettings checks the syntax of a pool's class-relevant
// fields. SSH keys depend on the bootstrap family; see ValidateSSHKeys.
func ValidatePoolSettings(p *workerclassv1.PoolSettings, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p.Version != "" {
		if _, _, ok := ParseMinor(p.Version); !ok {
			msg := "must be a Kubernetes minor such as v1.35"
			if _, _, isPatch := ParseSemver(p.Version); isPatch {
				msg = "a pool selects a Kubernetes minor such as v1.35; the platform or the class's fixed image supplies the patch"
			}
			errs = append(errs, field.Invalid(path.Child("version"), p.Version, msg))
		}
	}
	errs = append(errs, ValidateTalosScalars(p.Talos, path.Child("talos"))...)
	errs = append(errs, ValidateKernelModules(p.KernelModules, path.Child("kernelModules"))...)
	errs = append(errs, ValidateRegistryMirrors(p.RegistryMirrors, path.Child("registryMirrors"))...)
	errs = append(errs, ValidateOSImage(p.OSImage, path.Child("osImage"))...)
	if p.Proxmox != nil {
		errs = append(errs, ValidateTemplateTags(p.Proxmox.TemplateTags, path.Child("proxmox", "templateTags"))...)
	}
	for i, gpu := range p.GPUs {
		if msgs := utilvalidation.IsQualifiedName(gpu.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Child("gpus").Index(i).Child("name"), gpu.Name, "must be a resource name such as nvidia.com/AD102GL_L40S: "+strings.Join(msgs, "; ")))
		}
	}
	return errs
}

// TalosScalarsEmpty reports whether no Talos scalar carries a value.
func TalosScalarsEmpty(t *workerclassv1.TalosScalars) bool {
	return t == nil || deref(t.Version) == "" && deref(t.SchematicID) == "" && deref(t.ImageFactoryURL) == "" &&
		deref(t.ImageFactoryCA) == "" && deref(t.InstallerRepository) == ""
}

// OSImageEmpty reports whether a source selects nothing beyond the default
// factory path.
func OSImageEmpty(src *workerclassv1.OSImageSource) bool {
	return src == nil || src.Builtin == nil && src.Factory == nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
