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

package kubevirtmachine

import (
	"testing"

	. "github.com/onsi/gomega"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func TestMachineAddresses(t *testing.T) {
	g := NewWithT(t)
	i := vmi("1", kubevirtv1.Running)
	i.Spec.Hostname = "w"
	i.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{
		{Name: "default", IP: "10.0.0.5", IPs: []string{"10.0.0.5", "fd00::5"}},
		{Name: "storage", IPs: []string{"192.168.1.5"}},
		{Name: "down"},
	}
	g.Expect(machineAddresses(i)).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: "w"},
		{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"},
		{Type: clusterv1.MachineInternalIP, Address: "fd00::5"},
		{Type: clusterv1.MachineInternalIP, Address: "192.168.1.5"},
	}))
	g.Expect(machineAddresses(cachedVMI(t, i))).To(Equal(machineAddresses(i)), "the cache's copy of the instance")
	g.Expect(machineAddresses(nil)).To(BeNil())
}
