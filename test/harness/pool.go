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
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// PoolLabel is the node label the example Kairos pool template's
// KairosConfigTemplate gives every node of a pool, with its POOL_NAME.
const PoolLabel = "node.cozystack.io/pool"

// Pool is what a scenario applies and watches: the example Kairos pool
// template (KairosPoolTemplate, or ScaleFromZeroPoolTemplate when
// Autoscaled) in a workload Cluster. With a Name it is
// that one MachineDeployment, its Machines and the Nodes it labels; without
// one (the template's default pool) it is every Machine of the Cluster and
// every Node of its workload cluster, so that Machines a scenario makes
// otherwise (a ClusterClass topology) count as well.
type Pool struct {
	// Cluster is the workload Cluster.
	Cluster client.ObjectKey
	// Name is the template's POOL_NAME; empty for the template's default
	// and the whole Cluster.
	Name string
	// Autoscaled makes it the autoscaler's pool: its size is between
	// WORKER_MIN_COUNT and WORKER_MAX_COUNT and only a scale changes it.
	Autoscaled bool
}

// The templates' default POOL_NAMEs.
const (
	defaultPoolName           = "kairos"
	defaultAutoscaledPoolName = "burst"
)

// template is the clusterctl template the pool renders.
func (p Pool) template() string {
	if p.Autoscaled {
		return ScaleFromZeroPoolTemplate()
	}
	return KairosPoolTemplate()
}

// Deployment is the key of the pool's MachineDeployment and
// MachineHealthCheck; its Machines, KubeVirtMachines and VMs are named
// after it.
func (p Pool) Deployment() client.ObjectKey {
	name := p.Name
	if name == "" && p.Autoscaled {
		name = defaultAutoscaledPoolName
	} else if name == "" {
		name = defaultPoolName
	}
	return client.ObjectKey{Namespace: p.Cluster.Namespace, Name: p.Cluster.Name + "-" + name}
}

// Render renders the pool's template: the Cluster's name and namespace and
// the pool's name, then each of vars in order (a later map overrides an
// earlier one), so a suite's defaults come first and a scenario's values
// last.
func (p Pool) Render(vars ...map[string]string) ([]unstructured.Unstructured, error) {
	all := map[string]string{"CLUSTER_NAME": p.Cluster.Name, "NAMESPACE": p.Cluster.Namespace}
	if p.Name != "" {
		all["POOL_NAME"] = p.Name
	}
	for _, v := range vars {
		maps.Copy(all, v)
	}
	return RenderTemplate(p.template(), all)
}

// MustRender is Render for a test: it fails tb when the template does not
// render.
func (p Pool) MustRender(tb testing.TB, vars ...map[string]string) []unstructured.Unstructured {
	tb.Helper()
	objs, err := p.Render(vars...)
	if err != nil {
		tb.Fatal(err)
	}
	return objs
}

