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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestContainerDiskRule: a container disk holds the node's state only once
// the Machine has its Node. Before that a new instance boots the same image
// with the same bootstrap data and takes over; after it, losing the
// instance that booted the disk loses the node.
func TestContainerDiskRule(t *testing.T) {
	const disk = "r@sha256:1"
	deleting := func(i *kubevirtv1.VirtualMachineInstance) { i.DeletionTimestamp = &metav1.Time{} }
	for _, tc := range []struct {
		name string
		o    observation
		want containerDiskVerdict
	}{
		{"a persistent disk keeps the node whatever the instance",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, vm: vm(), vmi: vmi("2", kubevirtv1.Running)},
			containerDiskKept},
		{"a container disk not provisioned yet has nothing at stake",
			observation{containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Failed)},
			containerDiskKept},
		{"the provisioned instance running on after the node joined keeps it",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Running)},
			containerDiskKept},
		{"the provisioned instance being deleted is for the ladder's instance steps",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Running, deleting)},
			containerDiskKept},
		{"a joined node without a recorded instance has nothing to compare",
			observation{provisioned: true, nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Running)},
			containerDiskKept},
		{"a new instance after the node joined lost it",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Running)},
			containerDiskLost},
		{"the provisioned instance failed after the node joined",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Failed)},
			containerDiskLost},
		{"the provisioned instance stopped after the node joined",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Succeeded)},
			containerDiskLost},
		{"the provisioned instance gone after the node joined",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm()},
			containerDiskLost},
		{"a new running instance before the node joined replaces it",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Running)},
			containerDiskReplaced},
		{"a new instance still starting before the node joined replaces it",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Scheduling)},
			containerDiskReplaced},
		{"an instance of a provisioned machine without a recorded one is taken",
			observation{provisioned: true, containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Running)},
			containerDiskReplaced},
		{"the provisioned instance failed before the node joined: KubeVirt restarts it",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Failed)},
			containerDiskKept},
		{"the provisioned instance gone before the node joined: KubeVirt starts another",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm()},
			containerDiskKept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(containerDiskRule(&tc.o)).To(Equal(tc.want))
		})
	}
}
