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

// Package kubevirtconfig tells whether the KubeVirt installed in the
// infrastructure cluster runs a machine spec's VM: the feature gates its
// KubeVirt CR enables and the host devices it permits. A template whose
// VMs KubeVirt would refuse is not resolved, so the cluster autoscaler
// never scales from zero into machines that cannot start.
package kubevirtconfig

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/instancetype"
)

// The KubeVirt v1.7 feature gates (pkg/virt-config/featuregate) that what
// the renderer writes can need. All three are Alpha there, so only a gate
// listed in the CR enables them (KubeVirt takes GA gates, such as GPU, as
// enabled whether listed or not).
const (
	// HostDevicesGate: virt-api refuses a VM with host devices without it.
	HostDevicesGate = "HostDevices"
	// MultiArchitectureGate: virt-api refuses a VM of an architecture
	// other than its own without it.
	MultiArchitectureGate = "MultiArchitecture"
	// GPUsWithDRAGate: with it, virt-controller no longer checks GPUs
	// against permittedHostDevices.
	GPUsWithDRAGate = "GPUsWithDRA"
)

// featureGatesPath and permittedPath are where a hoster enables a gate and
// permits a device.
const (
	featureGatesPath = "spec.configuration.developerConfiguration.featureGates"
	permittedPath    = "spec.configuration.permittedHostDevices"
)

// Installed returns the KubeVirt CR that KubeVirt takes its configuration
// from, nil when there is none. virt-api and virt-controller read the CR
// that is not being deleted and has a status.phase (virt-operator allows
// one); among several the last by namespace and name is taken, so the
// answer does not depend on the order of a list.
func Installed(ctx context.Context, c client.Reader) (*kubevirtv1.KubeVirt, error) {
	list := &kubevirtv1.KubeVirtList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing KubeVirt CRs: %w", err)
	}
	var found *kubevirtv1.KubeVirt
	for i := range list.Items {
		kv := &list.Items[i]
		if !kv.DeletionTimestamp.IsZero() || kv.Status.Phase == "" {
			continue
		}
		if found == nil || client.ObjectKeyFromObject(kv).String() > client.ObjectKeyFromObject(found).String() {
			found = kv
		}
	}
	return found, nil
}

// Input is a machine spec, what its references resolve to, and the
// installed KubeVirt.
type Input struct {
	// Spec is the machine spec; its paths are reported under the path
	// Validate is given.
	Spec *infrav1.KubeVirtMachineSpec
	// Instancetype and Preference are the specs the machine's references
	// name; nil without one.
	Instancetype *instancetypev1beta1.VirtualMachineInstancetypeSpec
	Preference   *instancetypev1beta1.VirtualMachinePreferenceSpec
	// KubeVirt is the installed KubeVirt CR (Installed); nil when there is
	// none.
	KubeVirt *kubevirtv1.KubeVirt
}

