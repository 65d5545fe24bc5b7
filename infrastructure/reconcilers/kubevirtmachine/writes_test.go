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

package kubevirtmachine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
)

// sentWrites counts what a fake API server was sent, by kind of write.
type sentWrites struct{ create, patch, statusPatch int }

// countingClient is a fake API server holding objs that counts the writes
// it is sent.
func countingClient(t *testing.T, sent *sentWrites, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, kubevirtv1.AddToScheme, cdiv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&infrav1.KubeVirtMachine{}).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				sent.create++
				return c.Create(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				sent.patch++
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, subResource string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				sent.statusPatch++
				return c.SubResource(subResource).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
}

// TestPatchHelperWrites pins what a reconcile's changes cost through
// Cluster API's patch helper: the conditions we own in a patch of their
// own, then metadata and spec, then the rest of the status, each only when
// it changed. A merge patch of the whole status would send one status
// patch where the helper sends two.
func TestPatchHelperWrites(t *testing.T) {
	machine := func() *infrav1.KubeVirtMachine {
		return &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Generation: 2,
			Finalizers: []string{infrav1.MachineFinalizer}},
			Spec: infrav1.KubeVirtMachineSpec{ProviderID: infrav1.ProviderID("w")}}
	}
	read := func(g Gomega, c client.Client) (*infrav1.KubeVirtMachine, *patch.Helper) {
		kvm := &infrav1.KubeVirtMachine{}
		g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "w"}, kvm)).To(Succeed())
		h, err := patch.NewHelper(kvm, c)
		g.Expect(err).NotTo(HaveOccurred())
		return kvm, h
	}
	provisionedConditions := []metav1.Condition{
		condition(infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.ContainerDiskReason, "Root disk is the container disk img"),
		condition(infrav1.VirtualMachineProvisionedCondition, metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-a"),
	}

	t.Run("conditions, then the provisioned fields", func(t *testing.T) {
		g := NewWithT(t)
		var sent sentWrites
		c := countingClient(t, &sent, machine())
		kvm, h := read(g, c)
		setConditions(kvm, provisionedConditions...)
		kvm.Status.Initialization.Provisioned = ptr.To(true)
		kvm.Status.NodeName = "infra-a"
		g.Expect(patchKubeVirtMachine(context.Background(), h, kvm, true)).To(Succeed())
		g.Expect(sent).To(Equal(sentWrites{statusPatch: 2}))

		stored, h := read(g, c)
		g.Expect(stored.Status.ObservedGeneration).To(Equal(stored.Generation))
		g.Expect(stored.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(stored.Status.NodeName).To(Equal("infra-a"))
		g.Expect(conditionOf(stored, infrav1.ReadyCondition)).To(HaveField("Status", metav1.ConditionTrue))

		// The next reconcile that sees the same state sends nothing.
		setConditions(stored, provisionedConditions...)
		g.Expect(patchKubeVirtMachine(context.Background(), h, stored, true)).To(Succeed())
		g.Expect(sent).To(Equal(sentWrites{statusPatch: 2}))
	})

	t.Run("a failed reconcile does not record the generation as observed", func(t *testing.T) {
		g := NewWithT(t)
		var sent sentWrites
		c := countingClient(t, &sent, machine())
		kvm, h := read(g, c)
		setConditions(kvm, provisionedConditions...)
		g.Expect(patchKubeVirtMachine(context.Background(), h, kvm, false)).To(Succeed())
		g.Expect(sent).To(Equal(sentWrites{statusPatch: 1}))
		stored, _ := read(g, c)
		g.Expect(stored.Status.ObservedGeneration).To(BeZero())
	})

	t.Run("releasing the last finalizer: the conditions, then the finalizer, and no status patch after it", func(t *testing.T) {
		g := NewWithT(t)
		var sent sentWrites
		deleting := machine()
		deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		// Observed already, as by the reconciles before deletion.
		deleting.Status.ObservedGeneration = deleting.Generation
		c := countingClient(t, &sent, deleting)
		kvm, h := read(g, c)
		setConditions(kvm, deletingConditions(nil)...)
		kvm.Finalizers = nil
		g.Expect(patchKubeVirtMachine(context.Background(), h, kvm, true)).To(Succeed())
		g.Expect(sent).To(Equal(sentWrites{statusPatch: 1, patch: 1}))
		err := c.Get(context.Background(), client.ObjectKeyFromObject(kvm), &infrav1.KubeVirtMachine{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the machine is gone")
	})
}

// TestProviderIDAlone: the providerID goes out in one spec patch of its
// own, with no condition and no observedGeneration that would record the
// generation it replaces.
func TestProviderIDAlone(t *testing.T) {
	g := NewWithT(t)
	var sent sentWrites
	c := countingClient(t, &sent, &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w",
		Finalizers: []string{infrav1.MachineFinalizer}}})
	kvm := &infrav1.KubeVirtMachine{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "w"}, kvm)).To(Succeed())
	h, err := patch.NewHelper(kvm, c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fillProviderID(context.Background(), h, kvm)).To(Succeed())
	g.Expect(sent).To(Equal(sentWrites{patch: 1}))
	stored := &infrav1.KubeVirtMachine{}
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvm), stored)).To(Succeed())
	g.Expect(stored.Spec.ProviderID).To(Equal("kubevirt://w"))
	g.Expect(stored.Status.Conditions).To(BeEmpty())
	g.Expect(stored.Status.ObservedGeneration).To(BeZero())
}

