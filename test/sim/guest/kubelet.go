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

package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// leaseDurationSeconds is the kubelet's nodeLeaseDurationSeconds default.
const leaseDurationSeconds int32 = 40

// Taints the node lifecycle controller puts on a Node whose kubelet stopped
// reporting.
var unreachableTaints = []corev1.Taint{
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
}

// kubelet is a simulated kubelet of one instance. Like a kubelet with
// NodeLease on, it renews its Lease every HeartbeatInterval and posts its
// Node status only when the status changes or NodeStatusReportFrequency
// passed since its last report.
type kubelet struct {
	instance client.ObjectKey
	cluster  *workloadCluster
	node     string
	// conditions are the Node conditions the kubelet last posted; a report
	// posts them again with fresh heartbeat times.
	conditions []corev1.NodeCondition
	// lease is the Lease as the kubelet last wrote it, renewed without
	// reading it back; nil until a renewal succeeds again. Only the
	// heartbeat loop touches it once the kubelet is registered.
	lease *coordinationv1.Lease

	running          bool
	stopped          time.Time
	lastLeaseRenewal time.Time
	lastStatusReport time.Time
	markedUnknown    bool
}

// startKubelet registers (or re-registers) the Node and starts its
// heartbeats.
func (s *Simulator) startKubelet(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, id *joinResult, image Image, storage resource.Quantity) error {
	cs := id.cluster.admin.CoreV1().Nodes()
	desired := s.nodeFor(vmi, id, image, storage)
	node, err := cs.Get(ctx, id.nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		created, err := cs.Create(ctx, &corev1.Node{ObjectMeta: desired.ObjectMeta, Spec: desired.Spec}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("kubelet: registering Node %s: %w", id.nodeName, err)
		}
		node = created
	case err != nil:
		return fmt.Errorf("kubelet: reading Node %s: %w", id.nodeName, err)
	default:
		// A kubelet restarted on a persistent disk finds its Node.
		for k, v := range desired.Labels {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
		}
		if node, err = cs.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("kubelet: updating Node %s: %w", id.nodeName, err)
		}
	}
	node.Status = desired.Status
	if node, err = cs.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubelet: reporting the status of Node %s: %w", id.nodeName, err)
	}
	// The API server taints a new Node not-ready; the node lifecycle
	// controller lifts that once the Node reports Ready.
	if kept := withoutUnreachable(node.Spec.Taints); len(kept) != len(node.Spec.Taints) {
		node.Spec.Taints = kept
		if node, err = cs.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("kubelet: lifting the not-ready taint of Node %s: %w", id.nodeName, err)
		}
	}
	k := &kubelet{
		instance: client.ObjectKeyFromObject(vmi), cluster: id.cluster, node: id.nodeName,
		conditions: node.Status.Conditions, running: true,
	}
	if err := s.renewLease(ctx, k); err != nil {
		return err
	}
	k.lastLeaseRenewal, k.lastStatusReport = time.Now(), time.Now()
	s.mu.Lock()
	s.kubelets[vmi.UID] = k
	s.mu.Unlock()
	return nil
}

