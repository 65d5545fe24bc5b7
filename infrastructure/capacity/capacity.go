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

// Package capacity computes what one machine of a template offers the
// workload cluster, in the form the cluster autoscaler's Cluster API provider
// reads for scale from zero (status.capacity and status.nodeInfo), and the
// labels its node registers with (status.nodeLabels).
package capacity

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/instancetype"
)

// OperatingSystem is the operating system of every node this provider runs.
const OperatingSystem = "linux"

// GPULabel is the node label cluster-autoscaler's Cluster API provider
// recognizes a GPU node by, before its device plugin advertises the GPUs
// (v1.36.1, cloudprovider/clusterapi/clusterapi_provider.go: GPULabel; read
// by utils/gpu/gpu.go: NodeHasGpu). Its value is the GPU type that
// --gpu-total limits.
const GPULabel = "cluster-api/accelerator"

// Input is a machine spec and what its references resolve to.
type Input struct {
	// Spec is the template's machine spec.
	Spec *infrav1.KubeVirtMachineSpec
	// Instancetype is the spec of the referenced instancetype; nil without
	// one.
	Instancetype *instancetypev1beta1.VirtualMachineInstancetypeSpec
	// PreferredArchitecture is the referenced preference's preferred
	// architecture; empty without one.
	PreferredArchitecture string
	// Image is the resolved root disk source: only an imported or cloned
	// disk has a known size.
	Image infrav1.ImageSource
}

// Node is what one machine's node offers and carries.
type Node struct {
	// Capacity is the node's capacity: cpu, memory, GPUs by node resource
	// name, ephemeral-storage.
	Capacity corev1.ResourceList
	// Info is the node's architecture and operating system.
	Info infrav1.NodeInfo
	// Labels are the labels the node registers with: GPULabel for a
	// machine with GPUs, none otherwise.
	Labels map[string]string
}

// Compute returns what one machine's node offers and carries.
func Compute(in Input) Node {
	capacity := corev1.ResourceList{}
	spec := in.Spec
	var gpus []kubevirtv1.GPU
	switch {
	case in.Instancetype != nil:
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(int64(in.Instancetype.CPU.Guest), resource.DecimalSI)
		capacity[corev1.ResourceMemory] = in.Instancetype.Memory.Guest.DeepCopy()
		gpus = append(gpus, in.Instancetype.GPUs...)
	default:
		if spec.CPU != nil {
			capacity[corev1.ResourceCPU] = *resource.NewQuantity(int64(spec.CPU.Cores), resource.DecimalSI)
		}
		if spec.Memory != nil {
			capacity[corev1.ResourceMemory] = spec.Memory.DeepCopy()
		}
	}
	// The machines get the instancetype's GPUs when it attaches any, else
	// the spec's: KubeVirt copies an instancetype's GPUs only into a VM
	// that lists none and refuses one that lists others, which the
	// template's resolution refuses first (instancetype.Conflicts).
	counts := map[corev1.ResourceName]int64{}
	for _, g := range gpus {
		counts[NodeResourceName("", g.DeviceName)]++
	}
	if len(gpus) == 0 {
		for _, g := range spec.GPUs {
			counts[NodeResourceName(g.NodeResourceName, g.DeviceName)]++
		}
	}
	for name, n := range counts {
		capacity[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	if in.Image.ContainerDisk == nil && spec.RootDisk != nil && spec.RootDisk.Size != nil {
		capacity[corev1.ResourceEphemeralStorage] = spec.RootDisk.Size.DeepCopy()
	}

	arch := spec.Architecture
	if arch == "" {
		arch = infrav1.Architecture(in.PreferredArchitecture)
	}
	if arch == "" {
		arch = infrav1.ArchitectureAmd64
	}
	node := Node{Capacity: capacity, Info: infrav1.NodeInfo{Architecture: arch, OperatingSystem: OperatingSystem}}
	if gpuType := GPUType(instancetype.GPUs(spec, in.Instancetype)); gpuType != "" {
		node.Labels = map[string]string{GPULabel: gpuType}
	}
	return node
}

// GPUType is the GPULabel value of a machine whose VM gets GPUs of these
// device names, "" for none: each device name's model, the part after the
// vendor domain (nvidia.com/GA102GL_A10 is GA102GL_A10), the distinct
// models sorted and joined with "." when the machine mixes several. A
// character a label value cannot hold becomes "_", and the value is cut to
// the 63 characters a label value holds, ending on a letter or digit.
func GPUType(deviceNames []string) string {
	models := make([]string, 0, len(deviceNames))
	for _, d := range deviceNames {
		model := d[strings.LastIndex(d, "/")+1:]
		if model != "" && !slices.Contains(models, model) {
			models = append(models, model)
		}
	}
	slices.Sort(models)
	value := []byte(strings.Join(models, "."))
	for i, c := range value {
		if !isAlphanumeric(c) && c != '-' && c != '_' && c != '.' {
			value[i] = '_'
		}
	}
	if len(value) > validation.LabelValueMaxLength {
		value = value[:validation.LabelValueMaxLength]
	}
	start, end := 0, len(value)
	for start < end && !isAlphanumeric(value[start]) {
		start++
	}
	for end > start && !isAlphanumeric(value[end-1]) {
		end--
	}
	return string(value[start:end])
}

func isAlphanumeric(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// NodeResourceName is the workload-Node resource a passed-through GPU is
// counted under: the explicit name when given, else <vendor domain of the
// device plugin's resource>/gpu (nvidia.com/GA102GL_A10 counts as
// nvidia.com/gpu, the name NVIDIA's device plugin advertises in the guest),
// else the device name itself.
func NodeResourceName(explicit, deviceName string) corev1.ResourceName {
	if explicit != "" {
		return corev1.ResourceName(explicit)
	}
	if vendor, _, ok := strings.Cut(deviceName, "/"); ok && vendor != "" {
		return corev1.ResourceName(vendor + "/gpu")
	}
	return corev1.ResourceName(deviceName)
}
