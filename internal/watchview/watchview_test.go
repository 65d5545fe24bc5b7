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

package watchview

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestMachineUpdatesPassOnlyWhenTheViewChanges walks a Machine through
// what Cluster API writes on its way to Running: the status rewrites
// (phase, conditions, addresses) are filtered, the spec, label and
// deletion changes pass, and creates and deletes always pass.
func TestMachineUpdatesPassOnlyWhenTheViewChanges(t *testing.T) {
	base := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", ResourceVersion: "1", Labels: map[string]string{clusterv1.ClusterNameLabel: "c"}},
		Spec: clusterv1.MachineSpec{ClusterName: "c", Version: "v1.36.0",
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KairosConfig", Name: "w"}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "KubeVirtMachine", Name: "w"}},
	}
	changed := func(change func(*clusterv1.Machine)) *clusterv1.Machine {
		m := base.DeepCopy()
		m.ResourceVersion = "2"
		change(m)
		return m
	}
	p := Changed(func(m *clusterv1.Machine) any { return OfMachine(m) })
	for _, tt := range []struct {
		name string
		new  *clusterv1.Machine
		pass bool
	}{
		{"resync (same object)", base.DeepCopy(), false},
		{"phase", changed(func(m *clusterv1.Machine) { m.Status.Phase = string(clusterv1.MachinePhaseProvisioning) }), false},
		{"conditions mirrored from the providers", changed(func(m *clusterv1.Machine) {
			m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineBootstrapConfigReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.NewTime(time.Unix(1, 0))}}
		}), false},
		{"addresses and initialization", changed(func(m *clusterv1.Machine) {
			m.Status.Addresses = clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.1"}}
			m.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
		}), false},
		{"managed fields and resource version", changed(func(m *clusterv1.Machine) {
			m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "capi"}}
		}), false},
		{"bootstrap data Secret named", changed(func(m *clusterv1.Machine) { m.Spec.Bootstrap.DataSecretName = ptr.To("w") }), true},
		{"providerID", changed(func(m *clusterv1.Machine) { m.Spec.ProviderID = "kubevirt://w" }), true},
		{"failure domain", changed(func(m *clusterv1.Machine) { m.Spec.FailureDomain = "zone-a" }), true},
		{"label", changed(func(m *clusterv1.Machine) { m.Labels["pool"] = "a" }), true},
		{"annotation", changed(func(m *clusterv1.Machine) { m.Annotations = map[string]string{clusterv1.PausedAnnotation: ""} }), true},
		{"deletion", changed(func(m *clusterv1.Machine) { m.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(2, 0))) }), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tt.new})).To(Equal(tt.pass))
		})
	}
	g := NewWithT(t)
	g.Expect(p.Create(event.CreateEvent{Object: base})).To(BeTrue())
	g.Expect(p.Delete(event.DeleteEvent{Object: base})).To(BeTrue())
	// Another type than the view's passes: the view cannot judge it.
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: &clusterv1.Cluster{}, ObjectNew: &clusterv1.Cluster{}})).To(BeTrue())
}

// TestCachedMachineKeepsWhatTheProvidersRead: a Machine as Cluster API
// leaves it Running keeps its metadata (but managedFields), its spec and
// its nodeRef in the cache, so its view and the node's join read the same;
// the rest of the status is dropped. Another type passes unchanged.
func TestCachedMachineKeepsWhatTheProvidersRead(t *testing.T) {
	g := NewWithT(t)
	running := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "u", ResourceVersion: "7", Generation: 2,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: "c", clusterv1.MachineDeploymentNameLabel: "workers"},
			Annotations:     map[string]string{clusterv1.TemplateClonedFromNameAnnotation: "t"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: "workers-x", UID: "ms"}},
			Finalizers:      []string{clusterv1.MachineFinalizer},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "capi"}}},
		Spec: clusterv1.MachineSpec{ClusterName: "c", Version: "v1.36.0", ProviderID: "kubevirt://w", FailureDomain: "zone-a",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("w"), ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KairosConfig", Name: "w"}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "KubeVirtMachine", Name: "w"}},
		Status: clusterv1.MachineStatus{
			NodeRef:    clusterv1.MachineNodeReference{Name: "w-node"},
			Phase:      string(clusterv1.MachinePhaseRunning),
			Addresses:  clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.1"}},
			NodeInfo:   &corev1.NodeSystemInfo{KubeletVersion: "v1.36.0", OSImage: "Kairos"},
			Conditions: []metav1.Condition{{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.NewTime(time.Unix(1, 0))}},
			Initialization: clusterv1.MachineInitializationStatus{
				BootstrapDataSecretCreated: ptr.To(true), InfrastructureProvisioned: ptr.To(true)},
			ObservedGeneration: 2,
		},
	}
	out, err := CachedMachine(running.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	cached := out.(*clusterv1.Machine)

	want := running.DeepCopy()
	want.ManagedFields = nil
	want.Status = clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: "w-node"}}
	g.Expect(cached).To(Equal(want))
	g.Expect(OfMachine(cached)).To(Equal(OfMachine(running)))

	cluster := &clusterv1.Cluster{Status: clusterv1.ClusterStatus{Phase: "Provisioned"}}
	out, err = CachedMachine(cluster.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(cluster))
}

