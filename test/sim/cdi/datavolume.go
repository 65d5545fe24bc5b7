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
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode/status"
)

// CDI's annotations and labels on the claims and Pods it makes.
const (
	annEndpoint        = "cdi.kubevirt.io/storage.import.endpoint"
	annSource          = "cdi.kubevirt.io/storage.import.source"
	annContentType     = "cdi.kubevirt.io/storage.contentType"
	annImportPod       = "cdi.kubevirt.io/storage.import.importPodName"
	annPodPhase        = "cdi.kubevirt.io/storage.pod.phase"
	annPodRestarts     = "cdi.kubevirt.io/storage.pod.restarts"
	annCreatedForDV    = "cdi.kubevirt.io/createdForDataVolume"
	annUsePopulator    = "cdi.kubevirt.io/storage.usePopulator"
	annCloneRequest    = "k8s.io/CloneRequest"
	annPopulatedFor    = "cdi.kubevirt.io/storage.populatedFor"
	labelApp           = "app"
	appCDI             = "containerized-data-importer"
	labelComponent     = "app.kubernetes.io/component"
	labelCDI           = "cdi.kubevirt.io"
	primePrefix        = "prime-"
	volumeImportPrefix = "volume-import-source-"
)

// kind is how CDI populates a DataVolume.
type kind int

const (
	kindBlank kind = iota
	kindImport
	kindClone
)

func kindOf(dv *cdiv1.DataVolume) kind {
	switch {
	case dv.Spec.SourceRef != nil:
		return kindClone
	case dv.Spec.Source == nil || dv.Spec.Source.Blank != nil:
		return kindBlank
	case dv.Spec.Source.PVC != nil || dv.Spec.Source.Snapshot != nil:
		return kindClone
	default:
		return kindImport
	}
}

// reconcileDataVolume plays cdi-controller for one DataVolume.
func (c *CDI) reconcileDataVolume(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	dv := &cdiv1.DataVolume{}
	if err := c.client.Get(ctx, req.NamespacedName, dv); apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !dv.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	k := kindOf(dv)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.client.Get(ctx, client.ObjectKeyFromObject(dv), pvc); apierrors.IsNotFound(err) {
		if wait := c.opts.ClaimDelay - time.Since(dv.CreationTimestamp.Time); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, c.writeStatus(ctx, dv, func(st *cdiv1.DataVolumeStatus) { pending(st, dv.Name) })
		}
		populator, err := c.usesPopulator(ctx, dv)
		if err != nil {
			return reconcile.Result{}, err
		}
		if err := c.createClaim(ctx, dv, k, populator); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, c.writeStatus(ctx, dv, func(st *cdiv1.DataVolumeStatus) { pending(st, dv.Name) })
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !metav1.IsControlledBy(pvc, dv) {
		return reconcile.Result{}, nil
	}
	if dv.Status.Phase == cdiv1.Succeeded {
		return reconcile.Result{}, c.deleteWorkerPod(ctx, dv, pvc)
	}

	// The claim the importer writes: the DataVolume's own, or on the
	// populator path its prime claim, whose volume is then rebound.
	target := pvc
	if pvc.Annotations[annUsePopulator] == "true" {
		prime, err := c.ensurePrime(ctx, dv, pvc)
		if err != nil {
			return reconcile.Result{}, err
		}
		target = prime
	}
	var update func(*cdiv1.DataVolumeStatus)
	var completed *corev1.Pod
	switch {
	case target.Status.Phase != corev1.ClaimBound:
		update = func(st *cdiv1.DataVolumeStatus) { pending(st, dv.Name) }
	case k == kindBlank:
		update = func(st *cdiv1.DataVolumeStatus) { succeeded(st, dv.Name) }
	default:
		sourcePath := ""
		if k == kindClone {
			path, missing, err := c.cloneSource(ctx, dv)
			if err != nil {
				return reconcile.Result{}, err
			}
			if missing != "" {
				// CDI waits for the source and says so; nothing runs.
				update = func(st *cdiv1.DataVolumeStatus) { cloneWithoutSource(st, dv.Name, missing) }
				break
			}
			sourcePath = path
		}
		pod, err := c.ensureWorkerPod(ctx, dv, k, target, sourcePath)
		if err != nil {
			return reconcile.Result{}, err
		}
		j := c.jobOf(pod.UID)
		if j.succeeded() {
			// A populator rebinds the prime claim's volume to the
			// DataVolume's claim; the completed Pod goes once the
			// DataVolume says Succeeded.
			if target != pvc {
				if err := c.rebind(ctx, target, pvc); err != nil {
					return reconcile.Result{}, err
				}
			}
			completed = pod
		}
		update = func(st *cdiv1.DataVolumeStatus) { progressStatus(st, dv.Name, k, pod, j) }
	}
	if err := c.writeStatus(ctx, dv, update); err != nil {
		return reconcile.Result{}, err
	}
	if completed != nil {
		// CDI removes a worker Pod that completed: it would keep its claim
		// from being deleted.
		if err := client.IgnoreNotFound(c.client.Delete(ctx, completed)); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, c.annotateClaim(ctx, pvc, dv)
}

// writeStatus applies update to the DataVolume's status and patches it
// when it changed, keeping the times of unchanged conditions.
func (c *CDI) writeStatus(ctx context.Context, dv *cdiv1.DataVolume, update func(*cdiv1.DataVolumeStatus)) error {
	desired := dv.DeepCopy()
	desired.Status.ClaimName = dv.Name
	update(&desired.Status)
	keepTransitionTimes(dv.Status.Conditions, desired.Status.Conditions)
	if equality.Semantic.DeepEqual(dv.Status, desired.Status) {
		return nil
	}
	if err := c.client.Status().Patch(ctx, desired, client.MergeFrom(dv)); err != nil {
		return client.IgnoreNotFound(err)
	}
	if desired.Status.Phase != dv.Status.Phase {
		ctrl.LoggerFrom(ctx).V(2).Info("CDI stand-in moved a DataVolume", "phase", desired.Status.Phase, "progress", desired.Status.Progress)
	}
	return nil
}

// usesPopulator reports whether the DataVolume's storage class is served
// by a CSI driver, which makes CDI populate through volume populators.
func (c *CDI) usesPopulator(ctx context.Context, dv *cdiv1.DataVolume) (bool, error) {
	className := claimSpec(dv).StorageClassName
	if className == nil || *className == "" {
		return false, nil
	}
	sc := &storagev1.StorageClass{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: *className}, sc); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	driver := &storagev1.CSIDriver{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: sc.Provisioner}, driver); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}

