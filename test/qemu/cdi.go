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

package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

// importErrorReason is the reason of the Running condition of a DataVolume
// whose importer pod fails.
const importErrorReason = "Error"

// kubevirtstatus.DefaultClaimSize is the size of a claim whose DataVolume names none.
// importJob is CDI's importer for one DataVolume: a download that runs
// until it succeeds, restarting after a failure as the importer pod does.
type importJob struct {
	uid    types.UID
	url    string
	path   string
	cancel context.CancelFunc
	done   chan struct{}

	// Guarded by Runner.mu.
	progress  importProgress
	restarts  int32
	lastError string
	succeeded bool
}

// importProgress is how much of an import is written.
type importProgress struct {
	started      bool
	written, all int64
}

// percent is CDI's progress string: N/A until the size is known.
func (p importProgress) percent() cdiv1.DataVolumeProgress {
	if !p.started || p.all <= 0 {
		return "N/A"
	}
	return cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", float64(p.written)*100/float64(p.all)))
}

// reconcileDataVolume plays CDI for one DataVolume: its claim, bound, and
// an HTTP import run for real into a volume file on this host. Blank
// volumes succeed at once; clones are not supported here and fail.
func (r *Runner) reconcileDataVolume(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	dv := &cdiv1.DataVolume{}
	if err := r.client.Get(ctx, req.NamespacedName, dv); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetImport(req.NamespacedName, "")
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !dv.DeletionTimestamp.IsZero() {
		r.forgetImport(req.NamespacedName, "")
		return reconcile.Result{}, nil
	}
	// A DataVolume recreated under the same name imports anew.
	r.forgetImport(req.NamespacedName, dv.UID)
	if err := r.ensureClaim(ctx, dv); err != nil {
		return reconcile.Result{}, err
	}
	if dv.Status.Phase == cdiv1.Succeeded || dv.Status.Phase == cdiv1.Failed {
		return reconcile.Result{}, nil
	}

	desired := dv.DeepCopy()
	desired.Status.ClaimName = dv.Name
	switch {
	case dv.Spec.Source != nil && dv.Spec.Source.HTTP != nil && dv.Spec.SourceRef == nil:
		job := r.importFor(ctx, dv)
		r.mu.Lock()
		importStatus(&desired.Status, dv.Name, job.progress, job.restarts, job.lastError, job.succeeded)
		r.mu.Unlock()
	case dv.Spec.SourceRef == nil && (dv.Spec.Source == nil || dv.Spec.Source.Blank != nil):
		succeeded(&desired.Status, dv.Name)
	default:
		desired.Status.Phase, desired.Status.Progress = cdiv1.Failed, "N/A"
		desired.Status.Conditions = []cdiv1.DataVolumeCondition{
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", fmt.Sprintf("PVC %s Bound", dv.Name)),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "Failed", ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, importErrorReason, "the QEMU runner imports HTTP sources only"),
		}
	}
	keepDVTransitionTimes(dv.Status.Conditions, desired.Status.Conditions)
	if equality.Semantic.DeepEqual(dv.Status, desired.Status) {
		return reconcile.Result{}, nil
	}
	if err := r.client.Status().Patch(ctx, desired, client.MergeFrom(dv)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if desired.Status.Phase != dv.Status.Phase {
		ctrl.LoggerFrom(ctx).V(2).Info("DataVolume phase changed", "phase", desired.Status.Phase, "progress", desired.Status.Progress)
	}
	return reconcile.Result{}, nil
}

// importStatus is the status CDI reports for an HTTP import: scheduled
// until the importer reads the source, in progress with its progress,
// Succeeded, or in progress with the importer's error and restart count
// while it fails.
func importStatus(st *cdiv1.DataVolumeStatus, name string, p importProgress, restarts int32, lastError string, done bool) {
	bound := kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", fmt.Sprintf("PVC %s Bound", name))
	st.RestartCount = restarts
	switch {
	case done:
		succeeded(st, name)
	case lastError != "" && !p.started:
		st.Phase, st.Progress = cdiv1.ImportInProgress, "N/A"
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(cdiv1.ImportInProgress), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, importErrorReason, lastError)}
	case !p.started:
		st.Phase, st.Progress = cdiv1.ImportScheduled, "N/A"
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(cdiv1.ImportScheduled), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Pending", "")}
	default:
		st.Phase, st.Progress = cdiv1.ImportInProgress, p.percent()
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(cdiv1.ImportInProgress), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Pod is running", "")}
	}
}