// TestCachedSecretKeepsTheKeysRead: a cached Secret keeps its metadata
// without managedFields and the keys the provider's rule names, each up to
// its limit, or no data; a value over its limit is dropped and named in
// TooLargeAnnotation, which a second transform keeps (informers transform
// an object more than once) and a fixed value clears; other objects pass
// unchanged.
func TestCachedSecretKeepsTheKeysRead(t *testing.T) {
	keep := func(s *corev1.Secret) []KeptKey {
		if s.Name == "read" {
			return []KeptKey{{Name: "value", MaxSize: 4}, {Name: "expiry", MaxSize: 2}}
		}
		return nil
	}
	for _, tc := range []struct {
		name        string
		secret      string
		data        map[string][]byte
		annotations map[string]string
		kept        map[string][]byte
		tooLarge    string
	}{
		{"the keys read are kept", "read", map[string][]byte{"value": []byte("v"), "expiry": []byte("e"), "format": []byte("f")},
			nil, map[string][]byte{"value": []byte("v"), "expiry": []byte("e")}, ""},
		{"a value at its limit is kept", "read", map[string][]byte{"value": []byte("1234")}, nil, map[string][]byte{"value": []byte("1234")}, ""},
		{"a value over its limit is dropped and named", "read", map[string][]byte{"value": []byte("12345"), "expiry": []byte("e")},
			nil, map[string][]byte{"expiry": []byte("e")}, "value"},
		{"every value over its limit is named, sorted", "read", map[string][]byte{"value": []byte("12345"), "expiry": []byte("123")},
			nil, nil, "expiry,value"},
		{"no key read", "read", map[string][]byte{"format": []byte("f")}, nil, nil, ""},
		{"no data", "read", nil, nil, nil, ""},
		{"an unread Secret keeps nothing", "unread", map[string][]byte{"value": []byte("v"), "tls.key": []byte("k")}, nil, nil, ""},
		{"an unread Secret's huge value is not named", "unread", map[string][]byte{"value": []byte("123456789")}, nil, nil, ""},
		{"a writer's annotation over a value within its limit is cleared", "read", map[string][]byte{"value": []byte("v")},
			map[string]string{TooLargeAnnotation: "value"}, map[string][]byte{"value": []byte("v")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			annotations := map[string]string{"a": "b"}
			for k, v := range tc.annotations {
				annotations[k] = v
			}
			in := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: tc.secret, Labels: map[string]string{"l": "v"}, Annotations: annotations,
					ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
				Data:       tc.data,
				StringData: map[string]string{"value": "s"},
			}
			out, err := CachedSecret(in, keep)
			g.Expect(err).NotTo(HaveOccurred())
			s := out.(*corev1.Secret)
			g.Expect(s).To(BeIdenticalTo(in))
			g.Expect(s.ManagedFields).To(BeNil())
			g.Expect(s.Labels).To(Equal(map[string]string{"l": "v"}))
			g.Expect(s.StringData).To(BeNil())
			g.Expect(s.Data).To(Equal(tc.kept))
			wantAnnotations := map[string]string{"a": "b"}
			if tc.tooLarge != "" {
				wantAnnotations[TooLargeAnnotation] = tc.tooLarge
			}
			g.Expect(s.Annotations).To(Equal(wantAnnotations))
			for _, k := range keep(s) {
				g.Expect(DroppedTooLarge(s, k.Name)).To(Equal(strings.Contains(tc.tooLarge, k.Name)), k.Name)
			}
			again, err := CachedSecret(s.DeepCopy(), keep)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(Equal(s), "a second transform changes nothing")
		})
	}
	g := NewWithT(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	out, err := CachedSecret(node, keep)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeIdenticalTo(node))
	g.Expect(node.ManagedFields).To(HaveLen(1))
}
