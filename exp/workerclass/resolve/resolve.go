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

package resolve

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

// Resolve returns the effective settings of a pool, or the field errors
// that prevent them. It never changes its input.
func Resolve(in Input) (*Result, field.ErrorList) {
	r := resolver{in: in, platform: in.Platform}
	if r.platform == nil {
		r.platform = &workerclassv1.WorkerPlatformSpec{}
	}
	if r.in.Path == nil {
		r.in.Path = field.NewPath("spec")
	}
	if in.Class == nil {
		return nil, field.ErrorList{field.Required(r.in.Path.Child("workerClassName"), "a class is required to resolve a pool")}
	}
	switch in.Substrate {
	case "", KubeVirt, Proxmox:
	default:
		return nil, field.ErrorList{field.NotSupported(r.in.Path, in.Substrate, Substrates)}
	}
	r.class = &in.Class.Spec

	res := &Result{Bootstrap: r.class.Bootstrap}
	switch r.class.Bootstrap {
	case workerclassv1.BootstrapTalos:
		r.resolveTalos(res)
	case workerclassv1.BootstrapKairos:
		r.resolveKairos(res)
	default:
		r.errs = append(r.errs, field.NotSupported(r.classPath().Child("bootstrap"), r.class.Bootstrap,
			[]workerclassv1.BootstrapFamily{workerclassv1.BootstrapTalos, workerclassv1.BootstrapKairos}))
	}
	switch ds := r.class.CloudInitDatasource; ds {
	case "":
		res.CloudInitDatasource = workerclassv1.CloudInitNoCloud
	case workerclassv1.CloudInitNoCloud, workerclassv1.CloudInitConfigDrive:
		res.CloudInitDatasource = ds
	default:
		r.errs = append(r.errs, field.NotSupported(r.classPath().Child("cloudInitDatasource"), ds,
			[]workerclassv1.CloudInitDatasource{workerclassv1.CloudInitNoCloud, workerclassv1.CloudInitConfigDrive}))
	}
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	res.Hash = contentHash(res)
	return res, nil
}

type resolver struct {
	in       Input
	class    *workerclassv1.WorkerClassSpec
	platform *workerclassv1.WorkerPlatformSpec
	errs     field.ErrorList
	// diskNeedsFactoryURL is set when the factory path found no endpoint.
	diskNeedsFactoryURL bool
}

// Paths are built only when an error needs them.
func (r *resolver) poolPath(names ...string) *field.Path {
	return r.in.Path.Child(names[0], names[1:]...)
}

func (r *resolver) classPath() *field.Path {
	return field.NewPath("workerclasses").Key(r.in.Class.Name).Child("spec")
}

func (r *resolver) platformPath() *field.Path {
	return field.NewPath("workerplatforms").Key(workerclassv1.PlatformName).Child("spec")
}

func (r *resolver) fail(err *field.Error) { r.errs = append(r.errs, err) }

// kubernetesVersion applies "Versions and replacement": the pool picks a
// minor; a fixed image supplies its exact patch and must match that minor;
// otherwise the platform map picks the patch.
func (r *resolver) kubernetesVersion(res *Result, fixed *workerclassv1.FixedImage) {
	minor := r.in.Pool.Version
	if minor == "" {
		r.fail(field.Required(r.poolPath("version"), "select a supported Kubernetes minor such as v1.35"))
		return
	}
	poolMajor, poolMinor, ok := validation.ParseMinor(minor)
	if !ok {
		msg := "must be a Kubernetes minor such as v1.35"
		if _, _, isPatch := validation.ParseSemver(minor); isPatch {
			msg = "a pool selects a Kubernetes minor such as v1.35; the platform or the class's fixed image supplies the patch"
		}
		r.fail(field.Invalid(r.poolPath("version"), minor, msg))
		return
	}
	if fixed != nil {
		major, imageMinor, ok := validation.ParseSemver(fixed.KubernetesVersion)
		if !ok {
			r.fail(field.Invalid(r.classPath().Child("image", "kubernetesVersion"), fixed.KubernetesVersion,
				"must be the exact Kubernetes release packaged in the disk, such as v1.35.6"))
			return
		}
		if major != poolMajor || imageMinor != poolMinor {
			r.fail(field.Invalid(r.poolPath("version"), minor, fmt.Sprintf(
				"class %s's fixed image packages Kubernetes %s; the pool must select minor v%d.%d",
				r.in.Class.Name, fixed.KubernetesVersion, major, imageMinor)))
			return
		}
		res.KubernetesVersion = fixed.KubernetesVersion
		res.KubernetesVersionMatch = workerclassv1.KubernetesVersionMatchExact
		return
	}
	for i := range r.platform.KubernetesVersions {
		kv := &r.platform.KubernetesVersions[i]
		if kv.Minor != minor {
			continue
		}
		if !validation.SameMinor(kv.Patch, kv.Minor) {
			r.fail(field.Invalid(r.platformPath().Child("kubernetesVersions").Index(i).Child("patch"), kv.Patch,
				"the platform patch must be an exact release of minor "+kv.Minor))
			return
		}
		res.KubernetesVersion = kv.Patch
		res.KubernetesVersionMatch = workerclassv1.KubernetesVersionMatchMinor
		return
	}
	supported := make([]string, 0, len(r.platform.KubernetesVersions))
	for _, kv := range r.platform.KubernetesVersions {
		supported = append(supported, kv.Minor)
	}
	r.fail(field.NotSupported(r.poolPath("version"), minor, supported))
}

