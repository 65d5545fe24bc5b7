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

// Package admission holds the validating and defaulting webhooks of the
// KubeVirt provider's kinds. The CRD schemas check shapes; these check what
// a schema cannot: image references pinned by digest, URLs, PEM bundles,
// resource names, network combinations and immutability.
package admission

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	wcvalidation "github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/migration"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// ValidateMachineSpec checks a KubeVirtMachine spec at path.
func ValidateMachineSpec(spec *infrav1.KubeVirtMachineSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.Image != nil {
		errs = append(errs, ValidateImageSource(spec.Image, path.Child("image"))...)
		if spec.Image.HTTPImport != nil && (spec.RootDisk == nil || spec.RootDisk.Size == nil) {
			errs = append(errs, field.Required(path.Child("rootDisk", "size"), "an HTTP import needs the size of the volume it imports into"))
		}
		// A class-resolved image is checked when the template resolves.
		errs = append(errs, migration.Validate(spec, *spec.Image, path)...)
	}
	switch {
	case spec.Instancetype != nil && (spec.CPU != nil || spec.Memory != nil):
		errs = append(errs, field.Forbidden(path.Child("instancetype"), "set instancetype, or cpu and memory, not both"))
	case spec.Instancetype == nil && (spec.CPU == nil || spec.Memory == nil):
		errs = append(errs, field.Required(path.Child("cpu"), "set cpu and memory, or an instancetype"))
	}
	if spec.Memory != nil && spec.Memory.Sign() <= 0 {
		errs = append(errs, field.Invalid(path.Child("memory"), spec.Memory.String(), "must be positive"))
	}
	if spec.RootDisk != nil && spec.RootDisk.Size != nil && spec.RootDisk.Size.Sign() <= 0 {
		errs = append(errs, field.Invalid(path.Child("rootDisk", "size"), spec.RootDisk.Size.String(), "must be positive"))
	}
	if spec.RootDisk != nil && spec.RootDisk.StorageClassName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.RootDisk.StorageClassName) {
			errs = append(errs, field.Invalid(path.Child("rootDisk", "storageClassName"), spec.RootDisk.StorageClassName, msg))
		}
	}
	errs = append(errs, validateNetworks(spec.Networks, path.Child("networks"))...)
	errs = append(errs, vmspec.ValidateMetadataAndSpread(spec, path)...)
	for i, g := range spec.GPUs {
		p := path.Child("gpus").Index(i)
		errs = append(errs, validateResourceName(g.DeviceName, p.Child("deviceName"))...)
		if g.NodeResourceName != "" {
			errs = append(errs, validateResourceName(g.NodeResourceName, p.Child("nodeResourceName"))...)
		}
	}
	for i, d := range spec.HostDevices {
		errs = append(errs, validateResourceName(d.DeviceName, path.Child("hostDevices").Index(i).Child("deviceName"))...)
	}
	return append(errs, validateWorkerClass(spec, path)...)
}

// SSHKeysElsewhere says where a guest's SSH key is set instead of
// workerClass.sshKeys, which nothing renders. The message never carries
// the value: it may be a private key.
const SSHKeysElsewhere = "nothing renders SSH keys from here, so none are accepted (an empty list is): " +
	"a Kairos guest's key is the bootstrap config's, KairosConfig(Template) spec.sshKeys, validated there; Talos has no SSH server"

// validateWorkerClass checks what a class selection requires of the rest
// of the machine spec.
func validateWorkerClass(spec *infrav1.KubeVirtMachineSpec, path *field.Path) field.ErrorList {
	selection := spec.WorkerClass
	if selection == nil {
		return nil
	}
	var errs field.ErrorList
	if spec.Image != nil {
		errs = append(errs, field.Forbidden(path.Child("image"), "a spec that selects a workerClass takes its image from the class"))
	}
	if len(selection.SSHKeys) > 0 {
		errs = append(errs, field.Forbidden(path.Child("workerClass", "sshKeys"), SSHKeysElsewhere))
	}
	// The pool's GPUs drive class resolution (the NVIDIA module rule); the
	// machines get the VM's GPUs and those of its instancetype. Without an
	// instancetype the two lists name the same devices; with one, the VM
	// lists only what the instancetype does not attach (KubeVirt refuses a
	// GPU listed twice), which the template controller checks against the
	// instancetype when it resolves the template.
	poolPath := path.Child("workerClass", "gpus")
	poolGPUs := make([]string, 0, len(selection.GPUs))
	for _, g := range selection.GPUs {
		poolGPUs = append(poolGPUs, g.Name)
	}
	vmGPUs := make([]string, 0, len(spec.GPUs))
	for _, g := range spec.GPUs {
		vmGPUs = append(vmGPUs, g.DeviceName)
	}
	slices.Sort(poolGPUs)
	slices.Sort(vmGPUs)
	switch {
	case spec.Instancetype == nil && !slices.Equal(poolGPUs, vmGPUs):
		errs = append(errs, field.Invalid(poolPath, poolGPUs,
			fmt.Sprintf("must list the same devices as %s %v", path.Child("gpus").String()+"[].deviceName", vmGPUs)))
	case spec.Instancetype != nil:
		for i, g := range spec.GPUs {
			if !slices.Contains(poolGPUs, g.DeviceName) {
				errs = append(errs, field.Invalid(path.Child("gpus").Index(i).Child("deviceName"), g.DeviceName,
					fmt.Sprintf("must be listed in %s %v, which drive the class's GPU rules", poolPath, poolGPUs)))
			}
		}
	}
	return errs
}

