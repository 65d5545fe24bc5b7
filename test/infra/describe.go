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

package infra

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Describe lists, for a failure message, the infrastructure cluster's
// nodes and what KubeVirt and CDI hold in a namespace: launcher and
// importer Pods, instances, VMs, DataVolumes and claims, with their state.
func Describe(ctx context.Context, c client.Reader, namespace string) string {
	var b strings.Builder
	nodes := &corev1.NodeList{}
	_ = c.List(ctx, nodes)
	for _, n := range nodes.Items {
		fmt.Fprintf(&b, "Node %s labels=%v conditions=%+v allocatable=%v\n", n.Name, n.Labels, n.Status.Conditions, n.Status.Allocatable)
	}
	in := client.InNamespace(namespace)
	pods := &corev1.PodList{}
	_ = c.List(ctx, pods, in)
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "Pod %s node=%q phase=%s conditions=%+v\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	_ = c.List(ctx, vmis, in)
	for _, v := range vmis.Items {
		fmt.Fprintf(&b, "VMI %s uid=%s phase=%s node=%q interfaces=%+v conditions=%+v\n",
			v.Name, v.UID, v.Status.Phase, v.Status.NodeName, v.Status.Interfaces, v.Status.Conditions)
	}
	vms := &kubevirtv1.VirtualMachineList{}
	_ = c.List(ctx, vms, in)
	for _, v := range vms.Items {
		fmt.Fprintf(&b, "VM %s printable=%s deleting=%v conditions=%+v\n", v.Name, v.Status.PrintableStatus, !v.DeletionTimestamp.IsZero(), v.Status.Conditions)
	}
	dvs := &cdiv1.DataVolumeList{}
	_ = c.List(ctx, dvs, in)
	for _, d := range dvs.Items {
		fmt.Fprintf(&b, "DataVolume %s phase=%s progress=%s restarts=%d\n", d.Name, d.Status.Phase, d.Status.Progress, d.Status.RestartCount)
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	_ = c.List(ctx, pvcs, in)
	for _, p := range pvcs.Items {
		fmt.Fprintf(&b, "PVC %s phase=%s volume=%s deleting=%v finalizers=%v\n", p.Name, p.Status.Phase, p.Spec.VolumeName, !p.DeletionTimestamp.IsZero(), p.Finalizers)
	}
	return b.String()
}
