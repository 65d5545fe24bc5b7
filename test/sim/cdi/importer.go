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
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The images of CDI's worker Pods.
const (
	importerImage     = "quay.io/kubevirt/cdi-importer:v1.65.0"
	uploadServerImage = "quay.io/kubevirt/cdi-uploadserver:v1.65.0"
)

// job is one importer Pod's work across its runs.
type job struct {
	spec   Job
	dv     types.NamespacedName
	pod    types.NamespacedName
	cancel context.CancelFunc
	done   chan struct{}

	// Guarded by CDI.mu.
	started        bool
	written, total int64
	restarts       int32
	lastError      string
	// down is true from a failed run until its restart: the kubelet's
	// back-off, when CDI reports the importer's error.
	down    bool
	success bool
}

// snapshot returns the job's progress as CDI reports it, its restarts, the
// failed run's error while the container is down (empty while it runs) and
// whether it completed. It is safe on a nil job.
func (j *job) snapshot() (cdiv1.DataVolumeProgress, int32, string, bool) {
	if j == nil {
		return "N/A", 0, "", false
	}
	progress := cdiv1.DataVolumeProgress("N/A")
	if j.total > 0 && j.written > 0 {
		progress = cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", float64(j.written)*100/float64(j.total)))
	}
	failure := ""
	if j.down {
		failure = j.lastError
	}
	return progress, j.restarts, failure, j.success
}

func (j *job) succeeded() bool { return j != nil && j.success }

// jobOf returns a copy of the job of an importer Pod, or nil.
func (c *CDI) jobOf(pod types.UID) *job {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[pod]
	if !ok {
		return nil
	}
	out := &job{written: j.written, total: j.total, restarts: j.restarts, lastError: j.lastError, down: j.down, success: j.success}
	return out
}

// workerPodName is the name CDI gives the Pod that populates target.
func workerPodName(dv *cdiv1.DataVolume, k kind, target *corev1.PersistentVolumeClaim) string {
	switch {
	case strings.HasPrefix(target.Name, primePrefix):
		return "importer-" + target.Name
	case k == kindClone:
		return "cdi-upload-" + dv.Name
	}
	return "importer-" + dv.Name
}

// ensureWorkerPod returns the Pod that populates target, creating it owned
// by target, and records its work.
func (c *CDI) ensureWorkerPod(ctx context.Context, dv *cdiv1.DataVolume, k kind, target *corev1.PersistentVolumeClaim, sourcePath string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: target.Namespace, Name: workerPodName(dv, k, target)}
	err := c.client.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		role, image := "importer", importerImage
		if k == kindClone {
			role, image = "cdi-upload-server", uploadServerImage
		}
		pod = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels:          map[string]string{labelApp: appCDI, labelCDI: role},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(target, corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))},
			},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []corev1.Container{{
					Name: role, Image: image,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("60M"),
					}},
					VolumeMounts: []corev1.VolumeMount{{Name: "cdi-data-vol", MountPath: "/data"}},
				}},
				Volumes: []corev1.Volume{{Name: "cdi-data-vol", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: target.Name},
				}}},
			},
		}
		if err := c.client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the worker Pod of DataVolume %s: %w", dv.Name, err)
		} else if err != nil {
			if err := c.client.Get(ctx, key, pod); err != nil {
				return nil, err
			}
		}
	} else if err != nil {
		return nil, err
	}
	path, err := c.volumePath(ctx, target)
	if err != nil {
		return nil, err
	}
	size := target.Spec.Resources.Requests[corev1.ResourceStorage]
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.jobs[pod.UID]; !ok {
		c.jobs[pod.UID] = &job{
			spec: Job{DataVolume: dv.DeepCopy(), Path: path, SourcePath: sourcePath, Size: size.Value()},
			dv:   client.ObjectKeyFromObject(dv), pod: key,
		}
	}
	return pod, nil
}

// volumePath is the image file of the volume a bound claim uses.
func (c *CDI) volumePath(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	pv := &corev1.PersistentVolume{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return "", fmt.Errorf("reading the volume of claim %s: %w", pvc.Name, err)
	}
	path := DiskImage(pv)
	if path == "" {
		return "", fmt.Errorf("the volume of claim %s is not on this host", pvc.Name)
	}
	return path, nil
}

// deleteWorkerPod deletes the Pod of a DataVolume that succeeded, as CDI
// does unless told to retain it.
func (c *CDI) deleteWorkerPod(ctx context.Context, dv *cdiv1.DataVolume, pvc *corev1.PersistentVolumeClaim) error {
	for _, k := range []kind{kindImport, kindClone} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: dv.Namespace, Name: workerPodName(dv, k, pvc)}}
		if err := client.IgnoreNotFound(c.client.Delete(ctx, pod)); err != nil {
			return err
		}
	}
	return nil
}

// isCDIPod reports whether a Pod is one of CDI's worker Pods.
func isCDIPod(o client.Object) bool {
	return o.GetLabels()[labelApp] == appCDI && o.GetLabels()[labelCDI] != ""
}

// dataVolumeOfPod maps a worker Pod to the DataVolume whose work it does.
func (c *CDI) dataVolumeOfPod(_ context.Context, o client.Object) []reconcile.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.jobs[o.GetUID()]; ok {
		return []reconcile.Request{{NamespacedName: j.dv}}
	}
	return nil
}

