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

package cdi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Provisioner is the name the stand-in provisions volumes under (their
// pv.kubernetes.io/provisioned-by), a StorageClass's provisioner.
const Provisioner = "sim.cdi.kubevirt.io"

// The annotations the persistent volume controller leaves on what it
// binds.
const (
	annBindCompleted = "pv.kubernetes.io/bind-completed"
	annBoundByCtrl   = "pv.kubernetes.io/bound-by-controller"
)

// DiskImageName is the file a filesystem volume's image is in, in the
// volume's root: CDI's importer writes disk.img there, and KubeVirt's
// virt-handler boots a claim's disk.img (pkg/host-disk: it makes an empty
// one when there is none, so a volume laid out otherwise boots blank).
const DiskImageName = "disk.img"

// DiskImage is the image file of a volume the stand-in provisioned on this
// host: disk.img in its hostPath directory; "" for another volume.
func DiskImage(pv *corev1.PersistentVolume) string {
	if pv.Spec.HostPath == nil {
		return ""
	}
	return filepath.Join(pv.Spec.HostPath.Path, DiskImageName)
}

// reconcileClaim plays a dynamic provisioner and the persistent volume
// binder for every claim: it provisions a volume (a directory on this
// host, as kind's local-path provisioner does, which the importer fills
// with disk.img) and binds the claim to it; a claim that waits for a volume
// populator (a dataSourceRef) is left to it. When a claim is gone, its
// volume is deleted (reclaim policy Delete).
func (c *CDI) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.client.Get(ctx, req.NamespacedName, pvc); apierrors.IsNotFound(err) {
		return reconcile.Result{}, c.releaseVolumes(ctx, req.NamespacedName)
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !pvc.DeletionTimestamp.IsZero() {
		if c.opts.StorageOnly {
			// CDI's own controller deletes its worker Pods.
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, c.deleteWorkerPodsOf(ctx, pvc)
	}
	if pvc.Spec.VolumeName != "" && pvc.Status.Phase != corev1.ClaimBound {
		// A bind that stopped between the claim's volumeName and its
		// status (a conflict: real CDI updates the claim's annotations
		// meanwhile): finish it, or the claim stays Pending for good and
		// no kubelet mounts it.
		return reconcile.Result{}, c.bind(ctx, pvc, pvc.Spec.VolumeName)
	}
	if pvc.Spec.VolumeName != "" || pvc.Spec.DataSourceRef != nil {
		return reconcile.Result{}, nil
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID), Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              storageClassOf(pvc),
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(c.opts.VolumeDir, fmt.Sprintf("%s-%s-%s", pvc.Namespace, pvc.Name, pvc.UID)),
				Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}},
		},
	}
	if c.opts.StorageOnly {
		dir := pv.Spec.HostPath.Path
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return reconcile.Result{}, err
		}
		// Past the umask: the worker Pods' user writes there.
		if err := os.Chmod(dir, 0o777); err != nil { //nolint:gosec // A test volume, as local-path-provisioner's.
			return reconcile.Result{}, err
		}
	}
	if err := c.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("provisioning a volume for claim %s: %w", pvc.Name, err)
	}
	return reconcile.Result{}, c.bind(ctx, pvc, pv.Name)
}

// deleteWorkerPodsOf deletes CDI's worker Pods of a claim being deleted,
// as CDI's import controller does: a Pod that mounts the claim keeps it
// from going (claim protection), and the Pod would only go with it.
func (c *CDI) deleteWorkerPodsOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.InNamespace(pvc.Namespace), client.MatchingLabels{labelApp: appCDI}); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if metav1.IsControlledBy(p, pvc) && p.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(c.client.Delete(ctx, p)); err != nil {
				return fmt.Errorf("deleting worker Pod %s of claim %s: %w", p.Name, pvc.Name, err)
			}
		}
	}
	return nil
}

func storageClassOf(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

// bind binds a claim to a volume as the persistent volume controller does:
// the volume's claimRef, the claim's volumeName, then both Bound.
func (c *CDI) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim, volume string) error {
	pv := &corev1.PersistentVolume{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: volume}, pv); err != nil {
		return err
	}
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
	pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	if err := c.client.Update(ctx, pv); err != nil {
		return fmt.Errorf("binding volume %s to claim %s: %w", volume, pvc.Name, err)
	}
	pv.Status.Phase = corev1.VolumeBound
	if err := c.client.Status().Update(ctx, pv); err != nil {
		return err
	}
	bound := pvc.DeepCopy()
	bound.Spec.VolumeName = volume
	if bound.Annotations == nil {
		bound.Annotations = map[string]string{}
	}
	bound.Annotations[annBindCompleted], bound.Annotations[annBoundByCtrl] = "yes", "yes"
	if err := c.client.Update(ctx, bound); err != nil {
		return client.IgnoreNotFound(err)
	}
	bound.Status.Phase = corev1.ClaimBound
	bound.Status.AccessModes = pv.Spec.AccessModes
	bound.Status.Capacity = pv.Spec.Capacity
	return client.IgnoreNotFound(c.client.Status().Update(ctx, bound))
}

// rebind hands the volume the prime claim was populated into to the
// DataVolume's claim and deletes the prime claim, as CDI's populators do.
func (c *CDI) rebind(ctx context.Context, prime, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName != "" {
		return nil
	}
	if err := c.bind(ctx, pvc, prime.Spec.VolumeName); err != nil {
		return err
	}
	return client.IgnoreNotFound(c.client.Delete(ctx, prime))
}

// releaseVolumes releases the volumes still bound to a claim that is gone
// and deletes them and their directories, as the persistent volume
// controller and a provisioner do for reclaim policy Delete. The
// apiserver protects every volume with the kubernetes.io/pv-protection
// finalizer, which kube-controller-manager's PV protection controller
// removes only from a volume that is not Bound: a volume deleted while
// still Bound would stay Terminating for good.
func (c *CDI) releaseVolumes(ctx context.Context, claim client.ObjectKey) error {
	pvs := &corev1.PersistentVolumeList{}
	if err := c.client.List(ctx, pvs); err != nil {
		return err
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		ref := pv.Spec.ClaimRef
		if ref == nil || ref.Namespace != claim.Namespace || ref.Name != claim.Name {
			continue
		}
		if pv.Status.Phase == corev1.VolumeBound {
			pv.Status.Phase = corev1.VolumeReleased
			if err := c.client.Status().Update(ctx, pv); err != nil {
				return client.IgnoreNotFound(err)
			}
		}
		if err := client.IgnoreNotFound(c.client.Delete(ctx, pv)); err != nil {
			return err
		}
		if hp := pv.Spec.HostPath; hp != nil && strings.HasPrefix(hp.Path, c.opts.VolumeDir+string(filepath.Separator)) {
			_ = os.RemoveAll(hp.Path)
		}
	}
	return nil
}