// ValidateImageSource checks that exactly one source is set and that it is
// usable: a digest-pinned container disk, an http(s) URL with an optional
// PEM CA bundle, or a named clone source.
func ValidateImageSource(img *infrav1.ImageSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := 0
	if img.ContainerDisk != nil {
		set++
		errs = append(errs, ValidateDigestReference(img.ContainerDisk.Reference, path.Child("containerDisk", "reference"))...)
	}
	if img.HTTPImport != nil {
		set++
		p := path.Child("httpImport")
		// The rules of a class's image URL: no credentials (never echoed),
		// query or fragment, which CDI's importer would carry in its Pod.
		errs = append(errs, wcvalidation.ValidateURL(img.HTTPImport.URL, p.Child("url"))...)
		if img.HTTPImport.CABundle != "" {
			errs = append(errs, wcvalidation.ValidateCABundle(img.HTTPImport.CABundle, p.Child("caBundle"))...)
		}
	}
	if img.Clone != nil {
		set++
		p := path.Child("clone")
		if img.Clone.Namespace != "" {
			for _, msg := range validation.IsDNS1123Label(img.Clone.Namespace) {
				errs = append(errs, field.Invalid(p.Child("namespace"), img.Clone.Namespace, msg))
			}
		}
		for _, msg := range validation.IsDNS1123Subdomain(img.Clone.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), img.Clone.Name, msg))
		}
		if !slices.Contains([]infrav1.CloneSourceKind{infrav1.CloneFromDataSource, infrav1.CloneFromPersistentVolumeClaim}, img.Clone.Kind) {
			errs = append(errs, field.NotSupported(p.Child("kind"), img.Clone.Kind,
				[]infrav1.CloneSourceKind{infrav1.CloneFromDataSource, infrav1.CloneFromPersistentVolumeClaim}))
		}
	}
	if set != 1 {
		errs = append(errs, field.Invalid(path, fmt.Sprintf("%d sources", set), "exactly one of containerDisk, httpImport or clone must be set"))
	}
	return errs
}

// ValidateDigestReference checks that ref is an image reference pinned by
// digest, so every machine boots the same bytes.
func ValidateDigestReference(ref string, path *field.Path) field.ErrorList {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return field.ErrorList{field.Invalid(path, ref, fmt.Sprintf("not an image reference: %v", err))}
	}
	if _, ok := named.(reference.Canonical); !ok {
		return field.ErrorList{field.Invalid(path, ref, "must be pinned by digest (name@sha256:<hex>) so every machine boots the same bytes")}
	}
	return nil
}

func validateResourceName(name string, path *field.Path) field.ErrorList {
	msgs := validation.IsQualifiedName(name)
	if len(msgs) == 0 {
		return nil
	}
	errs := make(field.ErrorList, 0, len(msgs))
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func validateNetworks(networks []infrav1.Network, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	pods, defaults := 0, 0
	for i, n := range networks {
		p := path.Index(i)
		if names[n.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), n.Name))
		}
		names[n.Name] = true
		if (n.Pod == nil) == (n.Multus == nil) {
			errs = append(errs, field.Invalid(p, n.Name, "exactly one of pod or multus must be set"))
			continue
		}
		if n.Pod != nil {
			pods++
			continue
		}
		if n.Binding == infrav1.MasqueradeBinding {
			errs = append(errs, field.Invalid(p.Child("binding"), n.Binding, "Masquerade binding is only possible on the pod network"))
		}
		if n.Multus.Default {
			defaults++
		}
		for _, msg := range validateNetworkName(n.Multus.NetworkName) {
			errs = append(errs, field.Invalid(p.Child("multus", "networkName"), n.Multus.NetworkName, msg))
		}
	}
	if pods > 1 {
		errs = append(errs, field.Invalid(path, pods, "at most one interface can use the pod network"))
	}
	if defaults > 1 {
		errs = append(errs, field.Invalid(path, defaults, "at most one Multus network can be the default"))
	}
	if pods > 0 && defaults > 0 {
		errs = append(errs, field.Invalid(path, "pod and default Multus", "a default Multus network replaces the pod network; use one of them"))
	}
	return errs
}

// validateNetworkName checks <name> or <namespace>/<name> of a
// NetworkAttachmentDefinition.
func validateNetworkName(name string) []string {
	namespace, object, found := strings.Cut(name, "/")
	if !found {
		return validation.IsDNS1123Subdomain(name)
	}
	return append(validation.IsDNS1123Label(namespace), validation.IsDNS1123Subdomain(object)...)
}
