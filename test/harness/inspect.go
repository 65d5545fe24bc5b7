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

package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PoolState is what a Cluster's machines and nodes look like now.
type PoolState struct {
	// Machines of the Cluster, by name.
	Machines []clusterv1.Machine
	// Phases counts the Machines by phase.
	Phases map[string]int
	// Nodes of the workload cluster.
	Nodes []corev1.Node
	// ReadyNodes counts the Nodes whose Ready condition is True.
	ReadyNodes int
}

// Joined reports whether want Machines are Running with healthy nodes and
// as many Nodes are Ready.
func (s PoolState) Joined(want int) bool {
	if len(s.Machines) != want || s.ReadyNodes != want || len(s.Nodes) != want {
		return false
	}
	for i := range s.Machines {
		m := &s.Machines[i]
		if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
			return false
		}
	}
	return true
}

// Summary is a one-line count of Machines by phase and of Ready Nodes.
func (s PoolState) Summary() string {
	phases := make([]string, 0, len(s.Phases))
	for p := range s.Phases {
		phases = append(phases, p)
	}
	sort.Strings(phases)
	parts := make([]string, 0, len(phases))
	for _, p := range phases {
		parts = append(parts, fmt.Sprintf("%s %d", p, s.Phases[p]))
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	return fmt.Sprintf("machines: %s | nodes ready: %d/%d", strings.Join(parts, ", "), s.ReadyNodes, len(s.Nodes))
}

// State reads the Machines of a Cluster and the Nodes of its workload
// cluster.
func (h *Harness) State(ctx context.Context, key client.ObjectKey) (PoolState, error) {
	s := PoolState{Phases: map[string]int{}}
	list := &clusterv1.MachineList{}
	if err := h.Client.List(ctx, list, client.InNamespace(key.Namespace), clusterLabel(key.Name)); err != nil {
		return s, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	s.Machines = list.Items
	for _, m := range list.Items {
		phase := m.Status.Phase
		if phase == "" {
			phase = string(clusterv1.MachinePhasePending)
		}
		s.Phases[phase]++
	}
	if w := h.Workload(key); w != nil {
		nodes := &corev1.NodeList{}
		if err := w.API.Client.List(ctx, nodes); err != nil {
			return s, err
		}
		s.Nodes = nodes.Items
		for _, n := range nodes.Items {
			if NodeReady(n) {
				s.ReadyNodes++
			}
		}
	}
	return s, nil
}

// NodeReady reports whether a Node's Ready condition is True.
func NodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Describe summarizes a Cluster's Machines (with the conditions that are
// not True and what the node simulator saw of their boots), VMs (in the
// infrastructure cluster) and Nodes, for failure messages and the
// sandbox's timeout report.
func (h *Harness) Describe(ctx context.Context, key client.ObjectKey) string {
	var b strings.Builder
	s, err := h.State(ctx, key)
	if err != nil {
		fmt.Fprintf(&b, "reading the state of %s: %v\n", key, err)
	}
	sim := h.infrastructure().Nodes
	for _, m := range s.Machines {
		fmt.Fprintf(&b, "Machine %s phase=%s node=%s", m.Name, m.Status.Phase, m.Status.NodeRef.Name)
		for _, c := range m.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				fmt.Fprintf(&b, " [%s=%s %s: %s]", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		if sim == nil {
			b.WriteString("\n")
			continue
		}
		if r, ok := sim.Boot(client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}); ok {
			fmt.Fprintf(&b, " boot=%s", r.Phase)
			if r.Error != "" {
				fmt.Fprintf(&b, " (%s)", r.Error)
			}
		}
		b.WriteString("\n")
	}
	vms := &kubevirtv1.VirtualMachineList{}
	if err := h.infrastructure().Client.List(ctx, vms, client.InNamespace(key.Namespace)); err == nil {
		for _, vm := range vms.Items {
			fmt.Fprintf(&b, "VirtualMachine %s %s\n", vm.Name, vm.Status.PrintableStatus)
		}
	}
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, "Node %s ready=%v providerID=%s taints=%v\n", n.Name, NodeReady(n), n.Spec.ProviderID, n.Spec.Taints)
	}
	// The Machines already replaced are gone: what the health check and
	// the infrastructure said of them is the history.
	for _, history := range []struct {
		what string
		hist *ConditionHistory
	}{{"health check verdict", h.verdicts}, {"infrastructure failure", h.infrastructureFailures}} {
		if history.hist == nil {
			continue
		}
		for _, state := range history.hist.WithIn(key.Namespace, metav1.ConditionFalse) {
			fmt.Fprintf(&b, "Machine %s: %s\n", history.what, state)
		}
	}
	return b.String()
}
