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

package capacity

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

var (
	containerDisk = infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: "r@sha256:1"}}
	imported      = infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x/d.raw"}}
)

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestCompute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       Input
		capacity corev1.ResourceList
		nodeInfo infrav1.NodeInfo
		// labels are the node's labels; nil for a machine without GPUs.
		labels map[string]string
	}{
		{
			name:     "cpu and memory from the spec",
			in:       Input{Spec: &infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 4}, Memory: ptr.To(q("8Gi"))}, Image: containerDisk},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("8Gi")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "cpu, memory and GPUs from the instancetype",
			in: Input{
				Spec: &infrav1.KubeVirtMachineSpec{Instancetype: &infrav1.InstancetypeReference{Name: "gn1.xlarge"}},
				Instancetype: &instancetypev1beta1.VirtualMachineInstancetypeSpec{
					CPU:    instancetypev1beta1.CPUInstancetype{Guest: 8},
					Memory: instancetypev1beta1.MemoryInstancetype{Guest: q("32Gi")},
					GPUs:   []kubevirtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}, {Name: "gpu2", DeviceName: "nvidia.com/GA102GL_A10"}},
				},
				Image: containerDisk,
			},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("32Gi"), "nvidia.com/gpu": q("2")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
			labels:   map[string]string{GPULabel: "GA102GL_A10"},
		},
		{
			// KubeVirt copies an instancetype's GPUs into a VM that lists
			// none and refuses one that lists others (the resolution
			// refuses that template first): never both.
			name: "the instancetype's GPUs, not the spec's beside them",
			in: Input{
				Spec: &infrav1.KubeVirtMachineSpec{
					Instancetype: &infrav1.InstancetypeReference{Name: "gn1.xlarge"},
					GPUs:         []infrav1.GPU{{Name: "extra", DeviceName: "nvidia.com/AD102GL_L40S", NodeResourceName: "nvidia.com/l40s"}},
				},
				Instancetype: &instancetypev1beta1.VirtualMachineInstancetypeSpec{
					CPU:    instancetypev1beta1.CPUInstancetype{Guest: 8},
					Memory: instancetypev1beta1.MemoryInstancetype{Guest: q("32Gi")},
					GPUs:   []kubevirtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}},
				},
				Image: containerDisk,
			},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("32Gi"), "nvidia.com/gpu": q("1")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
			labels:   map[string]string{GPULabel: "GA102GL_A10"},
		},
		{
			name: "an instancetype without GPUs and the spec's GPUs",
			in: Input{
				Spec: &infrav1.KubeVirtMachineSpec{
					Instancetype: &infrav1.InstancetypeReference{Name: "u1.xlarge"},
					GPUs:         []infrav1.GPU{{Name: "extra", DeviceName: "nvidia.com/AD102GL_L40S", NodeResourceName: "nvidia.com/l40s"}},
				},
				Instancetype: &instancetypev1beta1.VirtualMachineInstancetypeSpec{
					CPU:    instancetypev1beta1.CPUInstancetype{Guest: 4},
					Memory: instancetypev1beta1.MemoryInstancetype{Guest: q("16Gi")},
				},
				Image: containerDisk,
			},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi"), "nvidia.com/l40s": q("1")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
			labels:   map[string]string{GPULabel: "AD102GL_L40S"},
		},
		{
			name: "GPUs are counted by their node resource name",
			in: Input{Spec: &infrav1.KubeVirtMachineSpec{
				CPU: &infrav1.CPU{Cores: 2}, Memory: ptr.To(q("4Gi")),
				GPUs: []infrav1.GPU{
					{Name: "a", DeviceName: "nvidia.com/GA102GL_A10"},
					{Name: "b", DeviceName: "amd.com/MI210"},
					{Name: "c", DeviceName: "nvidia.com/TU104GL_T4", NodeResourceName: "nvidia.com/t4"},
					{Name: "d", DeviceName: "local-gpu"},
				},
			}, Image: containerDisk},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("4Gi"),
				"nvidia.com/gpu": q("1"), "amd.com/gpu": q("1"), "nvidia.com/t4": q("1"), "local-gpu": q("1")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
			labels:   map[string]string{GPULabel: "GA102GL_A10.MI210.TU104GL_T4.local-gpu"},
		},
		{
			name: "an imported root disk's size is the ephemeral storage",
			in: Input{Spec: &infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 1}, Memory: ptr.To(q("2Gi")),
				RootDisk: &infrav1.RootDisk{Size: ptr.To(q("40Gi"))}}, Image: imported},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi"), corev1.ResourceEphemeralStorage: q("40Gi")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "a container disk has no known size",
			in: Input{Spec: &infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 1}, Memory: ptr.To(q("2Gi")),
				RootDisk: &infrav1.RootDisk{Size: ptr.To(q("40Gi"))}}, Image: containerDisk},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "architecture comes from the preference when the spec has none",
			in: Input{Spec: &infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 1}, Memory: ptr.To(q("1Gi"))},
				PreferredArchitecture: "arm64", Image: containerDisk},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Gi")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureArm64, OperatingSystem: "linux"},
		},
		{
			name: "the spec's architecture wins over the preference",
			in: Input{Spec: &infrav1.KubeVirtMachineSpec{CPU: &infrav1.CPU{Cores: 1}, Memory: ptr.To(q("1Gi")), Architecture: infrav1.ArchitectureS390x},
				PreferredArchitecture: "arm64", Image: containerDisk},
			capacity: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Gi")},
			nodeInfo: infrav1.NodeInfo{Architecture: infrav1.ArchitectureS390x, OperatingSystem: "linux"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			node := Compute(tc.in)
			g.Expect(node.Capacity).To(HaveLen(len(tc.capacity)))
			for name, want := range tc.capacity {
				got, ok := node.Capacity[name]
				g.Expect(ok).To(BeTrue(), "missing %s", name)
				g.Expect(got.Cmp(want)).To(BeZero(), "%s: got %s, want %s", name, got.String(), want.String())
			}
			g.Expect(node.Info).To(Equal(tc.nodeInfo))
			g.Expect(node.Labels).To(Equal(tc.labels))
		})
	}
}