// nodeFor is the Node a kubelet registers: the configuration's name,
// providerID, labels and taints, the instance's addresses and the VM's
// capacity.
func (s *Simulator) nodeFor(vmi *kubevirtv1.VirtualMachineInstance, id *joinResult, image Image, storage resource.Quantity) *corev1.Node {
	arch := vmi.Spec.Architecture
	if arch == "" {
		arch = "amd64"
	}
	labels := map[string]string{
		corev1.LabelHostname:      id.nodeName,
		corev1.LabelOSStable:      "linux",
		corev1.LabelArchStable:    arch,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": arch,
	}
	for k, v := range id.labels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourcePods:             *resource.NewQuantity(id.maxPods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: storage,
	}
	cpu := vmi.Spec.Domain.CPU
	cores := int64(1)
	if cpu != nil {
		cores = int64(max(cpu.Sockets, 1) * max(cpu.Cores, 1) * max(cpu.Threads, 1))
	}
	capacity[corev1.ResourceCPU] = *resource.NewQuantity(cores, resource.DecimalSI)
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		capacity[corev1.ResourceMemory] = m.Guest.DeepCopy()
	} else if q, ok := vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; ok {
		capacity[corev1.ResourceMemory] = q.DeepCopy()
	}
	gpus := map[corev1.ResourceName]int64{}
	for _, g := range vmi.Spec.Domain.Devices.GPUs {
		// The device plugin in the guest advertises <vendor>/gpu.
		vendor, _, _ := strings.Cut(g.DeviceName, "/")
		gpus[corev1.ResourceName(vendor+"/gpu")]++
	}
	for name, n := range gpus {
		capacity[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	addresses := []corev1.NodeAddress{}
	for _, iface := range vmi.Status.Interfaces {
		if iface.IP != "" {
			addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: iface.IP})
			break
		}
	}
	addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: id.nodeName})
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   id.nodeName,
			Labels: labels,
			Annotations: map[string]string{
				"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///run/containerd/containerd.sock",
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: id.providerID, Taints: append([]corev1.Taint(nil), id.taints...)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses:   addresses,
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               strings.ReplaceAll(string(vmi.UID), "-", ""),
				SystemUUID:              string(vmi.UID),
				BootID:                  string(vmi.UID),
				KernelVersion:           kernelVersion(image),
				OSImage:                 image.OSImage,
				ContainerRuntimeVersion: "containerd://1.7.27",
				KubeletVersion:          image.KubernetesVersion,
				OperatingSystem:         "linux",
				Architecture:            arch,
			},
		},
	}
}

// kernelVersion is what the image's kernel reports.
func kernelVersion(image Image) string {
	if image.CloudInit {
		return "6.8.0-generic"
	}
	return "6.8.0-kairos"
}

func withoutUnreachable(taints []corev1.Taint) []corev1.Taint {
	out := taints[:0:0]
	for _, t := range taints {
		if t.Key != corev1.TaintNodeUnreachable && t.Key != corev1.TaintNodeNotReady {
			out = append(out, t)
		}
	}
	return out
}

// renewLease renews the node's Lease in kube-node-lease as the kubelet's
// lease controller does: an Update of the Lease it last wrote, without
// reading it first; when that is missing, conflicts or is gone, the Lease
// is read, or created owned by the Node.
func (s *Simulator) renewLease(ctx context.Context, k *kubelet) error {
	leases := k.cluster.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if k.lease != nil {
		lease := k.lease.DeepCopy()
		lease.Spec.RenewTime = &now
		renewed, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil {
			k.lease = renewed
			return nil
		}
		k.lease = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
	}
	lease, err := leases.Get(ctx, k.node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// The Lease is owned by the Node; without the Node there is nothing
		// to own it and the garbage collector would delete it again.
		node, err := k.cluster.admin.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		created, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: k.node, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.node), LeaseDurationSeconds: ptr.To(leaseDurationSeconds), RenewTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		k.lease = created
		return nil
	case err != nil:
		return err
	}
	lease.Spec.RenewTime = &now
	if k.lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		k.lease = nil
		return err
	}
	return nil
}