// PoolMachines lists the pool's Machines, by name.
func (h *Harness) PoolMachines(ctx context.Context, p Pool) ([]clusterv1.Machine, error) {
	selector := client.MatchingLabels{clusterv1.ClusterNameLabel: p.Cluster.Name}
	if p.Name != "" {
		selector[clusterv1.MachineDeploymentNameLabel] = p.Deployment().Name
	}
	list := &clusterv1.MachineList{}
	if err := h.Client.List(ctx, list, client.InNamespace(p.Cluster.Namespace), selector); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// PoolNodes lists the pool's Nodes in the workload cluster.
func (h *Harness) PoolNodes(ctx context.Context, p Pool) ([]corev1.Node, error) {
	w := h.Workload(p.Cluster)
	if w == nil {
		return nil, fmt.Errorf("no workload cluster %s", p.Cluster)
	}
	var opts []client.ListOption
	if p.Name != "" {
		opts = append(opts, client.MatchingLabels{PoolLabel: p.Name})
	}
	list := &corev1.NodeList{}
	if err := w.API.Client.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PoolJoined returns the pool's Machines once the pool has joined with
// exactly n of them: every Machine Running, NodeHealthy and passed by its
// MachineHealthCheck, with providerID kubevirt://<its VM> and a Node named
// after its VM; and exactly n Nodes, each Ready with its Machine's
// providerID and Cluster API's uninitialized taint lifted. Otherwise the
// error says what is not there yet, for a caller that polls.
func (h *Harness) PoolJoined(ctx context.Context, p Pool, n int) ([]clusterv1.Machine, error) {
	ms, err := h.PoolMachines(ctx, p)
	if err != nil {
		return nil, err
	}
	var problems []error
	if len(ms) != n {
		problems = append(problems, fmt.Errorf("%d Machines, want %d", len(ms), n))
	}
	providerIDs := map[string]bool{}
	for i := range ms {
		m := &ms[i]
		vm := m.Spec.InfrastructureRef.Name
		switch {
		case m.Status.Phase != string(clusterv1.MachinePhaseRunning):
			problems = append(problems, fmt.Errorf("machine %s is %s", m.Name, m.Status.Phase))
		case m.Spec.ProviderID != infrav1.ProviderID(vm):
			problems = append(problems, fmt.Errorf("machine %s has providerID %q, want %q", m.Name, m.Spec.ProviderID, infrav1.ProviderID(vm)))
		case m.Status.NodeRef.Name != vm:
			problems = append(problems, fmt.Errorf("machine %s has Node %q, want %q", m.Name, m.Status.NodeRef.Name, vm))
		case !conditions.IsTrue(m, clusterv1.MachineNodeHealthyCondition):
			problems = append(problems, fmt.Errorf("machine %s is not NodeHealthy", m.Name))
		case !conditions.IsTrue(m, clusterv1.MachineHealthCheckSucceededCondition):
			problems = append(problems, fmt.Errorf("the MachineHealthCheck has not passed Machine %s", m.Name))
		}
		providerIDs[m.Spec.ProviderID] = true
	}
	nodes, err := h.PoolNodes(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(nodes) != n {
		problems = append(problems, fmt.Errorf("%d Nodes, want %d", len(nodes), n))
	}
	for _, node := range nodes {
		switch {
		case !NodeReady(node):
			problems = append(problems, fmt.Errorf("node %s is not Ready", node.Name))
		case !providerIDs[node.Spec.ProviderID]:
			problems = append(problems, fmt.Errorf("node %s (providerID %q) belongs to no Machine of the pool", node.Name, node.Spec.ProviderID))
		case hasTaint(node, clusterv1.NodeUninitializedTaint.Key):
			problems = append(problems, fmt.Errorf("node %s keeps the taint %s", node.Name, clusterv1.NodeUninitializedTaint.Key))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("pool %s has not joined with %d machines: %w", p.Deployment().Name, n, errors.Join(problems...))
	}
	return ms, nil
}

func hasTaint(node corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// ScalePool sets the replicas of the pool's MachineDeployment, as the
// cluster-autoscaler or a user does: a merge patch of spec.replicas alone.
func (h *Harness) ScalePool(ctx context.Context, p Pool, replicas int32) error {
	md := &clusterv1.MachineDeployment{}
	if err := h.Client.Get(ctx, p.Deployment(), md); err != nil {
		return err
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = &replicas
	if err := h.Client.Patch(ctx, md, patch); err != nil {
		return fmt.Errorf("scaling MachineDeployment %s to %d: %w", p.Deployment(), replicas, err)
	}
	return nil
}

// DeletePool deletes the pool's MachineDeployment and MachineHealthCheck;
// Cluster API deletes its Machines.
func (h *Harness) DeletePool(ctx context.Context, p Pool) error {
	key := p.Deployment()
	for _, o := range []client.Object{&clusterv1.MachineDeployment{}, &clusterv1.MachineHealthCheck{}} {
		o.SetNamespace(key.Namespace)
		o.SetName(key.Name)
		if err := client.IgnoreNotFound(h.Client.Delete(ctx, o)); err != nil {
			return err
		}
	}
	return nil
}

// PoolJoinTokens lists the names of the bootstrap token Secrets left in
// the workload cluster for the pool's KairosConfigs (JoinTokens); without
// a pool Name, every bootstrap token of the workload cluster.
func (h *Harness) PoolJoinTokens(ctx context.Context, p Pool) ([]string, error) {
	tokens, err := h.JoinTokens(ctx, p.Cluster)
	if err != nil {
		return nil, err
	}
	prefix := p.Deployment().String() + "-"
	var names []string
	for config, secrets := range tokens {
		if p.Name == "" || strings.HasPrefix(config, prefix) {
			names = append(names, secrets...)
		}
	}
	sort.Strings(names)
	return names, nil
}
