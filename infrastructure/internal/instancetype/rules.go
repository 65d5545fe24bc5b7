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

package instancetype

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// Validate refuses a machine spec whose VM KubeVirt's virt-api refuses once
// it applies the instancetype and preference: the spec's own devices beside
// an instancetype's (Conflicts), and vCPUs the preference cannot place
// (ValidateCPUTopology). The KubeVirtMachine and KubeVirtMachineTemplate
// webhooks, the template's resolution and the renderer all call it, so a
// spec one of them accepts is one the others accept. it and preference are
// nil when the spec names none or what it names does not exist (KubeVirt
// refuses that on its own, and the template reports it).
func Validate(spec *infrav1.KubeVirtMachineSpec, it *instancetypev1beta1.VirtualMachineInstancetypeSpec, preference *instancetypev1beta1.VirtualMachinePreferenceSpec, path *field.Path) field.ErrorList {
	errs := Conflicts(spec, it, path)
	return append(errs, ValidateCPUTopology(spec, it, preference, path)...)
}

// Conflicts follows KubeVirt v1.7's instancetype rules
// (pkg/instancetype/apply: applyGPUs, applyHostDevices): an instancetype
// that attaches GPUs refuses every GPU in the VM, not only the same device,
// and one that attaches host devices refuses every host device ("VM
// field(s) spec.template.spec.domain.devices.gpus conflicts with selected
// instance type"). The other fields KubeVirt refuses beside an
// instancetype are cpu (sockets, cores, threads) and memory.guest, which
// ValidateMachineSpec refuses beside any instancetype; the rest of what
// the renderer writes (affinity rather than a nodeSelector, no annotations
// on the instance, no scheduler name) cannot conflict.
func Conflicts(spec *infrav1.KubeVirtMachineSpec, it *instancetypev1beta1.VirtualMachineInstancetypeSpec, path *field.Path) field.ErrorList {
	if it == nil || spec.Instancetype == nil {
		return nil
	}
	var errs field.ErrorList
	if len(it.GPUs) > 0 && len(spec.GPUs) > 0 {
		devices := make([]string, 0, len(it.GPUs))
		for _, g := range it.GPUs {
			devices = append(devices, g.DeviceName)
		}
		errs = append(errs, field.Forbidden(path.Child("gpus"), fmt.Sprintf(
			"instancetype %s attaches GPUs (%s), and KubeVirt then refuses any GPU in the VM; move every GPU into the instancetype, or use one without GPUs",
			spec.Instancetype.Name, strings.Join(devices, ", "))))
	}
	if len(it.HostDevices) > 0 && len(spec.HostDevices) > 0 {
		devices := make([]string, 0, len(it.HostDevices))
		for _, d := range it.HostDevices {
			devices = append(devices, d.DeviceName)
		}
		errs = append(errs, field.Forbidden(path.Child("hostDevices"), fmt.Sprintf(
			"instancetype %s attaches host devices (%s), and KubeVirt then refuses any host device in the VM; move every host device into the instancetype, or use one without host devices",
			spec.Instancetype.Name, strings.Join(devices, ", "))))
	}
	return errs
}

// GPUs are the GPUs a machine's VM gets: the instancetype's when it
// attaches any (KubeVirt copies them into a VM that lists none and
// refuses one that lists others, see Conflicts), else the spec's.
func GPUs(spec *infrav1.KubeVirtMachineSpec, it *instancetypev1beta1.VirtualMachineInstancetypeSpec) []string {
	if it != nil && len(it.GPUs) > 0 {
		return deviceNames(it.GPUs, func(g kubevirtv1.GPU) string { return g.DeviceName })
	}
	return deviceNames(spec.GPUs, func(g infrav1.GPU) string { return g.DeviceName })
}

// HostDevices are the host devices a machine's VM gets, as GPUs are: the
// instancetype's when it attaches any, else the spec's.
func HostDevices(spec *infrav1.KubeVirtMachineSpec, it *instancetypev1beta1.VirtualMachineInstancetypeSpec) []string {
	if it != nil && len(it.HostDevices) > 0 {
		return deviceNames(it.HostDevices, func(d kubevirtv1.HostDevice) string { return d.DeviceName })
	}
	return deviceNames(spec.HostDevices, func(d infrav1.HostDevice) string { return d.DeviceName })
}

// deviceNames are the device names of a list of GPUs or host devices.
func deviceNames[T any](devices []T, name func(T) string) []string {
	names := make([]string, 0, len(devices))
	for _, d := range devices {
		names = append(names, name(d))
	}
	return names
}