// TestGPUType: the GPULabel value is derived from the device names alone,
// the same for any order or repetition, and always a valid label value.
func TestGPUType(t *testing.T) {
	for _, tc := range []struct {
		name    string
		devices []string
		want    string
	}{
		{name: "no GPU", devices: nil, want: ""},
		{name: "the model after the vendor domain", devices: []string{"nvidia.com/GA102GL_A10"}, want: "GA102GL_A10"},
		{name: "a vGPU profile", devices: []string{"nvidia.com/GRID_A10-4Q"}, want: "GRID_A10-4Q"},
		{name: "a device name without a vendor domain", devices: []string{"local-gpu"}, want: "local-gpu"},
		{name: "several GPUs of one model", devices: []string{"nvidia.com/GA102GL_A10", "nvidia.com/GA102GL_A10"}, want: "GA102GL_A10"},
		{name: "mixed models, sorted whatever the order", devices: []string{"nvidia.com/TU104GL_T4", "amd.com/MI210", "nvidia.com/TU104GL_T4"}, want: "MI210.TU104GL_T4"},
		{name: "a character a label value cannot hold", devices: []string{"example.com/gpu:v2"}, want: "gpu_v2"},
		{name: "no letter or digit at either end", devices: []string{"example.com/-gpu-"}, want: "gpu"},
		{name: "an empty model", devices: []string{"example.com/"}, want: ""},
		{
			name:    "cut to 63 characters, ending on a letter or digit",
			devices: []string{"example.com/" + strings.Repeat("a", 62) + "-b"},
			want:    strings.Repeat("a", 62),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := GPUType(tc.devices)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(validation.IsValidLabelValue(got)).To(BeEmpty())
		})
	}
}