// TestCreatedVirtualMachineNotCachedYet: a reconcile right after the one
// that created the machine's VM, on a cache that has not seen the VM yet,
// reads it from the API server instead of creating it again.
func TestCreatedVirtualMachineNotCachedYet(t *testing.T) {
	g := NewWithT(t)
	var sent sentWrites
	kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "kvm-uid"}}
	kvm.SetGroupVersionKind(infrav1.GroupVersion.WithKind("KubeVirtMachine"))
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: infrav1.GroupVersion.String(), Kind: "KubeVirtMachine", Name: "w", UID: "kvm-uid", Controller: ptr.To(true)}}}}
	live := countingClient(t, &sent, vm)
	stale := countingClient(t, &sentWrites{})
	r := &Reconciler{Client: cachedClient{Client: live, cache: stale}, APIReader: live,
		Infrastructure: &infracluster.Cluster{Client: cachedClient{Client: live, cache: stale}, Reader: live}}
	key := client.ObjectKeyFromObject(kvm)
	r.createdVMs.Wrote(key, key.Name)

	got, blocker, err := r.ensureVirtualMachine(context.Background(), &scope{kubeVirtMachine: kvm})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(blocker).To(BeNil())
	g.Expect(got).To(HaveField("Name", "w"))
	g.Expect(sent).To(Equal(sentWrites{}))

	// Once the cache has it, the record goes.
	r.Infrastructure.Client = cachedClient{Client: live, cache: live}
	_, _, err = r.ensureVirtualMachine(context.Background(), &scope{kubeVirtMachine: kvm})
	g.Expect(err).NotTo(HaveOccurred())
	recorded := r.createdVMs.Pending(key, key.Name)
	g.Expect(recorded).To(BeFalse())
}

// apiServerReader reads as client-go's REST client does: the API server's
// JSON is decoded into the object it is given, not into a zero one, so
// what the JSON lacks keeps the object's old value.
type apiServerReader struct{ client.Reader }

func (r apiServerReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	stored := newLike(obj)
	if err := r.Reader.Get(ctx, key, stored, opts...); err != nil {
		return err
	}
	data, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, obj)
}

// TestAnotherObjectOfTheSameNameIsNotTakenForOurs: a create answered
// AlreadyExists, for an object the cache does not hold, is decided on the
// object as the API server has it: another's Secret of the machine's
// name, without owner references or labels, blocks the machine instead of
// passing for its own with the rendered object's owner reference.
func TestAnotherObjectOfTheSameNameIsNotTakenForOurs(t *testing.T) {
	g := NewWithT(t)
	kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "kvm-uid"}}
	kvm.SetGroupVersionKind(infrav1.GroupVersion.WithKind("KubeVirtMachine"))
	desired := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-userdata",
		Labels: map[string]string{infrav1.MachineNameLabel: "w"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "KubeVirtMachine", Name: "w", UID: "kvm-uid",
			Controller: ptr.To(true)}}}}
	anothers := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-userdata"}}
	var sent sentWrites
	live := countingClient(t, &sent, anothers)
	stale := countingClient(t, &sentWrites{})
	r := &Reconciler{Client: cachedClient{Client: live, cache: stale}, APIReader: live,
		Infrastructure: &infracluster.Cluster{Client: cachedClient{Client: live, cache: stale}, Reader: apiServerReader{live}}}

	got, blocker, err := ensureCreated(context.Background(), r, kvm, desired, "Secret", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(blocker).NotTo(BeNil())
	g.Expect(blocker.reason).To(Equal(infrav1.NameConflictReason))
	g.Expect(got.OwnerReferences).To(BeEmpty())
	g.Expect(got.Labels).To(BeEmpty())
	g.Expect(sent).To(Equal(sentWrites{create: 1}))
}
