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

package migration

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestValidate(t *testing.T) {
	containerDisk := infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: "r@sha256:1"}}
	imported := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw"}}
	spec := func(strategy infrav1.EvictionStrategy, mutate ...func(*infrav1.KubeVirtMachineSpec)) *infrav1.KubeVirtMachineSpec {
		s := &infrav1.KubeVirtMachineSpec{EvictionStrategy: strategy, Networks: []infrav1.Network{{Name: "default", Pod: &infrav1.PodNetwork{}}}}
		for _, f := range mutate {
			f(s)
		}
		return s
	}
	rwx := func(s *infrav1.KubeVirtMachineSpec) {
		s.RootDisk = &infrav1.RootDisk{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}
	}
	bridged := func(s *infrav1.KubeVirtMachineSpec) { s.Networks[0].Binding = infrav1.BridgeBinding }
	allowBridge := func(value string) func(*infrav1.KubeVirtMachineSpec) {
		return func(s *infrav1.KubeVirtMachineSpec) {
			s.InstanceMetadata.Annotations = map[string]string{kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation: value}
		}
	}
	for _, c := range []struct {
		name    string
		spec    *infrav1.KubeVirtMachineSpec
		image   infrav1.ImageSource
		refused []string
	}{
		{"a container disk on the masqueraded pod network migrates", spec(infrav1.EvictionLiveMigrate), containerDisk, nil},
		{"a ReadWriteMany root disk migrates", spec(infrav1.EvictionLiveMigrate, rwx), imported, nil},
		{"a ReadWriteOnce root disk does not", spec(infrav1.EvictionLiveMigrate), imported, []string{"spec.rootDisk.accessModes"}},
		{"a bridged pod network does not", spec(infrav1.EvictionLiveMigrate, func(s *infrav1.KubeVirtMachineSpec) { s.Networks[0].Binding = infrav1.BridgeBinding }), containerDisk, []string{"spec.networks[0].binding"}},
		{"a bridged pod network does with KubeVirt's annotation on the instance", spec(infrav1.EvictionLiveMigrate, bridged, allowBridge("true")), containerDisk, nil},
		{"whatever the annotation's value, as virt-handler reads only its presence", spec(infrav1.EvictionLiveMigrate, bridged, allowBridge("")), containerDisk, nil},
		{"the annotation on the VirtualMachine is not the instance's", spec(infrav1.EvictionLiveMigrate, bridged, func(s *infrav1.KubeVirtMachineSpec) {
			s.VirtualMachineMetadata.Annotations = map[string]string{kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation: "true"}
		}), containerDisk, []string{"spec.networks[0].binding", "spec.instanceMetadata.annotations"}},
		{"the annotation leaves the other blockers", spec(infrav1.EvictionLiveMigrate, bridged, allowBridge("true")), imported, []string{"spec.rootDisk.accessModes"}},
		{"a bridged Multus network does", spec(infrav1.EvictionLiveMigrate, func(s *infrav1.KubeVirtMachineSpec) {
			s.Networks = append(s.Networks, infrav1.Network{Name: "vlan", Multus: &infrav1.MultusNetwork{NetworkName: "vlan10"}, Binding: infrav1.BridgeBinding})
		}), containerDisk, nil},
		{"GPUs do not", spec(infrav1.EvictionLiveMigrate, func(s *infrav1.KubeVirtMachineSpec) {
			s.GPUs = []infrav1.GPU{{Name: "g", DeviceName: "nvidia.com/A10"}}
		}), containerDisk, []string{"spec.gpus"}},
		{"host devices do not", spec(infrav1.EvictionLiveMigrate, func(s *infrav1.KubeVirtMachineSpec) {
			s.HostDevices = []infrav1.HostDevice{{Name: "h", DeviceName: "x.com/y"}}
		}), containerDisk, []string{"spec.hostDevices"}},
		{"every blocker is named", spec(infrav1.EvictionLiveMigrate, func(s *infrav1.KubeVirtMachineSpec) {
			s.Networks[0].Binding = infrav1.BridgeBinding
			s.GPUs = []infrav1.GPU{{Name: "g", DeviceName: "nvidia.com/A10"}}
		}), imported, []string{"spec.networks[0].binding", "spec.gpus", "spec.rootDisk.accessModes"}},
		{"LiveMigrateIfPossible falls back to a shutdown", spec(infrav1.EvictionLiveMigrateIfPossible, func(s *infrav1.KubeVirtMachineSpec) {
			s.GPUs = []infrav1.GPU{{Name: "g", DeviceName: "nvidia.com/A10"}}
		}), imported, nil},
		{"None shuts down", spec(infrav1.EvictionNone), imported, nil},
		{"External leaves it to the provider", spec(infrav1.EvictionExternal), imported, nil},
		{"unset leaves it to the cluster's default", spec(""), imported, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := Validate(c.spec, c.image, field.NewPath("spec"))
			if len(c.refused) == 0 {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(HaveLen(1))
			g.Expect(errs[0].Field).To(Equal("spec.evictionStrategy"))
			for _, f := range c.refused {
				g.Expect(errs[0].Detail).To(ContainSubstring(f))
			}
		})
	}
}
