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

package node

import (
	"context"
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

// Taints the node lifecycle controller puts on a Node whose kubelet stopped
// reporting.
var unreachableTaints = []corev1.Taint{
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
}

// kubelet is a simulated kubelet of one instance.
type kubelet struct {
	instance      client.ObjectKey
	cluster       *workloadCluster
	node          string
	running       bool
	stopped       time.Time
	lastHeartbeat time.Time
	markedUnknown bool
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
	if err := s.renewLease(ctx, id.cluster, node); err != nil {
		return err
	}
	s.mu.Lock()
	s.kubelets[vmi.UID] = &kubelet{
		instance: client.ObjectKeyFromObject(vmi), cluster: id.cluster, node: id.nodeName,
		running: true, lastHeartbeat: time.Now(),
	}
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

// renewLease renews the node's Lease in kube-node-lease, owned by the Node
// as the kubelet makes it.
func (s *Simulator) renewLease(ctx context.Context, c *workloadCluster, node *corev1.Node) error {
	leases := c.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: node.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return client.IgnoreAlreadyExists(err)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// heartbeats renews the Leases and Ready conditions of running kubelets,
// and marks Nodes of stopped kubelets Unknown after the grace period.
func (s *Simulator) heartbeats(ctx context.Context) error {
	tick := min(s.opts.HeartbeatInterval, s.opts.NodeMonitorGracePeriod) / 4
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
			uid types.UID
			k   kubelet
		}
		var beats, unknown []due
		s.mu.Lock()
		for uid, k := range s.kubelets {
			switch {
			case k.running && time.Since(k.lastHeartbeat) >= s.opts.HeartbeatInterval:
				k.lastHeartbeat = time.Now()
				beats = append(beats, due{uid, *k})
			case !k.running && !k.markedUnknown && time.Since(k.stopped) >= s.opts.NodeMonitorGracePeriod:
				k.markedUnknown = true
				unknown = append(unknown, due{uid, *k})
			}
		}
		s.mu.Unlock()
		for _, d := range beats {
			if err := s.heartbeat(ctx, d.k); err != nil {
				log.V(2).Info("Simulated kubelet heartbeat failed", "node", d.k.node, "reason", err.Error())
			}
		}
		for _, d := range unknown {
			if err := s.markUnknown(ctx, d.k); err != nil {
				log.V(2).Info("Simulated node lifecycle could not mark the Node unknown", "node", d.k.node, "reason", err.Error())
				s.mu.Lock()
				if k, ok := s.kubelets[d.uid]; ok {
					k.markedUnknown = false
				}
				s.mu.Unlock()
				continue
			}
			log.Info("Simulated node lifecycle marked the Node of a stopped instance Unknown", "node", d.k.node)
			s.mu.Lock()
			delete(s.kubelets, d.uid)
			s.mu.Unlock()
		}
	}
}

func (s *Simulator) heartbeat(ctx context.Context, k kubelet) error {
	cs := k.cluster.admin.CoreV1().Nodes()
	node, err := cs.Get(ctx, k.node, metav1.GetOptions{})
	if err != nil {
		// A kubelet whose Node was deleted does not register again until
		// it restarts.
		return err
	}
	now := metav1.Now()
	for i := range node.Status.Conditions {
		node.Status.Conditions[i].LastHeartbeatTime = now
	}
	if _, err := cs.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return s.renewLease(ctx, k.cluster, node)
}

// markUnknown does what the node lifecycle controller does when a kubelet
// stops posting status.
func (s *Simulator) markUnknown(ctx context.Context, k kubelet) error {
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
