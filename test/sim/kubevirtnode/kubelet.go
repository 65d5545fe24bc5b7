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

package kubevirtnode

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	// computeContainer runs virt-launcher and, in it, QEMU.
	computeContainer = "compute"
	// pullRetry is how long a kubelet backs off before it pulls again.
	pullRetry = 5 * time.Second
)

// reconcileLauncherPod plays the kubelet for a virt-launcher Pod bound to
// one of the nodes: it pulls the images, runs the containers, reports the
// compute container terminated when the guest stops, and on deletion stops
// the guest and confirms the deletion.
func (h *Hosts) reconcileLauncherPod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := h.client.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !h.ownsNode(pod.Spec.NodeName) {
		return reconcile.Result{}, nil
	}
	st := h.launcherPodState(ctx, pod)
	g := h.guestOf(types.UID(pod.Labels[kubevirtv1.CreatedByLabel]))
	updated := pod.DeepCopy()
	var requeue time.Duration
	switch {
	case !pod.DeletionTimestamp.IsZero():
		if g != nil && !stopped(g.guest) {
			// virt-launcher shuts the domain down on SIGTERM; the guest's
			// exit requeues the Pod.
			g.guest.Shutdown()
			return reconcile.Result{}, nil
		}
		// Nothing confirms the grace period of a Pod whose containers
		// stopped but the kubelet: delete it for good.
		err := h.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
		h.forgetPod(pod.UID)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return reconcile.Result{}, nil
	case g != nil && stopped(g.guest):
		terminated(updated, g)
	default:
		missing, err := h.mountProblem(ctx, pod)
		if err != nil {
			return reconcile.Result{}, err
		}
		if missing != "" {
			ctrl.LoggerFrom(ctx).V(2).Info("Kubelet stand-in cannot mount a volume of a launcher Pod", "reason", missing)
			containerCreating(updated)
			requeue = pullRetry
			break
		}
		if failure := h.pullProblem(pod, st); failure != nil {
			pullFailed(updated, failure)
			requeue = pullRetry
			break
		}
		h.runContainers(updated, st)
	}
	if equality.Semantic.DeepEqual(pod.Status, updated.Status) {
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
	// A strategic merge keeps the conditions virt-controller writes (the
	// readiness gate) while the kubelet writes its own.
	if err := h.client.Status().Patch(ctx, updated, client.StrategicMergeFrom(pod)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if updated.Status.Phase != pod.Status.Phase {
		ctrl.LoggerFrom(ctx).V(2).Info("Kubelet stand-in moved a launcher Pod", "phase", updated.Status.Phase)
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// mountProblem names a Secret or ConfigMap volume of the Pod that cannot be
// mounted because its object does not exist, or "".
func (h *Hosts) mountProblem(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		var obj client.Object
		var name string
		switch {
		case v.Secret != nil && !ptr.Deref(v.Secret.Optional, false):
			obj, name = &corev1.Secret{}, v.Secret.SecretName
		case v.ConfigMap != nil && !ptr.Deref(v.ConfigMap.Optional, false):
			obj, name = &corev1.ConfigMap{}, v.ConfigMap.Name
		default:
			continue
		}
		err := h.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			kind := "secret"
			if v.ConfigMap != nil {
				kind = "configmap"
			}
			return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %s %q not found", v.Name, kind, name), nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", nil
}

// containerCreating reports a Pod whose volumes cannot be mounted: its
// containers wait in ContainerCreating (the kubelet reports the mount
// failure only as an event), and it stays Pending until they can.
func containerCreating(p *corev1.Pod) {
	p.Status.Phase = corev1.PodPending
	waiting := func(containers []corev1.Container, reason string) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(containers))
		for _, c := range containers {
			out = append(out, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}})
		}
		return out
	}
	p.Status.InitContainerStatuses = waiting(p.Spec.InitContainers, "PodInitializing")
	p.Status.ContainerStatuses = waiting(p.Spec.Containers, "ContainerCreating")
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse})
	names := make([]string, 0, len(p.Spec.InitContainers))
	for _, c := range p.Spec.InitContainers {
		names = append(names, c.Name)
	}
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: "ContainersNotInitialized",
		Message: fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(names, " "))})
	setPodCondition(p, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"})
}

// pullFailure is a container whose image cannot be pulled.
type pullFailure struct {
	container string
	init      bool
	image     string
	message   string
}

// pullProblem returns the first container (init containers first) whose
// image cannot be pulled, or nil.
func (h *Hosts) pullProblem(pod *corev1.Pod, st *podState) *pullFailure {
	check := func(c corev1.Container, init bool) *pullFailure {
		if isLauncherImage(pod, c.Image) {
			return nil
		}
		var err error
		if st != nil && st.pullFailure != "" {
			err = fmt.Errorf("failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", c.Image, c.Image, c.Image)
		} else if h.opts.Pull != nil {
			err = h.opts.Pull(c.Image)
		}
		if err == nil {
			return nil
		}
		return &pullFailure{container: c.Name, init: init, image: c.Image,
			message: fmt.Sprintf("rpc error: code = NotFound desc = %v", err)}
	}
	for _, c := range pod.Spec.InitContainers {
		if f := check(c, true); f != nil {
			return f
		}
	}
	for _, c := range pod.Spec.Containers {
		if f := check(c, false); f != nil {
			return f
		}
	}
	return nil
}

