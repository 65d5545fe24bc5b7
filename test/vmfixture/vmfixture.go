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

// Package vmfixture builds the VirtualMachines the test tiers create by
// hand, shaped like the ones the infrastructure provider renders, so that
// every tier boots the same shape and a change to it is made once.
package vmfixture

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// New returns a VirtualMachine, not yet created, that boots root from its
// first disk and reads its cloud-init user data through NoCloud from the
// Secret UserData makes for it (<name>-userdata): 2 cores and 4 GiB, both
// disks on virtio as the provider renders them (KubeVirt v1.7.0's virt-api
// puts a disk without a bus on SATA on amd64, which the worker disk's
// initramfs cannot find its root on), one pod network interface with
// masquerade, its hostname its name, and its
// instances labelled machine=<name>, so that a scenario can pick one out.
// A scenario changes what it needs on the result.
func New(namespace, name string, root kubevirtv1.VolumeSource) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"machine": name}},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						CPU:    &kubevirtv1.CPU{Cores: 2},
						Memory: &kubevirtv1.Memory{Guest: ptr.To(resource.MustParse("4Gi"))},
						Devices: kubevirtv1.Devices{
							Disks: []kubevirtv1.Disk{
								{Name: "root", BootOrder: ptr.To[uint](1), DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
								{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
							},
							Interfaces: []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}}},
						},
					},
					Hostname: name,
					Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
					Volumes: []kubevirtv1.Volume{
						{Name: "root", VolumeSource: root},
						{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
							UserDataSecretRef: &corev1.LocalObjectReference{Name: UserDataSecretName(name)},
						}}},
					},
				},
			},
		},
	}
}

// UserDataSecretName is the name of the Secret a VM New made for name reads
// its user data from.
func UserDataSecretName(vm string) string { return vm + "-userdata" }

// UserData returns the Secret, not yet created, that holds the user data
// of the VM New makes for vm.
func UserData(namespace, vm string, userData []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: UserDataSecretName(vm)},
		Data:       map[string][]byte{"userdata": userData},
	}
}

// ConfigDrive hands vm its user data through a config drive instead of
// NoCloud, from the same Secret.
func ConfigDrive(vm *kubevirtv1.VirtualMachine) {
	for i, v := range vm.Spec.Template.Spec.Volumes {
		if v.CloudInitNoCloud != nil {
			vm.Spec.Template.Spec.Volumes[i].VolumeSource = kubevirtv1.VolumeSource{
				CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: v.CloudInitNoCloud.UserDataSecretRef},
			}
		}
	}
}