// claimSpec is the claim CDI makes for a DataVolume.
func claimSpec(dv *cdiv1.DataVolume) corev1.PersistentVolumeClaimSpec {
	return kubevirtstatus.ClaimFor(dv).Spec
}

// createClaim creates the DataVolume's claim with CDI's annotations, owned
// by it; on the populator path with a dataSourceRef to its
// VolumeImportSource, which it creates first.
func (c *CDI) createClaim(ctx context.Context, dv *cdiv1.DataVolume, k kind, populator bool) error {
	pvc := kubevirtstatus.ClaimFor(dv)
	pvc.Labels = map[string]string{labelApp: appCDI, labelComponent: "storage"}
	maps.Copy(pvc.Labels, dv.Labels)
	pvc.Annotations = map[string]string{annCreatedForDV: string(dv.UID), annContentType: "kubevirt"}
	maps.Copy(pvc.Annotations, dv.Annotations)
	switch k {
	case kindImport:
		pvc.Annotations[annSource] = importSource(dv)
		if dv.Spec.Source.HTTP != nil {
			pvc.Annotations[annEndpoint] = dv.Spec.Source.HTTP.URL
		}
		pvc.Annotations[annImportPod] = workerPodName(dv, k, pvc)
	case kindClone:
		if src := cloneSourceKey(dv); src != nil {
			pvc.Annotations[annCloneRequest] = src.String()
		}
	}
	if populator && k == kindImport {
		pvc.Annotations[annUsePopulator] = "true"
		pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: ptr.To(cdiv1.SchemeGroupVersion.Group), Kind: "VolumeImportSource", Name: volumeImportPrefix + string(dv.UID)}
		if err := c.createImportSource(ctx, dv); err != nil {
			return err
		}
	}
	if err := c.client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the PersistentVolumeClaim of DataVolume %s: %w", dv.Name, err)
	}
	return nil
}