// isLauncherImage reports whether image is the compute container's, which
// every node has.
func isLauncherImage(pod *corev1.Pod, image string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == computeContainer {
			return c.Image == image
		}
	}
	return false
}

// pullFailed reports the Pod waiting on an image it cannot pull, as the
// kubelet does: ErrImagePull, then ImagePullBackOff.
func pullFailed(p *corev1.Pod, f *pullFailure) {
	reason := "ErrImagePull"
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.Name == f.container && cs.State.Waiting != nil && (cs.State.Waiting.Reason == "ErrImagePull" || cs.State.Waiting.Reason == "ImagePullBackOff") {
			reason = "ImagePullBackOff"
			if cs.State.Waiting.Reason == "ImagePullBackOff" {
				reason = "ErrImagePull"
			}
		}
	}
	message := f.message
	if reason == "ImagePullBackOff" {
		message = fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %s", f.image, f.message)
	}
	p.Status.Phase = corev1.PodPending
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	statuses := func(containers []corev1.Container, failing bool) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(containers))
		for _, c := range containers {
			cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
			if failing && c.Name == f.container {
				cs.State = waiting
			}
			out = append(out, cs)
		}
		return out
	}
	p.Status.InitContainerStatuses = statuses(p.Spec.InitContainers, f.init)
	p.Status.ContainerStatuses = statuses(p.Spec.Containers, !f.init)
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: "ContainersNotInitialized",
		Message: fmt.Sprintf("containers with incomplete status: [%s]", f.container)})
	setPodCondition(p, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"})
}

// runContainers reports the init containers completed (sidecars running)
// and every container running and ready; the Pod is Ready when its
// readiness gates are too.
func (h *Hosts) runContainers(p *corev1.Pod, st *podState) {
	started := metav1.Now()
	if p.Status.StartTime != nil {
		started = *p.Status.StartTime
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &started
	if p.Status.PodIP == "" {
		ip := h.podIP(st)
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		p.Status.HostIP = h.nodeAddress(p.Spec.NodeName)
		p.Status.HostIPs = []corev1.HostIP{{IP: p.Status.HostIP}}
	}
	running := func(c corev1.Container) corev1.ContainerStatus {
		for _, old := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if old.Name == c.Name && old.State.Running != nil {
				return old
			}
		}
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
	}
	p.Status.InitContainerStatuses = nil
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, running(c))
			continue
		}
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: started}},
		})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, running(c))
	}
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue})
	setPodCondition(p, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
	setPodCondition(p, readyCondition(p))
}

// readyCondition is the kubelet's Ready: containers ready and every
// readiness gate's condition True.
func readyCondition(p *corev1.Pod) corev1.PodCondition {
	for _, gate := range p.Spec.ReadinessGates {
		found := false
		for _, c := range p.Status.Conditions {
			if c.Type == gate.ConditionType && c.Status == corev1.ConditionTrue {
				found = true
			}
		}
		if !found {
			return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady",
				Message: fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gate.ConditionType)}
		}
	}
	return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
}

// terminated reports the containers ended with the guest: the compute
// container exits 0 after a power-off and 1 when the guest failed, and
// the Pod (restartPolicy Never) ends with it.
func terminated(p *corev1.Pod, g *guest) {
	now := metav1.Now()
	exit := corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}
	p.Status.Phase = corev1.PodSucceeded
	if err := g.guest.Err(); err != nil {
		exit = corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: err.Error(), FinishedAt: now}
		p.Status.Phase = corev1.PodFailed
	}
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		if cs.State.Running != nil {
			exit.StartedAt = cs.State.Running.StartedAt
		}
		cs.State, cs.Ready, cs.Started = corev1.ContainerState{Terminated: exit.DeepCopy()}, false, ptr.To(false)
	}
	setPodCondition(p, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"})
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"})
}

// podIP hands out a Pod address, kept for the Pod.
func (h *Hosts) podIP(st *podState) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st != nil && st.ip != "" {
		return st.ip
	}
	h.nextIP++
	ip := fmt.Sprintf("%s.%d", h.opts.PodCIDRPrefix, 1+(h.nextIP-1)%254)
	if st != nil {
		st.ip = ip
	}
	return ip
}

func (h *Hosts) nodeAddress(node string) string {
	for i, n := range h.opts.Nodes {
		if n.Name == node {
			return fmt.Sprintf("192.168.100.%d", 10+i)
		}
	}
	return ""
}

func (h *Hosts) forgetPod(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pods, uid)
}

func (h *Hosts) guestOf(instance types.UID) *guest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.guests[instance]
}

func stopped(g Guest) bool {
	select {
	case <-g.Done():
		return true
	default:
		return false
	}
}