func succeeded(st *cdiv1.DataVolumeStatus, name string) {
	st.Phase, st.Progress = cdiv1.Succeeded, "100.0%"
	st.Conditions = []cdiv1.DataVolumeCondition{
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", fmt.Sprintf("PVC %s Bound", name)),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionTrue, "", ""),
		kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Completed", "")}
}

// importFor returns the DataVolume's import, starting it on first sight.
func (r *Runner) importFor(ctx context.Context, dv *cdiv1.DataVolume) *importJob {
	key := client.ObjectKeyFromObject(dv)
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.imports[key]; ok {
		return j
	}
	jobCtx, cancel := context.WithCancel(r.importCtx)
	j := &importJob{
		uid:    dv.UID,
		url:    dv.Spec.Source.HTTP.URL,
		path:   filepath.Join(r.opts.Dir, "volumes", dv.Namespace, fmt.Sprintf("%s-%s.img", dv.Name, dv.UID)),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	r.imports[key] = j
	limit := kubevirtstatus.ClaimFor(dv).Spec.Resources.Requests[corev1.ResourceStorage]
	go r.runImport(jobCtx, ctrl.LoggerFrom(ctx).WithValues("url", j.url), key, j, limit.Value())
	return j
}

// runImport downloads until it succeeds or is cancelled, requeueing the
// DataVolume at each start, every tenth of progress, each failure and the
// end.
func (r *Runner) runImport(ctx context.Context, log interface {
	Info(string, ...any)
}, key client.ObjectKey, j *importJob, limit int64) {
	defer close(j.done)
	if ctx.Err() != nil {
		// The runner stopped before the import began.
		return
	}
	requeue := func() { r.notify(r.dataVolumeEvents, &cdiv1.DataVolume{ObjectMeta: objectMeta(key)}) }
	if err := os.MkdirAll(filepath.Dir(j.path), 0o755); err != nil {
		r.mu.Lock()
		j.lastError = err.Error()
		r.mu.Unlock()
		requeue()
		return
	}
	for {
		lastTenth := -1
		err := importHTTP(ctx, j.url, j.path, limit, func(written, all int64) {
			r.mu.Lock()
			j.progress = importProgress{started: true, written: written, all: all}
			r.mu.Unlock()
			if all > 0 {
				if tenth := int(written * 10 / all); tenth != lastTenth {
					lastTenth = tenth
					requeue()
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if err == nil {
			j.succeeded = true
		} else {
			j.restarts++
			j.lastError = err.Error()
			j.progress = importProgress{}
		}
		restarts := j.restarts
		r.mu.Unlock()
		requeue()
		if err == nil {
			log.Info("Imported a DataVolume", "DataVolume", key.String())
			return
		}
		log.Info("A DataVolume import failed; the importer restarts", "DataVolume", key.String(), "restarts", restarts, "reason", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.opts.ImporterRestartInterval):
		}
	}
}

// forgetImport cancels the import of a DataVolume that is gone (or, with
// uid set, that was replaced by another of that name) and removes its
// volume; a guest that booted it keeps its open file.
func (r *Runner) forgetImport(key client.ObjectKey, uid types.UID) {
	r.mu.Lock()
	j, ok := r.imports[key]
	if !ok || (uid != "" && j.uid == uid) {
		r.mu.Unlock()
		return
	}
	delete(r.imports, key)
	r.mu.Unlock()
	j.cancel()
	<-j.done
	_ = os.Remove(j.path)
}

// importedVolume returns the volume file of a DataVolume whose import
// succeeded.
func (r *Runner) importedVolume(key client.ObjectKey) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.imports[key]
	if !ok || !j.succeeded {
		return "", false
	}
	return j.path, true
}

// ensureClaim creates the DataVolume's PersistentVolumeClaim, owned by it
// as CDI does, and binds it.
func (r *Runner) ensureClaim(ctx context.Context, dv *cdiv1.DataVolume) error {
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(dv), pvc)
	if apierrors.IsNotFound(err) {
		if err := r.client.Create(ctx, kubevirtstatus.ClaimFor(dv)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the PersistentVolumeClaim of DataVolume %s: %w", dv.Name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if pvc.Status.Phase == corev1.ClaimBound || !pvc.DeletionTimestamp.IsZero() {
		return nil
	}
	bound := pvc.DeepCopy()
	bound.Status.Phase = corev1.ClaimBound
	bound.Status.AccessModes = pvc.Spec.AccessModes
	bound.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
	return client.IgnoreNotFound(r.client.Status().Patch(ctx, bound, client.MergeFrom(pvc)))
}

// keepDVTransitionTimes keeps the timestamps of conditions that did not
// change, so an unchanged status is not rewritten.
func keepDVTransitionTimes(old, updated []cdiv1.DataVolumeCondition) {
	for i := range updated {
		for _, o := range old {
			if o.Type == updated[i].Type && o.Status == updated[i].Status && o.Reason == updated[i].Reason && o.Message == updated[i].Message {
				updated[i].LastTransitionTime, updated[i].LastHeartbeatTime = o.LastTransitionTime, o.LastHeartbeatTime
			}
		}
	}
}