// createImportSource creates the VolumeImportSource a populated claim
// names, owned by the DataVolume.
func (c *CDI) createImportSource(ctx context.Context, dv *cdiv1.DataVolume) error {
	src := &cdiv1.VolumeImportSource{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: dv.Namespace, Name: volumeImportPrefix + string(dv.UID),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dv, cdiv1.SchemeGroupVersion.WithKind("DataVolume"))},
		},
		Spec: cdiv1.VolumeImportSourceSpec{Source: &cdiv1.ImportSourceType{HTTP: dv.Spec.Source.HTTP, Registry: dv.Spec.Source.Registry}, ContentType: cdiv1.DataVolumeKubeVirt},
	}
	if err := c.client.Create(ctx, src); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the VolumeImportSource of DataVolume %s: %w", dv.Name, err)
	}
	return nil
}

// ensurePrime returns the prime claim the populator fills in place of the
// DataVolume's claim, creating it owned by that claim.
func (c *CDI) ensurePrime(ctx context.Context, dv *cdiv1.DataVolume, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	prime := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: pvc.Namespace, Name: primePrefix + string(pvc.UID)}
	err := c.client.Get(ctx, key, prime)
	if err == nil || !apierrors.IsNotFound(err) {
		return prime, err
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		// Rebound already: the prime claim did its work.
		return pvc, nil
	}
	prime = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels:          map[string]string{labelApp: appCDI, labelComponent: "storage"},
			Annotations:     map[string]string{annContentType: "kubevirt", annSource: importSource(dv), annImportPod: workerPodName(dv, kindImport, pvc)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pvc, corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))},
		},
		Spec: *pvc.Spec.DeepCopy(),
	}
	prime.Spec.DataSourceRef, prime.Spec.DataSource = nil, nil
	if dv.Spec.Source.HTTP != nil {
		prime.Annotations[annEndpoint] = dv.Spec.Source.HTTP.URL
	}
	if err := c.client.Create(ctx, prime); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating the prime claim of DataVolume %s: %w", dv.Name, err)
	}
	return prime, nil
}

// annotateClaim mirrors the worker Pod's phase and restarts onto the
// DataVolume's claim, as CDI does, and marks a populated claim.
func (c *CDI) annotateClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, dv *cdiv1.DataVolume) error {
	updated := pvc.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	switch dv.Status.Phase {
	case cdiv1.Succeeded:
		updated.Annotations[annPodPhase] = string(corev1.PodSucceeded)
		updated.Annotations[annPopulatedFor] = dv.Name
	case cdiv1.ImportInProgress, cdiv1.CloneInProgress:
		updated.Annotations[annPodPhase] = string(corev1.PodRunning)
	case cdiv1.ImportScheduled, cdiv1.CloneScheduled:
		updated.Annotations[annPodPhase] = string(corev1.PodPending)
	}
	if dv.Status.RestartCount > 0 {
		updated.Annotations[annPodRestarts] = fmt.Sprint(dv.Status.RestartCount)
	}
	if equality.Semantic.DeepEqual(pvc.Annotations, updated.Annotations) {
		return nil
	}
	return client.IgnoreNotFound(c.client.Patch(ctx, updated, client.MergeFrom(pvc)))
}

func importSource(dv *cdiv1.DataVolume) string {
	switch {
	case dv.Spec.Source == nil:
		return "none"
	case dv.Spec.Source.HTTP != nil:
		return "http"
	case dv.Spec.Source.Registry != nil:
		return "registry"
	case dv.Spec.Source.S3 != nil:
		return "s3"
	}
	return "none"
}

// cloneSourceKey names a clone's source: a DataSource or a claim.
func cloneSourceKey(dv *cdiv1.DataVolume) *client.ObjectKey {
	switch {
	case dv.Spec.SourceRef != nil:
		return &client.ObjectKey{Namespace: ptr.Deref(dv.Spec.SourceRef.Namespace, dv.Namespace), Name: dv.Spec.SourceRef.Name}
	case dv.Spec.Source != nil && dv.Spec.Source.PVC != nil:
		ns := dv.Spec.Source.PVC.Namespace
		if ns == "" {
			ns = dv.Namespace
		}
		return &client.ObjectKey{Namespace: ns, Name: dv.Spec.Source.PVC.Name}
	}
	return nil
}