// resolveKairos rejects Talos settings instead of reinterpreting them and
// picks the fixed image or the platform image for the pool's minor.
func (r *resolver) resolveKairos(res *Result) {
	pool := &r.in.Pool
	const notKairos = "Talos settings are not Kairos configuration; a Kairos class rejects them"
	if t := r.class.Talos; t != nil && (!validation.TalosScalarsEmpty(&t.TalosScalars) || len(t.RegistryMirrors) > 0 || len(t.KernelModules) > 0) {
		r.fail(field.Forbidden(r.classPath().Child("talos"), notKairos))
	}
	if r.class.KubeVirt != nil && !validation.OSImageEmpty(r.class.KubeVirt.OSImage) {
		r.fail(field.Forbidden(r.classPath().Child("kubevirt", "osImage"), "builtin and factory sources are Talos disks; a Kairos class uses image or the platform Kairos images"))
	}
	if !validation.TalosScalarsEmpty(pool.Talos) {
		r.fail(field.Forbidden(r.poolPath("talos"), notKairos))
	}
	if len(pool.KernelModules) > 0 {
		r.fail(field.Forbidden(r.poolPath("kernelModules"), notKairos))
	}
	if len(pool.RegistryMirrors) > 0 {
		r.fail(field.Forbidden(r.poolPath("registryMirrors"), notKairos))
	}
	if !validation.OSImageEmpty(pool.OSImage) {
		r.fail(field.Forbidden(r.poolPath("osImage"), notKairos))
	}
	if pool.Proxmox != nil && len(pool.Proxmox.TemplateTags) > 0 {
		r.fail(field.Forbidden(r.poolPath("proxmox", "templateTags"), "Kairos supports KubeVirt only"))
	}
	if r.in.Substrate == Proxmox {
		r.fail(field.Forbidden(r.classPath().Child("bootstrap"), "Kairos supports KubeVirt only, not Proxmox"))
		return
	}

	fixed := r.class.Image
	r.kubernetesVersion(res, fixed)
	if fixed != nil {
		ref, ok := validation.CanonicalReference(fixed.Reference)
		if !ok {
			r.fail(field.Invalid(r.classPath().Child("image", "reference"), fixed.Reference, "the reference must be pinned by digest (name@sha256:<hex>)"))
			return
		}
		res.Image.ContainerDisk = &ContainerDisk{Reference: ref}
		return
	}
	if res.KubernetesVersion == "" {
		return
	}
	for i := range r.platform.KairosImages {
		img := &r.platform.KairosImages[i]
		if img.Minor != r.in.Pool.Version {
			continue
		}
		ref, ok := validation.CanonicalReference(img.Reference)
		if !ok {
			r.fail(field.Invalid(r.platformPath().Child("kairosImages").Index(i).Child("reference"), img.Reference, "the reference must be pinned by digest (name@sha256:<hex>)"))
			return
		}
		res.Image.ContainerDisk = &ContainerDisk{Reference: ref}
		return
	}
	r.fail(field.Invalid(r.poolPath("version"), r.in.Pool.Version,
		"the platform has no Kairos image for this minor; choose another minor or a class with a fixed image"))
}

// origin records which layer supplied an effective Talos scalar.
type origin uint8

const (
	fromNone origin = iota
	fromPlatform
	fromClass
	fromPool
)

type scalar struct {
	value string
	from  origin
	// explicit is true when a pool or class supplied the field, even
	// empty: such a value is kept and never replaced by a lower layer.
	explicit bool
}

// pick applies "an explicitly supplied pool value replaces the baseline".
func pick(pool, class *string, platform string) scalar {
	switch {
	case pool != nil:
		return scalar{value: *pool, from: fromPool, explicit: true}
	case class != nil:
		return scalar{value: *class, from: fromClass, explicit: true}
	case platform != "":
		return scalar{value: platform, from: fromPlatform}
	}
	return scalar{}
}

