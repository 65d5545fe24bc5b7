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
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/klog/v2"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// podNodeNameField indexes Pods by the node they are bound to.
const podNodeNameField = "spec.nodeName"

// unschedulableRetry is how often a pending Pod that fits nowhere is tried
// again, as the scheduler retries unschedulable Pods when the cluster
// changes.
const unschedulableRetry = 2 * time.Second

// reconcilePending plays the scheduler for a Pod without a node: it binds
// the Pod to the first node, in name order, that admits it, or reports why
// none does.
func (h *Hosts) reconcilePending(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := h.client.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() || len(pod.Spec.SchedulingGates) > 0 {
		return reconcile.Result{}, nil
	}
	if wait := h.opts.ScheduleDelay - time.Since(pod.CreationTimestamp.Time); wait > 0 && wait <= h.opts.ScheduleDelay {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	st := h.launcherPodState(ctx, pod)
	nodes := &corev1.NodeList{}
	if err := h.client.List(ctx, nodes); err != nil {
		return reconcile.Result{}, err
	}
	var message string
	if st != nil && st.neverSchedule {
		message = fmt.Sprintf("0/%d nodes are available: %d Insufficient memory. preemption: 0/%d nodes are available: %d No preemption victims found for incoming pod.",
			len(nodes.Items), len(nodes.Items), len(nodes.Items), len(nodes.Items))
	} else {
		node, why, err := h.pickNode(ctx, pod, nodes.Items)
		if err != nil {
			return reconcile.Result{}, err
		}
		if node != "" {
			binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
			if err := h.client.SubResource("binding").Create(ctx, pod, binding); err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					return reconcile.Result{}, nil
				}
				return reconcile.Result{}, fmt.Errorf("binding Pod %s to node %s: %w", pod.Name, node, err)
			}
			ctrl.LoggerFrom(ctx).V(2).Info("Scheduler stand-in bound a Pod", "node", node)
			return reconcile.Result{}, nil
		}
		message = why
	}
	return reconcile.Result{RequeueAfter: unschedulableRetry}, h.markUnschedulable(ctx, pod, message)
}

// markUnschedulable writes the PodScheduled condition the scheduler writes
// for a Pod no node admits.
func (h *Hosts) markUnschedulable(ctx context.Context, pod *corev1.Pod, message string) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message == message {
			return nil
		}
	}
	updated := pod.DeepCopy()
	setPodCondition(updated, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message})
	return client.IgnoreNotFound(h.client.Status().Patch(ctx, updated, client.StrategicMergeFrom(pod)))
}

// pickNode returns the first node that admits the Pod, or the scheduler's
// message for why none does.
func (h *Hosts) pickNode(ctx context.Context, pod *corev1.Pod, nodes []corev1.Node) (string, string, error) {
	if why, err := h.claimsProblem(ctx, pod); err != nil || why != "" {
		return "", why, err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	reasons := map[string]int{}
	for i := range nodes {
		n := &nodes[i]
		// The cache's objects are only read here.
		bound := &corev1.PodList{}
		if err := h.client.List(ctx, bound, client.MatchingFields{podNodeNameField: n.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return "", "", err
		}
		why := h.misfit(pod, n, bound.Items)
		if len(why) == 0 {
			return n.Name, "", nil
		}
		for _, r := range why {
			reasons[r]++
		}
	}
	parts := make([]string, 0, len(reasons))
	for r, count := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", count, r))
	}
	sort.Strings(parts)
	return "", fmt.Sprintf("0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.",
		len(nodes), strings.Join(parts, ", "), len(nodes), len(nodes)), nil
}

// claimsProblem is the scheduler's volume binding check: every claim the
// Pod mounts exists and is bound.
func (h *Hosts) claimsProblem(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := h.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("0/%d nodes are available: persistentvolumeclaim %q not found. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.",
				len(h.opts.Nodes), pvc.Name, len(h.opts.Nodes), len(h.opts.Nodes)), nil
		}
		if err != nil {
			return "", err
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return fmt.Sprintf("0/%d nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.",
				len(h.opts.Nodes), len(h.opts.Nodes), len(h.opts.Nodes)), nil
		}
	}
	return "", nil
}