// reportStatus posts the kubelet's unchanged Node conditions with fresh
// heartbeat times, as the kubelet does once NodeStatusReportFrequency
// passed. Like the kubelet it patches the status, so the Node is not read
// first and writes to its metadata (Cluster API's labels, annotations and
// taints) do not conflict.
func (s *Simulator) reportStatus(ctx context.Context, k *kubelet) error {
	now := metav1.Now()
	conditions := make([]corev1.NodeCondition, len(k.conditions))
	for i, c := range k.conditions {
		c.LastHeartbeatTime = now
		conditions[i] = c
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		return err
	}
	// A kubelet whose Node was deleted does not register again until it
	// restarts: the patch then fails.
	nodes := k.cluster.admin.CoreV1().Nodes()
	node, err := nodes.Patch(ctx, k.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	// The node lifecycle controller lifts the unreachable taints of a Node
	// that reports Ready again: a Node marked Unknown while a new instance
	// already served it would keep them otherwise.
	if kept := withoutUnreachable(node.Spec.Taints); len(kept) != len(node.Spec.Taints) && nodeReady(node) {
		node.Spec.Taints = kept
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
	}
	return err
}

// heartbeats renews the Leases of running kubelets and reports their Node
// status when due, and marks Nodes of stopped kubelets Unknown after the
// grace period.
func (s *Simulator) heartbeats(ctx context.Context) error {
	tick := min(s.opts.HeartbeatInterval, s.opts.NodeStatusReportFrequency, s.opts.NodeMonitorGracePeriod) / 4
	tick = max(tick, 50*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	log := ctrl.LoggerFrom(ctx).WithName("node-simulator")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		type due struct {
			uid           types.UID
			k             *kubelet
			lease, report bool
		}
		var beats, unknown, replaced []due
		s.mu.Lock()
		now := time.Now()
		for uid, k := range s.kubelets {
			switch {
			case k.running:
				d := due{uid: uid, k: k,
					lease:  now.Sub(k.lastLeaseRenewal) >= s.opts.HeartbeatInterval,
					report: now.Sub(k.lastStatusReport) >= s.opts.NodeStatusReportFrequency,
				}
				if d.lease {
					k.lastLeaseRenewal = now
				}
				if d.report {
					k.lastStatusReport = now
				}
				if d.lease || d.report {
					beats = append(beats, d)
				}
			case !k.markedUnknown && now.Sub(k.stopped) >= s.opts.NodeMonitorGracePeriod:
				// The node lifecycle controller judges the Node by its Lease:
				// a new instance's kubelet renewing it keeps the Node Ready.
				if s.nodeServedLocked(k) {
					replaced = append(replaced, due{uid: uid, k: k})
					continue
				}
				k.markedUnknown = true
				unknown = append(unknown, due{uid: uid, k: k})
			}
		}
		for _, d := range replaced {
			delete(s.kubelets, d.uid)
		}
		s.mu.Unlock()
		for _, d := range beats {
			if d.report {
				if err := s.reportStatus(ctx, d.k); err != nil {
					log.V(2).Info("Simulated kubelet could not report its Node status", "node", d.k.node, "reason", err.Error())
				}
			}
			if d.lease {
				if err := s.renewLease(ctx, d.k); err != nil {
					log.V(2).Info("Simulated kubelet could not renew its Lease", "node", d.k.node, "reason", err.Error())
				}
			}
		}
		for _, d := range unknown {
			if err := s.markUnknown(ctx, d.k); err != nil {
				log.V(2).Info("Simulated node lifecycle could not mark the Node unknown", "node", d.k.node, "reason", err.Error())
				s.mu.Lock()
				d.k.markedUnknown = false
				s.mu.Unlock()
				continue
			}
			log.Info("Simulated node lifecycle marked the Node of a stopped instance Unknown", "node", d.k.node)
			s.mu.Lock()
			if s.kubelets[d.uid] == d.k {
				delete(s.kubelets, d.uid)
			}
			// A new instance's kubelet that started while the mark was
			// being written may have reported Ready before it: a real
			// kubelet sees the Node differ from its own status at its
			// next update and reports again, so this one does too.
			s.reportAgainLocked(d.k)
			s.mu.Unlock()
		}
	}
}

// nodeServedLocked reports whether a running kubelet serves the Node of
// the stopped kubelet k. s.mu must be held.
func (s *Simulator) nodeServedLocked(k *kubelet) bool {
	for _, other := range s.kubelets {
		if other.running && other.cluster == k.cluster && other.node == k.node {
			return true
		}
	}
	return false
}

// reportAgainLocked makes every running kubelet that serves the Node of
// the stopped kubelet k report its status at the next tick. s.mu must be
// held.
func (s *Simulator) reportAgainLocked(k *kubelet) {
	for _, other := range s.kubelets {
		if other.running && other.cluster == k.cluster && other.node == k.node {
			other.lastStatusReport = time.Time{}
		}
	}
}

// markUnknown does what the node lifecycle controller does when a kubelet
// stops posting status.
func (s *Simulator) markUnknown(ctx context.Context, k *kubelet) error {
	cs := k.cluster.admin.CoreV1().Nodes()
	node, err := cs.Get(ctx, k.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.", now
	}
	if node, err = cs.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	node.Spec.Taints = append(withoutUnreachable(node.Spec.Taints), unreachableTaints...)
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].Key == corev1.TaintNodeUnreachable && node.Spec.Taints[i].Effect == corev1.TaintEffectNoExecute {
			node.Spec.Taints[i].TimeAdded = &now
		}
	}
	_, err = cs.Update(ctx, node, metav1.UpdateOptions{})
	return err
}