// ValidateCPUTopology refuses vCPUs the preference cannot place. KubeVirt
// v1.7 refuses a VM whose instancetype's vCPUs a spread preference cannot
// divide (pkg/instancetype/preference/validation: CheckSpreadCPUTopology,
// "vCPUs provided by the instance type are not divisible by ..."). A
// cpu/memory sized VM states its own topology, which KubeVirt takes as
// it is; the renderer places those vCPUs as KubeVirt places an
// instancetype's (CPUTopology), so the same counts are refused for them.
func ValidateCPUTopology(spec *infrav1.KubeVirtMachineSpec, it *instancetypev1beta1.VirtualMachineInstancetypeSpec, preference *instancetypev1beta1.VirtualMachinePreferenceSpec, path *field.Path) field.ErrorList {
	if preference == nil {
		return nil
	}
	name := ""
	if spec.Preference != nil {
		name = " " + spec.Preference.Name
	}
	switch {
	case spec.Instancetype != nil && it != nil:
		if _, problem := CPUTopology(it.CPU.Guest, preference); problem != "" {
			return field.ErrorList{field.Invalid(path.Child("instancetype", "name"), spec.Instancetype.Name,
				fmt.Sprintf("the instancetype's %d vCPUs do not fit preference%s: %s, and KubeVirt refuses the VM", it.CPU.Guest, name, problem))}
		}
	case spec.Instancetype == nil && spec.CPU != nil && spec.CPU.Cores > 0:
		if _, problem := CPUTopology(uint32(spec.CPU.Cores), preference); problem != "" {
			return field.ErrorList{field.Invalid(path.Child("cpu", "cores"), spec.CPU.Cores,
				fmt.Sprintf("preference%s cannot place these vCPUs: %s", name, problem))}
		}
	}
	return nil
}

// CPUTopology places vCPUs as KubeVirt v1.7 places an instancetype's under
// the preference's preferred topology (pkg/instancetype/apply:
// applyGuestCPUTopology): sockets unless the preference says otherwise;
// spread splits them across sockets and cores, or cores and threads, at
// its ratio (2 by default), or across sockets, cores and two threads per
// core. KubeVirt checks a preference's CPU requirement against that field
// alone, so a cpu/memory sized VM's vCPUs go there too. Without a
// preference the vCPUs are cores of one socket. problem says why a spread
// preference cannot divide the count, as KubeVirt refuses it.
func CPUTopology(vCPUs uint32, preference *instancetypev1beta1.VirtualMachinePreferenceSpec) (*kubevirtv1.CPU, string) {
	if preference == nil {
		return &kubevirtv1.CPU{Cores: vCPUs}, ""
	}
	cpu := &kubevirtv1.CPU{Sockets: 1, Cores: 1, Threads: 1}
	topology := instancetypev1beta1.Sockets
	if preference.CPU != nil && preference.CPU.PreferredCPUTopology != nil {
		topology = *preference.CPU.PreferredCPUTopology
	}
	switch topology {
	case instancetypev1beta1.Cores, instancetypev1beta1.DeprecatedPreferCores:
		cpu.Cores = vCPUs
	case instancetypev1beta1.Threads, instancetypev1beta1.DeprecatedPreferThreads:
		cpu.Threads = vCPUs
	case instancetypev1beta1.Spread, instancetypev1beta1.DeprecatedPreferSpread:
		ratio, across := uint32(2), instancetypev1beta1.SpreadAcrossSocketsCores
		if preference.PreferSpreadSocketToCoreRatio != 0 {
			ratio = preference.PreferSpreadSocketToCoreRatio
		}
		if o := preference.CPU.SpreadOptions; o != nil {
			ratio = ptr.Deref(o.Ratio, ratio)
			across = ptr.Deref(o.Across, across)
		}
		if ratio == 0 {
			return cpu, "the preference spreads vCPUs at a ratio of 0"
		}
		// KubeVirt divides the count even for one vCPU (the check comes
		// before the placement), so one vCPU does not spread either.
		per := ratio
		if across == instancetypev1beta1.SpreadAcrossSocketsCoresThreads {
			per = ratio * 2
		}
		if vCPUs%per != 0 {
			return cpu, fmt.Sprintf("it spreads vCPUs across %s in groups of %d; use a multiple of %d", across, per, per)
		}
		switch across {
		case instancetypev1beta1.SpreadAcrossCoresThreads:
			cpu.Threads, cpu.Cores = ratio, vCPUs/ratio
		case instancetypev1beta1.SpreadAcrossSocketsCoresThreads:
			cpu.Threads, cpu.Cores, cpu.Sockets = 2, ratio, vCPUs/per
		default:
			cpu.Cores, cpu.Sockets = ratio, vCPUs/ratio
		}
	default:
		// Sockets, and Any, which KubeVirt fills as sockets.
		cpu.Sockets = vCPUs
	}
	return cpu, ""
}