// scalarPath names where a scalar came from, for messages.
func (r *resolver) scalarPath(s scalar, name, platformName string) *field.Path {
	switch s.from {
	case fromClass:
		return r.classPath().Child("talos", name)
	case fromPlatform:
		return r.platformPath().Child("talosFactory", platformName)
	}
	return r.poolPath("talos", name)
}

type talosScalars struct {
	version, schematicID, factoryURL, factoryCA, installerRepository scalar
}

func (r *resolver) effectiveScalars() talosScalars {
	var pool, class workerclassv1.TalosScalars
	if r.in.Pool.Talos != nil {
		pool = *r.in.Pool.Talos
	}
	if r.class.Talos != nil {
		class = r.class.Talos.TalosScalars
	}
	f := &r.platform.TalosFactory
	factoryURL := f.URL
	if factoryURL == "" {
		factoryURL = workerclassv1.DefaultTalosFactoryURL
	}
	return talosScalars{
		version:             pick(pool.Version, class.Version, f.Version),
		schematicID:         pick(pool.SchematicID, class.SchematicID, f.SchematicID),
		factoryURL:          pick(pool.ImageFactoryURL, class.ImageFactoryURL, factoryURL),
		factoryCA:           pick(pool.ImageFactoryCA, class.ImageFactoryCA, ""),
		installerRepository: pick(pool.InstallerRepository, class.InstallerRepository, f.InstallerRepository),
	}
}

// agree merges the value a selected artifact declares into an effective
// scalar. A nonempty declaration takes precedence over a platform default
// or a missing value; one that conflicts with an explicitly supplied value
// is rejected, whatever source was selected. An explicitly empty value is
// kept (and later reported by require).
func (r *resolver) agree(eff *scalar, declared string, declaredPath func() *field.Path, what string) {
	switch {
	case declared == "" || declared == eff.value:
	case !eff.explicit:
		eff.value = declared
	case eff.value != "":
		r.fail(field.Invalid(declaredPath(), declared, fmt.Sprintf(
			"conflicts with the effective Talos %s %q; the disk and the installer must agree", what, eff.value)))
	}
}

// require reports an effective scalar that is empty.
func (r *resolver) require(s scalar, name, platformName, what string) bool {
	if s.value != "" {
		return true
	}
	if s.explicit {
		r.fail(field.Invalid(r.scalarPath(s, name, platformName), "",
			"an explicitly empty "+what+" is kept, not replaced by the baseline, but a Talos worker needs one"))
		return false
	}
	r.fail(field.Required(r.poolPath("talos", name), "no pool, class or platform setting supplies a Talos "+what))
	return false
}

// resolveTalos applies the table "Talos overrides and image selection".
func (r *resolver) resolveTalos(res *Result) {
	pool := &r.in.Pool
	if r.class.Image != nil {
		r.fail(field.Forbidden(r.classPath().Child("image"), "a fixed image is a Kairos artifact; a Talos class selects a builtin or factory source"))
	}
	r.kubernetesVersion(res, nil)

	eff := r.effectiveScalars()
	talos := &TalosSettings{}
	// registryMirrors: a supplied map replaces the baseline, {} clears it.
	switch {
	case pool.RegistryMirrors != nil:
		talos.RegistryMirrors = pool.RegistryMirrors
	case r.class.Talos != nil:
		talos.RegistryMirrors = r.class.Talos.RegistryMirrors
	}
	// kernelModules: a supplied list replaces the baseline, [] disables
	// loading; the NVIDIA rule runs only when neither supplies a list.
	switch {
	case pool.KernelModules != nil:
		talos.KernelModules = pool.KernelModules
	case r.class.Talos != nil && r.class.Talos.KernelModules != nil:
		talos.KernelModules = r.class.Talos.KernelModules
	case RequestsNVIDIAGPU(pool.GPUs):
		talos.KernelModules = NVIDIAKernelModules()
	}

	if r.in.Substrate == Proxmox {
		r.proxmoxTemplate(res, &eff)
	} else {
		r.kubevirtSource(res, &eff)
	}

	okVersion := r.require(eff.version, "version", "version", "version")
	okSchematic := r.require(eff.schematicID, "schematicID", "schematicID", "schematic")
	repo := eff.installerRepository.value
	// The factory serves the installer when no repository is set, and the
	// disk on the factory path without an endpoint of its own.
	if (repo == "" || r.diskNeedsFactoryURL) && !r.require(eff.factoryURL, "imageFactoryURL", "url", "image factory URL") {
		return
	}
	if !okVersion || !okSchematic {
		return
	}
	if repo == "" {
		repo = factoryHost(eff.factoryURL.value) + "/installer/" + eff.schematicID.value
	}
	talos.Version = eff.version.value
	talos.SchematicID = eff.schematicID.value
	talos.ImageFactoryURL = eff.factoryURL.value
	talos.ImageFactoryCA = eff.factoryCA.value
	talos.InstallerRepository = repo
	talos.InstallerImage = repo + ":" + eff.version.value
	res.Talos = talos
}

