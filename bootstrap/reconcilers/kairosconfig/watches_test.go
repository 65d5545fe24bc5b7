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

package kairosconfig

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// TestMachineEventsAConfigReads: of its Machine's status a config reads
// only the nodeRef (the node joined, the token goes); Cluster API's other
// status rewrites reconcile no config (the rest of the view:
// internal/watchview).
func TestMachineEventsAConfigReads(t *testing.T) {
	g := NewWithT(t)
	p := watchview.Changed(machineView)
	old := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns"}, Spec: clusterv1.MachineSpec{ClusterName: "c"}}
	conditions := old.DeepCopy()
	conditions.Status.Phase = string(clusterv1.MachinePhaseRunning)
	conditions.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineNodeHealthyCondition, Status: metav1.ConditionTrue, Reason: "NodeHealthy"}}
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: conditions})).To(BeFalse())
	joined := conditions.DeepCopy()
	joined.Status.NodeRef = clusterv1.MachineNodeReference{Name: "w"}
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: conditions, ObjectNew: joined})).To(BeTrue())
	named := old.DeepCopy()
	named.Spec.Bootstrap.DataSecretName = ptr.To("w")
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: named})).To(BeTrue())
}

// TestNodeEventsThatCanMeanAJoin: of a workload Node's events only its
// creation and a change of providerID can tell that a node joined; the
// kubelet's status reports, every 10 s to 5 min per Node, must not wake
// the reconciler.
func TestNodeEventsThatCanMeanAJoin(t *testing.T) {
	node := func(providerID string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "vm-0", ResourceVersion: string(ready)},
			Spec:       corev1.NodeSpec{ProviderID: providerID},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
		}
	}
	p := nodeRegistered()
	cases := []struct {
		name  string
		event func() bool
		want  bool
	}{
		{"a Node registers", func() bool {
			return p.Create(event.CreateEvent{Object: node("kubevirt://vm-0", corev1.ConditionFalse)})
		}, true},
		{"a Node registers without a providerID", func() bool { return p.Create(event.CreateEvent{Object: node("", corev1.ConditionFalse)}) }, true},
		{"a Node gets its providerID", func() bool {
			return p.Update(event.UpdateEvent{ObjectOld: node("", corev1.ConditionFalse), ObjectNew: node("kubevirt://vm-0", corev1.ConditionFalse)})
		}, true},
		{"a kubelet reports its status", func() bool {
			return p.Update(event.UpdateEvent{ObjectOld: node("kubevirt://vm-0", corev1.ConditionFalse), ObjectNew: node("kubevirt://vm-0", corev1.ConditionTrue)})
		}, false},
		{"a Node is deleted", func() bool { return p.Delete(event.DeleteEvent{Object: node("kubevirt://vm-0", corev1.ConditionTrue)}) }, false},
		{"a periodic resync", func() bool {
			return p.Generic(event.GenericEvent{Object: node("kubevirt://vm-0", corev1.ConditionTrue)})
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.event()).To(Equal(tc.want))
		})
	}
}

// TestEventMappersLookUpByIndex: a Node finds the KairosConfig of the
// Machine whose infrastructure machine (the VM) it is, and a Secret the
// configs whose files read it, through the field indexes, among other
// Machines and configs of the same cluster.
func TestEventMappersLookUpByIndex(t *testing.T) {
	g := NewWithT(t)
	const ns, cluster = "pool", "workload"
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	machine := func(name, vm string) *clusterv1.Machine {
		return &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: clusterv1.MachineSpec{
				ClusterName:       cluster,
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cozystack.io", Kind: "KubeVirtMachine", Name: vm},
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name,
				}},
			},
		}
	}
	config := func(name string, secrets ...string) *bootstrapv1.KairosConfig {
		c := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		for i, s := range secrets {
			c.Spec.Files = append(c.Spec.Files, bootstrapv1.File{
				Path:        "/etc/f" + string(rune('a'+i)),
				ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: s, Key: "k"}},
			})
		}
		return c
	}
	objects := []client.Object{
		machine("m-0", "vm-0"), machine("m-1", "vm-1"), machine("m-2", "vm-2"),
		config("m-0", "shared", "only-0", "shared"), config("m-1", "shared"), config("m-2"),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).
		WithIndex(&clusterv1.Machine{}, machineInfrastructureField, machineInfrastructureName).
		WithIndex(&bootstrapv1.KairosConfig{}, configFileSecretsField, configFileSecrets).
		Build()
	r := &Reconciler{Client: c}
	ctx := context.Background()
	req := func(name string) ctrl.Request {
		return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}

	toConfig := r.nodeToKairosConfig(client.ObjectKey{Namespace: ns, Name: cluster})
	g.Expect(toConfig(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-1"}})).To(ConsistOf(req("m-1")), "by the Node's name")
	g.Expect(toConfig(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "renamed"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://vm-2"}})).
		To(ConsistOf(req("m-2")), "by the Node's providerID")
	g.Expect(toConfig(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "control-plane-0"}})).To(BeEmpty())

	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	}
	g.Expect(r.secretToKairosConfigs(ctx, secret("shared"))).To(ConsistOf(req("m-0"), req("m-1")))
	g.Expect(r.secretToKairosConfigs(ctx, secret("only-0"))).To(ConsistOf(req("m-0")))
	g.Expect(r.secretToKairosConfigs(ctx, secret("m-2"))).To(BeEmpty(), "the bootstrap data Secret is read by no config")
	g.Expect(configFileSecrets(config("m-0", "shared", "only-0", "shared"))).To(Equal([]string{"shared", "only-0"}))
}

// TestNodeGettingItsProviderIDRevokesTheToken: a Node registered under the
// VM's name without a providerID is not the Machine's node yet; the token
// stays until the providerID appears, and then the Node's update alone
// revokes it (the token lives an hour, so no refresh requeue does).
func TestNodeGettingItsProviderIDRevokesTheToken(t *testing.T) {
	startController(t, time.Hour)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "late-id-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late-id-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })
	g.Consistently(func() error { _, err := workloadToken(tok.ID); return err }, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.ProviderID = infrav1.ProviderID("late-id-vm")
	g.Expect(workload.Client.Patch(suiteCtx, node, patch)).To(Succeed())
	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, eventually, 100*time.Millisecond).Should(BeTrue())
	g.Eventually(func() bool { _, found := f.storedToken(w); return found }, eventually, 100*time.Millisecond).Should(BeFalse())
}
