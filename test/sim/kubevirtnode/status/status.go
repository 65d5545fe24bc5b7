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

// Package status holds what KubeVirt and CDI report on their objects, shared
// by everything in the tests that stands in for them: the KubeVirt/CDI
// simulator and the QEMU runner of test/qemu.
package status

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// DefaultClaimSize is the size of a DataVolume's claim when its storage
// request names none.
var DefaultClaimSize = resource.MustParse("10Gi")

func now() metav1.Time { return metav1.NewTime(time.Now()) }

// ClaimFor is the PersistentVolumeClaim CDI creates for a DataVolume: its
// storage (or pvc) access modes, size, class and volume mode, with
// ReadWriteOnce and DefaultClaimSize where it states none.
func ClaimFor(dv *cdiv1.DataVolume) *corev1.PersistentVolumeClaim {
	spec := corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
	size := DefaultClaimSize
	switch {
	case dv.Spec.Storage != nil:
		if len(dv.Spec.Storage.AccessModes) > 0 {
			spec.AccessModes = dv.Spec.Storage.AccessModes
		}
		if q, ok := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; ok {
			size = q
		}
		spec.StorageClassName = dv.Spec.Storage.StorageClassName
		spec.VolumeMode = dv.Spec.Storage.VolumeMode
	case dv.Spec.PVC != nil:
		if len(dv.Spec.PVC.AccessModes) > 0 {
			spec.AccessModes = dv.Spec.PVC.AccessModes
		}
		if q, ok := dv.Spec.PVC.Resources.Requests[corev1.ResourceStorage]; ok {
			size = q
		}
		spec.StorageClassName = dv.Spec.PVC.StorageClassName
		spec.VolumeMode = dv.Spec.PVC.VolumeMode
	}
	spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: size}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: dv.Namespace,
			Name:      dv.Name,
			Labels:    map[string]string{"app": "containerized-data-importer", "app.kubernetes.io/component": "storage"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         cdiv1.SchemeGroupVersion.String(),
				Kind:               "DataVolume",
				Name:               dv.Name,
				UID:                dv.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: spec,
	}
}

// DataVolumeCondition is a DataVolume condition as CDI writes it, both
// timestamps now.
func DataVolumeCondition(t cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason, message string) cdiv1.DataVolumeCondition {
	ts := now()
	return cdiv1.DataVolumeCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: ts, LastHeartbeatTime: ts}
}

// SetInstanceCondition sets c on the instance, moving its transition time
// only when status, reason or message changed.
func SetInstanceCondition(vmi *kubevirtv1.VirtualMachineInstance, c kubevirtv1.VirtualMachineInstanceCondition) {
	for i, old := range vmi.Status.Conditions {
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return
		}
		c.LastTransitionTime = now()
		vmi.Status.Conditions[i] = c
		return
	}
	c.LastTransitionTime = now()
	vmi.Status.Conditions = append(vmi.Status.Conditions, c)
}

// RemoveInstanceCondition drops the instance's condition of type t.
func RemoveInstanceCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) {
	kept := vmi.Status.Conditions[:0]
	for _, c := range vmi.Status.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	vmi.Status.Conditions = kept
}

// SetPhase moves the instance to phase and records the transition, as
// virt-handler does; the same phase changes nothing.
func SetPhase(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase) {
	if vmi.Status.Phase == phase {
		return
	}
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: now()})
}

// UserDataSecretRef is the Secret a cloud-init volume (NoCloud or
// ConfigDrive) reads its user data from; nil for inline data or another
// kind of volume.
func UserDataSecretRef(v kubevirtv1.Volume) *corev1.LocalObjectReference {
	switch {
	case v.CloudInitNoCloud != nil:
		return v.CloudInitNoCloud.UserDataSecretRef
	case v.CloudInitConfigDrive != nil:
		return v.CloudInitConfigDrive.UserDataSecretRef
	}
	return nil
}