// reconcileImporterPod plays the kubelet for CDI's worker Pods: it runs the
// Pod's job once the Pod is bound, restarting it after a failure, and
// reports the container's state.
func (c *CDI) reconcileImporterPod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := c.client.Get(ctx, req.NamespacedName, pod); apierrors.IsNotFound(err) {
		c.stopJobs(req.NamespacedName)
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if pod.Spec.NodeName == "" {
		return reconcile.Result{}, nil
	}
	if !pod.DeletionTimestamp.IsZero() {
		c.stopJobs(req.NamespacedName)
		err := c.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	c.mu.Lock()
	j, ok := c.jobs[pod.UID]
	if ok && !j.started && c.ctx != nil {
		j.started = true
		var jctx context.Context
		jctx, j.cancel = context.WithCancel(c.ctx)
		j.done = make(chan struct{})
		go c.run(jctx, ctrl.LoggerFrom(ctx), j)
	}
	var success, down bool
	var restarts int32
	var lastError string
	if ok {
		success, down, restarts, lastError = j.success, j.down, j.restarts, j.lastError
	}
	c.mu.Unlock()
	if !ok {
		// The DataVolume controller records the Pod's work after creating
		// it; come back then.
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	updated := pod.DeepCopy()
	workerStatus(updated, success, down, restarts, lastError)
	if equality.Semantic.DeepEqual(pod.Status, updated.Status) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, client.IgnoreNotFound(c.client.Status().Patch(ctx, updated, client.MergeFrom(pod)))
}

// workerStatus is the worker Pod's status as the kubelet reports it:
// running (with its restarts and the last run's exit), down in its
// back-off after a failed run (waiting in CrashLoopBackOff, the Pod still
// Running), or succeeded.
func workerStatus(p *corev1.Pod, success, down bool, restarts int32, lastError string) {
	now := metav1.Now()
	if p.Status.StartTime == nil {
		p.Status.StartTime = &now
	}
	name := p.Spec.Containers[0].Name
	cs := corev1.ContainerStatus{Name: name, Image: p.Spec.Containers[0].Image, RestartCount: restarts}
	for _, old := range p.Status.ContainerStatuses {
		if old.Name == name {
			cs = old
			cs.RestartCount = restarts
		}
	}
	if lastError != "" {
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: lastError}}
	}
	switch {
	case success:
		p.Status.Phase = corev1.PodSucceeded
		cs.Ready, cs.Started = false, ptr.To(false)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}
	case down:
		p.Status.Phase = corev1.PodRunning
		cs.Ready, cs.Started = false, ptr.To(false)
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off restarting failed container %s in pod %s", name, p.Name)}}
	default:
		p.Status.Phase = corev1.PodRunning
		if cs.State.Running == nil {
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		}
		cs.Ready, cs.Started = true, ptr.To(true)
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
}

// run runs an importer Pod's job until it succeeds or is cancelled,
// keeping the container down after each failure for the kubelet's
// doubling back-off and counting the restart when it runs again.
func (c *CDI) run(ctx context.Context, log interface{ Info(string, ...any) }, j *job) {
	defer close(j.done)
	backOff := c.opts.ImporterBackOff
	changed := func() {
		c.notify(c.podEvents, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: j.pod.Namespace, Name: j.pod.Name}})
		c.notify(c.dvEvents, &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: j.dv.Namespace, Name: j.dv.Name}})
	}
	for {
		lastTenth := int64(-1)
		spec := j.spec
		spec.Progress = func(written, total int64) {
			c.mu.Lock()
			j.written, j.total = written, total
			c.mu.Unlock()
			if total > 0 {
				if tenth := written * 10 / total; tenth != lastTenth {
					lastTenth = tenth
					c.notify(c.dvEvents, &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: j.dv.Namespace, Name: j.dv.Name}})
				}
			}
		}
		err := c.opts.Importer.Populate(ctx, spec)
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		if err == nil {
			j.success = true
		} else {
			j.lastError, j.down = err.Error(), true
			j.written = 0
		}
		c.mu.Unlock()
		changed()
		if err == nil {
			log.Info("CDI stand-in populated a volume", "DataVolume", j.dv.String())
			return
		}
		log.Info("CDI stand-in's importer failed; the Pod restarts after its back-off", "DataVolume", j.dv.String(), "backOff", backOff, "reason", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-c.after(backOff):
		}
		backOff = min(2*backOff, MaxImporterBackOff)
		c.mu.Lock()
		j.restarts++
		j.down = false
		c.mu.Unlock()
		changed()
	}
}

// stopJobs cancels the jobs of a worker Pod that is going away.
func (c *CDI) stopJobs(pod types.NamespacedName) {
	c.mu.Lock()
	var stop []*job
	for uid, j := range c.jobs {
		if j.pod == pod {
			stop = append(stop, j)
			delete(c.jobs, uid)
		}
	}
	c.mu.Unlock()
	for _, j := range stop {
		if j.cancel != nil {
			j.cancel()
			<-j.done
		}
	}
}

// simulatedImporter takes the DataVolume's import duration and reports
// steady progress, or fails as a 404 source does.
type simulatedImporter struct{ cdi *CDI }

func (s *simulatedImporter) Populate(ctx context.Context, job Job) error {
	f := s.cdi.fateOf(job.DataVolume)
	steps := s.cdi.opts.ProgressSteps
	step := f.duration / time.Duration(steps+1)
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if f.failing {
		if err := sleep(step); err != nil {
			return err
		}
		if f.message != "" {
			return errors.New(f.message)
		}
		return errors.New(ImportFailureMessage) //nolint:staticcheck // CDI's importer words its failures as sentences, for the DataVolume's condition.
	}
	total := job.Size
	if total <= 0 {
		total = 100
	}
	for i := 1; i <= steps; i++ {
		if err := sleep(step); err != nil {
			return err
		}
		job.Progress(total*int64(i-1)/int64(steps), total)
	}
	return sleep(step)
}
