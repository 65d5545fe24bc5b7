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

package kubevirt

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

// kubevirtstatus.DefaultClaimSize is the size of a claim whose DataVolume names none (a
// clone that inherits its source's size).
// ImportFailureMessage is the Running condition message of a failing
// import, as CDI reports an HTTP source that answers 404.
const ImportFailureMessage = "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"

type populator int

const (
	populateBlank populator = iota
	populateImport
	populateClone
)

func populatorOf(dv *cdiv1.DataVolume) populator {
	switch {
	case dv.Spec.SourceRef != nil:
		return populateClone
	case dv.Spec.Source == nil || dv.Spec.Source.Blank != nil:
		return populateBlank
	case dv.Spec.Source.PVC != nil || dv.Spec.Source.Snapshot != nil:
		return populateClone
	default:
		return populateImport
	}
}

func (s *Simulator) reconcileDataVolume(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	dv := &cdiv1.DataVolume{}
	if err := s.client.Get(ctx, req.NamespacedName, dv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !dv.DeletionTimestamp.IsZero() {
		s.mu.Lock()
		delete(s.imports, dv.UID)
		s.mu.Unlock()
		return reconcile.Result{}, nil
	}
	if err := s.ensureClaim(ctx, dv); err != nil {
		return reconcile.Result{}, err
	}
	if dv.Status.Phase == cdiv1.Succeeded || dv.Status.Phase == cdiv1.Failed {
		return reconcile.Result{}, nil
	}

	desired := dv.DeepCopy()
	desired.Status.ClaimName = dv.Name
	requeue, err := s.populate(ctx, dv, &desired.Status)
	if err != nil {
		return reconcile.Result{}, err
	}
	keepTransitionTimes(dv.Status.Conditions, desired.Status.Conditions)
	if !equality.Semantic.DeepEqual(dv.Status, desired.Status) {
		if err := s.client.Status().Patch(ctx, desired, client.MergeFrom(dv)); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if desired.Status.Phase != dv.Status.Phase {
			ctrl.LoggerFrom(ctx).V(2).Info("Simulated DataVolume phase changed", "phase", desired.Status.Phase, "progress", desired.Status.Progress)
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// populate computes the status of a DataVolume CDI is populating and when
// it next changes.
func (s *Simulator) populate(ctx context.Context, dv *cdiv1.DataVolume, st *cdiv1.DataVolumeStatus) (time.Duration, error) {
	kind := populatorOf(dv)
	bound := kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound", fmt.Sprintf("PVC %s Bound", dv.Name))
	if kind == populateBlank {
		st.Phase, st.Progress = cdiv1.Succeeded, "100.0%"
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionTrue, "", ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Completed", "")}
		return 0, nil
	}
	if kind == populateClone {
		if missing, err := s.cloneSourceMissing(ctx, dv); err != nil || missing != "" {
			if err != nil {
				return 0, err
			}
			// CDI waits for the source and says so; nothing progresses.
			st.Phase, st.Progress = cdiv1.CloneScheduled, "N/A"
			st.Conditions = []cdiv1.DataVolumeCondition{bound,
				kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "CloneWithoutSource", missing),
				kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "CloneWithoutSource", missing)}
			return s.opts.ImportDuration, nil
		}
	}

	p := s.importProcessFor(dv)
	step := p.duration / time.Duration(s.opts.ProgressSteps+1)
	elapsed := time.Since(p.start)
	scheduled, inProgress := cdiv1.ImportScheduled, cdiv1.ImportInProgress
	if kind == populateClone {
		scheduled, inProgress = cdiv1.CloneScheduled, cdiv1.CloneInProgress
	}
	switch {
	case elapsed < step:
		st.Phase, st.Progress = scheduled, "N/A"
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(scheduled), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Pending", "")}
		return after(p.start, step), nil
	case p.failing:
		restarts := int32((elapsed - step) / s.opts.ImporterRestartInterval)
		st.Phase, st.Progress, st.RestartCount = inProgress, "N/A", restarts
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(inProgress), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", ImportFailureMessage)}
		if restarts >= 100 {
			return 0, nil
		}
		return after(p.start, step+time.Duration(restarts+1)*s.opts.ImporterRestartInterval), nil
	case elapsed < p.duration:
		done := int((elapsed - step) / step)
		percent := float64(done) * 100 / float64(s.opts.ProgressSteps)
		st.Phase, st.Progress = inProgress, cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", percent))
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionFalse, string(inProgress), ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Pod is running", "")}
		return after(p.start, step*time.Duration(done+2)), nil
	default:
		st.Phase, st.Progress = cdiv1.Succeeded, "100.0%"
		st.Conditions = []cdiv1.DataVolumeCondition{bound,
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeReady, corev1.ConditionTrue, "", ""),
			kubevirtstatus.DataVolumeCondition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Completed", "")}
		return 0, nil
	}
}

// importProcessFor returns the DataVolume's importer, starting it (and
// deciding its faults) on first sight.
func (s *Simulator) importProcessFor(dv *cdiv1.DataVolume) *importProcess {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.imports[dv.UID]; ok {
		return p
	}
	p := &importProcess{start: time.Now(), duration: s.opts.ImportDuration}
	if f := s.claim(&s.slowImports, dv); f != nil {
		p.duration = f.duration
	}
	p.failing = s.claim(&s.importFailures, dv) != nil
	s.imports[dv.UID] = p
	return p
}

// cloneSourceMissing names a clone source that does not exist, or "".
func (s *Simulator) cloneSourceMissing(ctx context.Context, dv *cdiv1.DataVolume) (string, error) {
	var obj client.Object
	var key client.ObjectKey
	switch {
	case dv.Spec.SourceRef != nil:
		key = client.ObjectKey{Namespace: ptr.Deref(dv.Spec.SourceRef.Namespace, dv.Namespace), Name: dv.Spec.SourceRef.Name}
		obj = &cdiv1.DataSource{}
	case dv.Spec.Source != nil && dv.Spec.Source.PVC != nil:
		key = client.ObjectKey{Namespace: dv.Spec.Source.PVC.Namespace, Name: dv.Spec.Source.PVC.Name}
		if key.Namespace == "" {
			key.Namespace = dv.Namespace
		}
		obj = &corev1.PersistentVolumeClaim{}
	default:
		return "", nil
	}
	err := s.client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("The source %T %s does not exist", obj, key), nil
	}
	return "", err
}

// ensureClaim creates the DataVolume's PersistentVolumeClaim, owned by it
// as CDI does, and binds it.
func (s *Simulator) ensureClaim(ctx context.Context, dv *cdiv1.DataVolume) error {
	pvc := &corev1.PersistentVolumeClaim{}
	err := s.client.Get(ctx, client.ObjectKeyFromObject(dv), pvc)
	if apierrors.IsNotFound(err) {
		pvc = kubevirtstatus.ClaimFor(dv)
		if err := s.client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
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
	return client.IgnoreNotFound(s.client.Status().Patch(ctx, bound, client.MergeFrom(pvc)))
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