// Validate refuses what the installed KubeVirt v1.7 refuses for the VM the
// renderer writes from the spec, after KubeVirt applied the instancetype
// and preference to it:
//
//   - host devices without the HostDevices gate (virt-api's
//     validateHostDevicesWithPassthroughEnabled);
//   - an architecture other than KubeVirt's own without the
//     MultiArchitecture gate (virt-api's validateArchitecture, which
//     compares with its own; virt-operator records it as the CR's
//     status.defaultArchitecture unless the hoster configures another
//     default);
//   - once permittedHostDevices is set, a GPU (unless GPUsWithDRA is
//     enabled) or host device it does not list by resource name
//     (virt-controller's validatePermittedHostDevices, which then cannot
//     create the launcher Pod). Without permittedHostDevices KubeVirt
//     checks nothing, and only a device plugin of the hoster's can offer
//     the device.
//
// Errors are in that order, each at the field that asks for the feature.
func Validate(in Input, path *field.Path) field.ErrorList {
	fromInstancetype := in.Instancetype != nil && len(in.Instancetype.HostDevices) > 0
	hostDevices := instancetype.HostDevices(in.Spec, in.Instancetype)
	hostDevicesPath, hostDevicePath := fields(path, "hostDevices", fromInstancetype)
	fromInstancetype = in.Instancetype != nil && len(in.Instancetype.GPUs) > 0
	gpus := instancetype.GPUs(in.Spec, in.Instancetype)
	_, gpuPath := fields(path, "gpus", fromInstancetype)
	arch, archPath := architecture(in, path)
	if len(hostDevices) == 0 && len(gpus) == 0 && arch == "" {
		return nil
	}
	kv := in.KubeVirt
	if kv == nil {
		return field.ErrorList{field.Forbidden(path, "the infrastructure cluster has no deployed KubeVirt CR, "+
			"whose feature gates and permitted host devices decide whether KubeVirt runs this machine's "+needs(hostDevices, gpus, arch))}
	}
	name := client.ObjectKeyFromObject(kv).String()
	var gates []string
	if dev := kv.Spec.Configuration.DeveloperConfiguration; dev != nil {
		gates = dev.FeatureGates
	}
	var errs field.ErrorList
	if len(hostDevices) > 0 && !slices.Contains(gates, HostDevicesGate) {
		errs = append(errs, field.Forbidden(hostDevicesPath, fmt.Sprintf(
			"KubeVirt %s does not enable the %s feature gate (%s), and virt-api refuses a VM with host devices without it",
			name, HostDevicesGate, featureGatesPath)))
	}
	own := kv.Status.DefaultArchitecture
	if own == "" {
		own = string(infrav1.ArchitectureAmd64)
	}
	if arch != "" && arch != own && !slices.Contains(gates, MultiArchitectureGate) {
		errs = append(errs, field.Forbidden(archPath, fmt.Sprintf(
			"KubeVirt %s runs %s and does not enable the %s feature gate (%s), and virt-api refuses a VM of architecture %s without it",
			name, own, MultiArchitectureGate, featureGatesPath, arch)))
	}
	permitted := kv.Spec.Configuration.PermittedHostDevices
	if permitted == nil {
		return errs
	}
	resources := map[string]bool{}
	for _, d := range permitted.PciHostDevices {
		resources[d.ResourceName] = true
	}
	for _, d := range permitted.MediatedDevices {
		resources[d.ResourceName] = true
	}
	for _, d := range permitted.USB {
		resources[d.ResourceName] = true
	}
	if !slices.Contains(gates, GPUsWithDRAGate) {
		for i, g := range gpus {
			if !resources[g] {
				errs = append(errs, field.Forbidden(gpuPath(i), fmt.Sprintf(
					"KubeVirt %s does not permit GPU %s (%s), and virt-controller cannot start a VM that asks for it",
					name, g, permittedPath)))
			}
		}
	}
	for i, d := range hostDevices {
		if !resources[d] {
			errs = append(errs, field.Forbidden(hostDevicePath(i), fmt.Sprintf(
				"KubeVirt %s does not permit host device %s (%s), and virt-controller cannot start a VM that asks for it",
				name, d, permittedPath)))
		}
	}
	return errs
}

// fields are where a spec asks for its GPUs or host devices (list, the
// spec's field): the whole list, and the i-th device; the instancetype's
// name when the devices are the instancetype's.
func fields(path *field.Path, list string, fromInstancetype bool) (*field.Path, func(int) *field.Path) {
	if fromInstancetype {
		name := path.Child("instancetype", "name")
		return name, func(int) *field.Path { return name }
	}
	return path.Child(list), func(i int) *field.Path { return path.Child(list).Index(i).Child("deviceName") }
}

// architecture is the architecture the VM states once KubeVirt applied the
// preference (the spec's, else the preference's preferredArchitecture),
// empty when neither states one and KubeVirt defaults it to its own; and
// the field that states it.
func architecture(in Input, path *field.Path) (string, *field.Path) {
	if in.Spec.Architecture != "" {
		return string(in.Spec.Architecture), path.Child("architecture")
	}
	if in.Preference != nil {
		if arch := ptr.Deref(in.Preference.PreferredArchitecture, ""); arch != "" {
			return arch, path.Child("preference", "name")
		}
	}
	return "", nil
}

// needs names what a spec asks of KubeVirt's configuration.
func needs(hostDevices, gpus []string, arch string) string {
	var what []string
	if len(hostDevices) > 0 {
		what = append(what, "host devices")
	}
	if len(gpus) > 0 {
		what = append(what, "GPUs")
	}
	if arch != "" {
		what = append(what, "architecture "+arch)
	}
	return strings.Join(what, " and ")
}