// misfit lists why the node does not admit the Pod, in the scheduler's
// words; empty when it does.
func (h *Hosts) misfit(pod *corev1.Pod, node *corev1.Node, pods []corev1.Pod) []string {
	var why []string
	if node.Spec.Unschedulable {
		why = append(why, "node(s) were unschedulable")
	}
	if !nodeReady(node) {
		why = append(why, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }")
	}
	if !matchesNode(pod, node) {
		why = append(why, "node(s) didn't match Pod's node affinity/selector")
	}
	for _, t := range node.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for _, tol := range pod.Spec.Tolerations {
			if tol.ToleratesTaint(klog.Background(), &t, false) {
				tolerated = true
			}
		}
		if !tolerated {
			why = append(why, fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value))
		}
	}
	used := corev1.ResourceList{}
	count := 0
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		count++
		addResources(used, podRequests(p))
	}
	if int64(count+1) > node.Status.Allocatable.Pods().Value() {
		why = append(why, "Too many pods")
	}
	for name, want := range podRequests(pod) {
		have, ok := node.Status.Allocatable[name]
		left := have.DeepCopy()
		left.Sub(used[name])
		if !ok || left.Cmp(want) < 0 {
			why = append(why, "Insufficient "+string(name))
		}
	}
	return why
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRequests is what the scheduler reserves for a Pod: the sum of its
// containers and sidecars, or its largest init container if that is more.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		addResources(sum, c.Resources.Requests)
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addResources(sum, c.Resources.Requests)
		}
	}
	for _, c := range p.Spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur, ok := sum[name]; !ok || cur.Cmp(q) < 0 {
				sum[name] = q.DeepCopy()
			}
		}
	}
	return sum
}

func addResources(into, add corev1.ResourceList) {
	for name, q := range add {
		cur := into[name]
		if cur.IsZero() {
			cur = resource.Quantity{}
		}
		cur.Add(q)
		into[name] = cur
	}
}

// matchesNode checks the Pod's node selector and required node affinity.
func matchesNode(pod *corev1.Pod, n *corev1.Node) bool {
	nodeLabels := labels.Set(n.Labels)
	if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(nodeLabels) {
		return false
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	// Terms are ORed; the expressions of a term are ANDed.
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n.Name, nodeLabels) {
			return true
		}
	}
	return false
}

var nodeSelectorOperators = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn:           selection.In,
	corev1.NodeSelectorOpNotIn:        selection.NotIn,
	corev1.NodeSelectorOpExists:       selection.Exists,
	corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt:           selection.GreaterThan,
	corev1.NodeSelectorOpLt:           selection.LessThan,
}

func termMatches(term corev1.NodeSelectorTerm, nodeName string, nodeLabels labels.Set) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, e := range term.MatchExpressions {
		op, ok := nodeSelectorOperators[e.Operator]
		if !ok {
			return false
		}
		r, err := labels.NewRequirement(e.Key, op, e.Values)
		if err != nil || !r.Matches(nodeLabels) {
			return false
		}
	}
	for _, f := range term.MatchFields {
		if f.Key != "metadata.name" {
			return false
		}
		r, err := labels.NewRequirement("metadata.name", nodeSelectorOperators[f.Operator], f.Values)
		if err != nil || !r.Matches(labels.Set{"metadata.name": nodeName}) {
			return false
		}
	}
	return true
}

// setPodCondition sets c, moving its transition time only when its status
// changed.
func setPodCondition(p *corev1.Pod, c corev1.PodCondition) {
	now := metav1.Now()
	for i, old := range p.Status.Conditions {
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		p.Status.Conditions[i] = c
		return
	}
	c.LastTransitionTime = now
	p.Status.Conditions = append(p.Status.Conditions, c)
}

// instanceOf returns the instance a launcher Pod runs, from the cache; nil
// for other Pods or when it is gone.
func (h *Hosts) instanceOf(ctx context.Context, pod *corev1.Pod) *kubevirtv1.VirtualMachineInstance {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "VirtualMachineInstance" {
		return nil
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, vmi); err != nil || vmi.UID != owner.UID {
		return nil
	}
	return vmi
}

// launcherPodState returns what the kubelets keep of a launcher Pod,
// deciding its faults (from its instance) on first sight; nil for other
// Pods.
func (h *Hosts) launcherPodState(ctx context.Context, pod *corev1.Pod) *podState {
	if pod.Labels[kubevirtv1.AppLabel] != "virt-launcher" {
		return nil
	}
	h.mu.Lock()
	st, ok := h.pods[pod.UID]
	h.mu.Unlock()
	if ok {
		return st
	}
	st = &podState{created: time.Now()}
	if vmi := h.instanceOf(ctx, pod); vmi != nil {
		st.neverSchedule = h.unschedulable.Claim(vmi) != nil
		if h.pullFailures.Claim(vmi) != nil {
			st.pullFailure = "injected"
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if existing, ok := h.pods[pod.UID]; ok {
		return existing
	}
	h.pods[pod.UID] = st
	return st
}
