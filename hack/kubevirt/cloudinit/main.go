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

// Command kubevirt-cloudinit writes a VirtualMachineInstance's cloud-init
// disk with KubeVirt's own code (kubevirt.io/kubevirt/pkg/cloud-init), the
// calls virt-launcher makes before it defines the domain: it reads the
// instance's NoCloud or ConfigDrive volume, resolves the Secrets referenced
// from the files the kubelet would mount (<secrets>/<volume>/userdata),
// and writes the ISO with xorrisofs. The real-guest tier boots its guests
// from this disk, so they read what a KubeVirt guest reads.
//
// Usage: kubevirt-cloudinit -vmi <instance.json> -secrets <dir> -out <dir>
// prints the ISO's path.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	v1 "kubevirt.io/api/core/v1"
	cloudinit "kubevirt.io/kubevirt/pkg/cloud-init"
	diskutils "kubevirt.io/kubevirt/pkg/ephemeral-disk-utils"
)

func main() {
	vmiFile := flag.String("vmi", "", "the VirtualMachineInstance as JSON, as the API server returns it")
	secrets := flag.String("secrets", "", "where the cloud-init volume's Secrets are, as virt-launcher's pod mounts them: <dir>/<volume>/userdata")
	out := flag.String("out", "", "the directory the ISO is written under (virt-launcher's /var/run/libvirt/cloud-init-dir)")
	flag.Parse()
	if *vmiFile == "" || *secrets == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "kubevirt-cloudinit: -vmi, -secrets and -out are required")
		os.Exit(2)
	}
	iso, err := write(*vmiFile, *secrets, *out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubevirt-cloudinit: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(iso)
}

func write(vmiFile, secrets, out string) (string, error) {
	raw, err := os.ReadFile(vmiFile)
	if err != nil {
		return "", err
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(raw, vmi); err != nil {
		return "", fmt.Errorf("reading the VirtualMachineInstance: %w", err)
	}
	if err := cloudinit.SetLocalDirectory(out); err != nil {
		return "", err
	}
	// virt-launcher hands the ISO to QEMU running as KubeVirt's qemu user
	// (107), which this host does not have; the real-guest tier's QEMU
	// runs as the user that runs this command, who owns the file already.
	diskutils.MockDefaultOwnershipManager()
	data, err := cloudinit.ReadCloudInitVolumeDataSource(vmi, secrets)
	if err != nil {
		return "", fmt.Errorf("reading the cloud-init volume: %w", err)
	}
	if data == nil {
		return "", fmt.Errorf("VirtualMachineInstance %s has no cloud-init volume", vmi.Name)
	}
	if err := cloudinit.PrepareLocalPath(vmi.Name, vmi.Namespace); err != nil {
		return "", err
	}
	// The cluster-wide instancetype names instance_type first, as
	// virt-launcher's generateSomeCloudInitISO chooses it.
	instancetype := vmi.Annotations[v1.ClusterInstancetypeAnnotation]
	if instancetype == "" {
		instancetype = vmi.Annotations[v1.InstancetypeAnnotation]
	}
	if err := cloudinit.GenerateLocalData(vmi, instancetype, data); err != nil {
		return "", err
	}
	return cloudinit.GetIsoFilePath(data.DataSource, vmi.Name, vmi.Namespace), nil
}
