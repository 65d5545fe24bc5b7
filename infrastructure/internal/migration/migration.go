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

// Package migration tells whether KubeVirt can live-migrate a machine's
// VirtualMachine. With eviction strategy LiveMigrate, KubeVirt denies the
// eviction of a VM it cannot migrate, and a drain of the infrastructure
// node then never ends; so the webhook, the template controller and the
// renderer refuse that combination with the reason.
package migration

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// Validate refuses eviction strategy LiveMigrate for a VM KubeVirt cannot
// live-migrate, naming what blocks it, in the order virt-handler checks:
// the pod network's binding, PCI devices, then the disks (a root disk on a
// claim must be ReadWriteMany; a container disk migrates by copying). A
// bridged pod network migrates when the instance carries KubeVirt's
// AllowPodBridgeNetworkLiveMigrationAnnotation: virt-handler
// (VerifyVMIMigratable, KubeVirt v1.7) reads only whether the instance's
// annotation is there, whatever its value, and the network plugin then
// keeps the guest's address on the target.
func Validate(spec *infrav1.KubeVirtMachineSpec, image infrav1.ImageSource, path *field.Path) field.ErrorList {
	if spec.EvictionStrategy != infrav1.EvictionLiveMigrate {
		return nil
	}
	var blockers []string
	_, bridgeMigrates := spec.InstanceMetadata.Annotations[kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation]
	for i, n := range spec.Networks {
		if n.Pod != nil && n.Binding == infrav1.BridgeBinding && !bridgeMigrates {
			blockers = append(blockers, fmt.Sprintf("%s is bridged to the pod network (use Masquerade, or annotate the instance with %s in %s)",
				path.Child("networks").Index(i).Child("binding"), kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation,
				path.Child("instanceMetadata", "annotations")))
		}
	}
	if len(spec.GPUs) > 0 {
		blockers = append(blockers, fmt.Sprintf("%s attaches GPUs", path.Child("gpus")))
	}
	if len(spec.HostDevices) > 0 {
		blockers = append(blockers, fmt.Sprintf("%s attaches host devices", path.Child("hostDevices")))
	}
	if image.ContainerDisk == nil && (spec.RootDisk == nil || !slices.Contains(spec.RootDisk.AccessModes, corev1.ReadWriteMany)) {
		blockers = append(blockers, fmt.Sprintf("%s does not include ReadWriteMany, which a root disk on a claim needs", path.Child("rootDisk", "accessModes")))
	}
	if len(blockers) == 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path.Child("evictionStrategy"), spec.EvictionStrategy,
		"KubeVirt denies the eviction of a VM it cannot live-migrate, so a drain of its node would never end: "+
			strings.Join(blockers, "; ")+"; use LiveMigrateIfPossible, None or External")}
}