// kubevirtSource applies the osImage rows: absent uses the class source or
// the default factory path; supplied replaces the selection as a unit.
func (r *resolver) kubevirtSource(res *Result, eff *talosScalars) {
	src := r.in.Pool.OSImage
	srcPath := func() *field.Path { return r.poolPath("osImage") }
	if src == nil && r.class.KubeVirt != nil && r.class.KubeVirt.OSImage != nil {
		src = r.class.KubeVirt.OSImage
		srcPath = func() *field.Path { return r.classPath().Child("kubevirt", "osImage") }
	}
	if src == nil {
		src = &workerclassv1.OSImageSource{}
	}
	if src.Builtin != nil && src.Factory != nil {
		r.fail(field.Forbidden(srcPath(), "builtin and factory cannot both be set"))
		return
	}
	if b := src.Builtin; b != nil {
		r.agree(&eff.version, b.Version, func() *field.Path { return srcPath().Child("builtin", "version") }, "version")
		r.agree(&eff.schematicID, b.SchematicID, func() *field.Path { return srcPath().Child("builtin", "schematicID") }, "schematic")
		if eff.version.value == "" || eff.schematicID.value == "" {
			return
		}
		for i := range r.platform.GoldenImages {
			g := &r.platform.GoldenImages[i]
			if g.Version == eff.version.value && g.SchematicID == eff.schematicID.value {
				res.Image.Clone = &Clone{Kind: g.Source.Kind, Namespace: g.Source.Namespace, Name: g.Source.Name}
				return
			}
		}
		r.fail(field.Invalid(srcPath().Child("builtin"), eff.version.value+"/"+eff.schematicID.value,
			"the platform's golden catalog has no image for this Talos version and schematic"))
		return
	}
	endpoint := eff.factoryURL.value
	if f := src.Factory; f != nil {
		r.agree(&eff.version, f.Version, func() *field.Path { return srcPath().Child("factory", "version") }, "version")
		r.agree(&eff.schematicID, f.SchematicID, func() *field.Path { return srcPath().Child("factory", "schematicID") }, "schematic")
		if f.Endpoint != "" {
			endpoint = f.Endpoint
		}
	}
	if endpoint == "" {
		r.diskNeedsFactoryURL = true
		return
	}
	if eff.version.value == "" || eff.schematicID.value == "" {
		return
	}
	platform, arch := r.platform.TalosFactory.ImagePlatform, r.platform.TalosFactory.Architecture
	if platform == "" {
		platform = workerclassv1.DefaultTalosImagePlatform
	}
	if arch == "" {
		arch = workerclassv1.DefaultTalosArchitecture
	}
	res.Image.HTTPImport = &HTTPImport{
		URL: strings.TrimRight(endpoint, "/") + "/image/" + eff.schematicID.value + "/" + eff.version.value +
			"/" + platform + "-" + arch + ".raw.xz",
		CABundle: eff.factoryCA.value,
	}
}

// proxmoxTemplate applies the Proxmox row: pool tags replace the class's,
// the final list must not be empty, and osImage is not a Proxmox source.
func (r *resolver) proxmoxTemplate(res *Result, eff *talosScalars) {
	pool := &r.in.Pool
	if !validation.OSImageEmpty(pool.OSImage) {
		r.fail(field.Forbidden(r.poolPath("osImage"), "osImage is a KubeVirt source, not a Proxmox template; select templates by proxmox.templateTags"))
	}
	var tags []string
	tagsPath := func() *field.Path { return r.classPath().Child("proxmox", "templateTags") }
	if pool.Proxmox != nil && pool.Proxmox.TemplateTags != nil {
		tags = pool.Proxmox.TemplateTags
		tagsPath = func() *field.Path { return r.poolPath("proxmox", "templateTags") }
	} else if r.class.Proxmox != nil {
		tags = r.class.Proxmox.TemplateTags
	}
	if len(tags) == 0 {
		r.fail(field.Required(tagsPath(), "the final Proxmox template tag list is empty"))
		return
	}
	if px := r.class.Proxmox; px != nil {
		r.agree(&eff.version, px.Version, func() *field.Path { return r.classPath().Child("proxmox", "version") }, "version")
		r.agree(&eff.schematicID, px.SchematicID, func() *field.Path { return r.classPath().Child("proxmox", "schematicID") }, "schematic")
	}
	res.Image.ProxmoxTemplate = &ProxmoxTemplate{Tags: tags}
}

// factoryHost returns host[:port] of an image factory URL.
func factoryHost(u string) string {
	if _, rest, ok := strings.Cut(u, "://"); ok {
		u = rest
	}
	host, _, _ := strings.Cut(u, "/")
	return host
}
