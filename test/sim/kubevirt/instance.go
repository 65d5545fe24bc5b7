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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

// reconcileInstance plays virt-controller, the scheduler and virt-handler
// for one VirtualMachineInstance.
func (s *Simulator) reconcileInstance(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	s.mu.Lock()
	p := s.instanceLocked(vmi)
	if !vmi.DeletionTimestamp.IsZero() && p.deleting.IsZero() {
		p.deleting = time.Now()
	}
	state := *p
	s.mu.Unlock()

	desired := vmi.DeepCopy()
	var requeue time.Duration
	switch {
	case !vmi.DeletionTimestamp.IsZero():
		if !kubevirtstatus.Finished(vmi) {
			s.stop(desired, kubevirtv1.Succeeded, "", "VMI was deleted; the guest shut down")
		}
		if time.Since(state.deleting) >= s.opts.ShutdownDelay {
			controllerutil.RemoveFinalizer(desired, kubevirtv1.VirtualMachineControllerFinalizer)
			controllerutil.RemoveFinalizer(desired, kubevirtv1.VirtualMachineInstanceFinalizer)
			controllerutil.RemoveFinalizer(desired, kubevirtv1.DeprecatedVirtualMachineInstanceFinalizer)
		} else {
			requeue = after(state.deleting, s.opts.ShutdownDelay)
		}
	case kubevirtstatus.Finished(vmi):
		// A finished instance never runs again; KubeVirt replaces it.
	case state.crashed != "":
		s.stop(desired, kubevirtv1.Failed, "GuestCrashed", state.crashed)
		ctrl.LoggerFrom(ctx).Info("Simulated VirtualMachineInstance crashed", "reason", state.crashed)
	case state.neverScheduled:
		s.markUnschedulable(desired, fmt.Sprintf("0/%d nodes are available: %d Insufficient memory. preemption: 0/%d nodes are available: %d No preemption victims found for incoming pod.",
			len(s.opts.Nodes), len(s.opts.Nodes), len(s.opts.Nodes), len(s.opts.Nodes)))
	case time.Since(state.created) < s.opts.ScheduleDelay:
		kubevirtstatus.SetPhase(desired, kubevirtv1.Pending)
		requeue = after(state.created, s.opts.ScheduleDelay)
	case state.node == "":
		node, ok := s.schedule(vmi)
		if !ok {
			s.markUnschedulable(desired, fmt.Sprintf("0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector.", len(s.opts.Nodes), len(s.opts.Nodes)))
			requeue = s.opts.ScheduleDelay
			break
		}
		s.mu.Lock()
		p.node, p.scheduled = node, time.Now()
		s.mu.Unlock()
		s.scheduled(desired, node)
		requeue = s.opts.BootDelay
	case time.Since(state.scheduled) < s.opts.BootDelay:
		s.scheduled(desired, state.node)
		requeue = after(state.scheduled, s.opts.BootDelay)
	default:
		s.running(desired, state)
	}

	if equality.Semantic.DeepEqual(vmi, desired) {
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
	// VirtualMachineInstances have no status subresource: KubeVirt writes
	// the whole object.
	if err := s.client.Patch(ctx, desired, client.MergeFrom(vmi)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if desired.Status.Phase != vmi.Status.Phase {
		ctrl.LoggerFrom(ctx).V(2).Info("Simulated VirtualMachineInstance phase changed", "phase", desired.Status.Phase, "node", desired.Status.NodeName)
	}
	if kubevirtstatus.Finished(desired) && !kubevirtstatus.Finished(vmi) {
		s.mu.Lock()
		p.stopped = time.Now()
		s.mu.Unlock()
	}
	if len(desired.Finalizers) == 0 {
		s.mu.Lock()
		delete(s.instances, vmi.UID)
		s.mu.Unlock()
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// instanceLocked returns the instance's process, creating it (and deciding
// its faults) on first sight. s.mu must be held.
func (s *Simulator) instanceLocked(vmi *kubevirtv1.VirtualMachineInstance) *instanceProcess {
	if p, ok := s.instances[vmi.UID]; ok {
		return p
	}
	p := &instanceProcess{created: time.Now()}
	p.neverScheduled = s.claim(&s.unschedulable, vmi) != nil
	s.instances[vmi.UID] = p
	return p
}

func (s *Simulator) markUnschedulable(vmi *kubevirtv1.VirtualMachineInstance, message string) {
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Scheduling)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtstatus.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
	})
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: "PodNotExists", Message: "virt-launcher pod has not yet been scheduled",
	})
}

func (s *Simulator) scheduled(vmi *kubevirtv1.VirtualMachineInstance, node string) {
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Scheduled)
	kubevirtstatus.PlaceOn(vmi, node)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: "GuestNotRunning", Message: "Guest VM is not reported as running",
	})
}

func (s *Simulator) running(vmi *kubevirtv1.VirtualMachineInstance, state instanceProcess) {
	if vmi.Status.Phase != kubevirtv1.Running {
		// Report Scheduled on the way, as virt-handler does before the
		// guest runs.
		kubevirtstatus.SetPhase(vmi, kubevirtv1.Scheduled)
	}
	kubevirtstatus.SetPhase(vmi, kubevirtv1.Running)
	kubevirtstatus.PlaceOn(vmi, state.node)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue})
	if len(vmi.Status.Interfaces) > 0 {
		return
	}
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		ip := s.address(vmi, i)
		vmi.Status.Interfaces = append(vmi.Status.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{
			Name:          iface.Name,
			InterfaceName: fmt.Sprintf("eth%d", i),
			IP:            ip,
			IPs:           []string{ip},
			MAC:           fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", i, len(ip), ip[len(ip)-2], ip[len(ip)-1]),
			InfoSource:    "domain, guest-agent",
			QueueCount:    1,
		})
	}
}

func (s *Simulator) stop(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, reason, message string) {
	kubevirtstatus.SetPhase(vmi, phase)
	kubevirtstatus.SetInstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: reason, Message: message,
	})
}

// address hands out an address for the instance's i-th interface, stable
// for the instance.
func (s *Simulator) address(vmi *kubevirtv1.VirtualMachineInstance, i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.instanceLocked(vmi)
	if i == 0 && p.ip != "" {
		return p.ip
	}
	s.nextIP++
	ip := fmt.Sprintf("%s.%d", s.opts.PodCIDRPrefix, 1+(s.nextIP-1)%254)
	if i == 0 {
		p.ip = ip
	}
	return ip
}

// schedule picks the next infrastructure node, round robin, that satisfies
// the instance's node selector and required node affinity.
func (s *Simulator) schedule(vmi *kubevirtv1.VirtualMachineInstance) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.opts.Nodes {
		n := s.opts.Nodes[(s.nextNode+i)%len(s.opts.Nodes)]
		if fits(vmi, n) {
			s.nextNode = (s.nextNode + i + 1) % len(s.opts.Nodes)
			return n.Name, true
		}
	}
	return "", false
}

func fits(vmi *kubevirtv1.VirtualMachineInstance, n InfraNode) bool {
	nodeLabels := labels.Set(n.Labels)
	if !labels.SelectorFromSet(vmi.Spec.NodeSelector).Matches(nodeLabels) {
		return false
	}
	a := vmi.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	// Terms are ORed; the expressions of a term are ANDed.
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n, nodeLabels) {
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

func termMatches(term corev1.NodeSelectorTerm, n InfraNode, nodeLabels labels.Set) bool {
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
		if err != nil || !r.Matches(labels.Set{"metadata.name": n.Name}) {
			return false
		}
	}
	return true
}