// cloneSource returns the disk.img a clone copies, or a message naming
// the source that does not exist (yet).
func (c *CDI) cloneSource(ctx context.Context, dv *cdiv1.DataVolume) (string, string, error) {
	key := cloneSourceKey(dv)
	if key == nil {
		return "", "the clone names no source", nil
	}
	claimKey := *key
	if dv.Spec.SourceRef != nil {
		ds := &cdiv1.DataSource{}
		if err := c.client.Get(ctx, *key, ds); apierrors.IsNotFound(err) {
			return "", fmt.Sprintf("DataSource %s does not exist", key), nil
		} else if err != nil {
			return "", "", err
		}
		if ds.Spec.Source.PVC == nil {
			return "", fmt.Sprintf("DataSource %s has no PVC source", key), nil
		}
		claimKey = client.ObjectKey{Namespace: ds.Spec.Source.PVC.Namespace, Name: ds.Spec.Source.PVC.Name}
		if claimKey.Namespace == "" {
			claimKey.Namespace = ds.Namespace
		}
	}
	src := &corev1.PersistentVolumeClaim{}
	if err := c.client.Get(ctx, claimKey, src); apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("The source PVC %s does not exist", claimKey), nil
	} else if err != nil {
		return "", "", err
	}
	if src.Status.Phase != corev1.ClaimBound || src.Spec.VolumeName == "" {
		return "", fmt.Sprintf("The source PVC %s is not bound", claimKey), nil
	}
	pv := &corev1.PersistentVolume{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: src.Spec.VolumeName}, pv); err != nil {
		return "", "", client.IgnoreNotFound(err)
	}
	path := DiskImage(pv)
	if path == "" {
		return "", fmt.Sprintf("The source PVC %s has no volume on this host", claimKey), nil
	}
	return path, "", nil
}

// The statuses CDI reports.

func bound(name string) cdiv1.DataVolumeCondition {
	return kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", fmt.Sprintf("PVC %s Bound", name))
}

func pending(st *cdiv1.DataVolumeStatus, name string) {
	st.Phase, st.Progress = cdiv1.Pending, "N/A"
	st.Conditions = []cdiv1.DataVolumeCondition{
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeBound, corev1.ConditionFalse, "Pending", fmt.Sprintf("PVC %s Pending", name)),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "", ""),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", ""),
	}
}

func succeeded(st *cdiv1.DataVolumeStatus, name string) {
	st.Phase, st.Progress = cdiv1.Succeeded, "100.0%"
	st.Conditions = []cdiv1.DataVolumeCondition{bound(name),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionTrue, "", ""),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Completed", "")}
}

func cloneWithoutSource(st *cdiv1.DataVolumeStatus, name, missing string) {
	st.Phase, st.Progress = cdiv1.CloneScheduled, "N/A"
	st.Conditions = []cdiv1.DataVolumeCondition{bound(name),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "CloneWithoutSource", missing),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "CloneWithoutSource", missing)}
}

// progressStatus reports the worker Pod: scheduled until it runs, in
// progress with its progress (or its last error while it restarts), then
// Succeeded.
func progressStatus(st *cdiv1.DataVolumeStatus, name string, k kind, pod *corev1.Pod, j *job) {
	scheduled, inProgress := cdiv1.ImportScheduled, cdiv1.ImportInProgress
	if k == kindClone {
		scheduled, inProgress = cdiv1.CloneScheduled, cdiv1.CloneInProgress
	}
	progress, restarts, lastError, done := j.snapshot()
	st.RestartCount = restarts
	switch {
	case done:
		succeeded(st, name)
	case pod.Status.Phase != corev1.PodRunning:
		st.Phase, st.Progress = scheduled, "N/A"
		st.Conditions = []cdiv1.DataVolumeCondition{bound(name),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(scheduled), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Pending", "")}
	case lastError != "":
		st.Phase, st.Progress = inProgress, progress
		st.Conditions = []cdiv1.DataVolumeCondition{bound(name),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(inProgress), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", lastError)}
	default:
		st.Phase, st.Progress = inProgress, progress
		st.Conditions = []cdiv1.DataVolumeCondition{bound(name),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(inProgress), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Pod is running", "")}
	}
}

// keepTransitionTimes keeps the timestamps of conditions whose status,
// reason and message did not change, so an unchanged status is not
// rewritten.
func keepTransitionTimes(old, updated []cdiv1.DataVolumeCondition) {
	for i := range updated {
		for _, o := range old {
			if o.Type == updated[i].Type && o.Status == updated[i].Status && o.Reason == updated[i].Reason && o.Message == updated[i].Message {
				updated[i].LastTransitionTime, updated[i].LastHeartbeatTime = o.LastTransitionTime, o.LastHeartbeatTime
			}
		}
	}
}
