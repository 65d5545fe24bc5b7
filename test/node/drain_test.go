//go:build node

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

package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDrainWithExternalEvictionEnds: the test/scenarios
// TestInfrastructureNodeDrainEnds on the real node. The hoster drains the
// node of a joined machine whose VM has eviction strategy External
// (kubectl drain: cordon, then evict every launcher Pod until none is
// left): virt-api denies each eviction and marks the instance for
// evacuation, our provider deletes the Machine, Cluster API drains the
// guest's Node and deletes the VM, virt-launcher shuts the guest down and
// the real kubelet ends the launcher Pod, so the drain ends; the Machine
// and its Node are gone. Once the node is uncordoned, the MachineSet's
// replacement joins.
func TestDrainWithExternalEvictionEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	const namespace = "node-drain"
	k := startKubeVirtNode(ctx, t, namespace)
	c := k.h.Management.Client
	r := k.joinRemediable(ctx, t, namespace, "drained", func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["evictionStrategy"] = "External"
	})
	defer r.guest.keepConsole("guest-console-drained.log")

	setUnschedulable := func(ctx context.Context, unschedulable bool) error {
		var nd corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: k.node.Name}, &nd); err != nil {
			return err
		}
		patched := nd.DeepCopy()
		patched.Spec.Unschedulable = unschedulable
		return c.Patch(ctx, patched, client.MergeFrom(&nd))
	}
	if err := setUnschedulable(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = setUnschedulable(context.Background(), false) })
	drained := time.Now()
	denied, message := 0, ""
	// kubectl drain retries a denied eviction every 5 seconds.
	var evicted time.Time
	if err := waitFor(ctx, 15*time.Minute, func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"}); err != nil {
			return false, err.Error()
		}
		evict := time.Since(evicted) >= 5*time.Second
		if evict {
			evicted = time.Now()
		}
		var left []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName != k.node.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			left = append(left, fmt.Sprintf("%s %s", p.Name, p.Status.Phase))
			if !evict {
				continue
			}
			if err := c.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}); err != nil {
				denied++
				message = err.Error()
			}
		}
		return len(left) == 0, fmt.Sprintf("launcher Pods still on the drained node: %v", left)
	}); err != nil {
		t.Fatalf("the drain did not end: %v\n%s", err, r.guest.logs())
	}
	if denied == 0 {
		t.Fatal("virt-api allowed the evictions; want them denied (eviction strategy External)")
	}
	t.Logf("the drain ended %s after the cordon; evictions virt-api denied: %d (%s)", time.Since(drained).Round(time.Second), denied, message)
	// The Machine was deleted, not remediated: Cluster API drained the
	// guest's Node and deleted it with the Machine.
	nodeName := r.victim.Status.NodeRef.Name
	if err := waitFor(ctx, 10*time.Minute, func() (bool, string) {
		var m clusterv1.Machine
		if err := c.Get(ctx, client.ObjectKeyFromObject(&r.victim), &m); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("Machine %s: %v, deleting since %v", r.victim.Name, err, m.DeletionTimestamp)
		}
		var nd corev1.Node
		if err := k.workload.API.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &nd); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("Node %s: %v, unschedulable %v", nodeName, err, nd.Spec.Unschedulable)
		}
		return true, ""
	}); err != nil {
		t.Fatalf("the drained Machine and its Node are not gone: %v", err)
	}
	t.Logf("Machine %s and its Node %s were gone %s after the cordon", r.victim.Name, nodeName, time.Since(drained).Round(time.Second))
	if err := setUnschedulable(ctx, false); err != nil {
		t.Fatal(err)
	}
	replacementGuest := newGuest(k)
	defer replacementGuest.keepConsole("guest-console-replacement.log")
	replacement := k.waitJoined(ctx, t, r.p, namespace, replacementGuest, &r.victim)
	created := replacement.CreationTimestamp.Time
	t.Logf("Machine %s was replaced by %s, created %s after the cordon and Running with its Node Ready %s after it; its guest's timeline from its creation: %s; load average %s",
		r.victim.Name, replacement.Name, created.Sub(drained).Round(time.Second), time.Since(drained).Round(time.Second),
		replacementGuest.timeline(created), loadAverage())
}
