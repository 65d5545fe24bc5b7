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
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
)

// TestDeletionConfirmsWithTheAPIServer: the finalizer is the last guard of
// the VM and its disks, so a cache that has not seen a VM yet does not
// release it: the API server is asked before the finalizer goes.
func TestDeletionConfirmsWithTheAPIServer(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, kubevirtv1.AddToScheme, cdiv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	machine := func() *infrav1.KubeVirtMachine {
		kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "kvm-uid",
			Finalizers: []string{infrav1.MachineFinalizer}}}
		kvm.SetGroupVersionKind(infrav1.GroupVersion.WithKind("KubeVirtMachine"))
		return kvm
	}
	vmOf := func(kvm *infrav1.KubeVirtMachine) *kubevirtv1.VirtualMachine {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}}
		if err := controllerutil.SetControllerReference(kvm, vm, scheme); err != nil {
			t.Fatal(err)
		}
		return vm
	}

	t.Run("a VM only the API server knows keeps the finalizer and is deleted", func(t *testing.T) {
		g := NewWithT(t)
		kvm := machine()
		live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmOf(kvm)).Build()
		stale := fake.NewClientBuilder().WithScheme(scheme).Build()
		r := &Reconciler{Client: cachedClient{Client: live, cache: stale}, APIReader: live,
			Infrastructure: &infracluster.Cluster{Client: cachedClient{Client: live, cache: stale}, Reader: live}}
		g.Expect(r.reconcileDelete(context.Background(), &scope{kubeVirtMachine: kvm})).To(Succeed())
		g.Expect(kvm.Finalizers).To(ContainElement(infrav1.MachineFinalizer))
		g.Expect(setReady(kvm)).To(Succeed())
		g.Expect(conditionOf(kvm, infrav1.ReadyCondition).Message).To(Equal("Waiting for VirtualMachine w to be deleted"))
		err := live.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "w"}, &kubevirtv1.VirtualMachine{})
		g.Expect(err).To(HaveOccurred(), "the VM the cache missed is deleted too")
	})

	t.Run("with nothing left anywhere the finalizer goes", func(t *testing.T) {
		g := NewWithT(t)
		kvm := machine()
		empty := fake.NewClientBuilder().WithScheme(scheme).Build()
		r := &Reconciler{Client: empty, APIReader: empty, Infrastructure: &infracluster.Cluster{Client: empty, Reader: empty}}
		g.Expect(r.reconcileDelete(context.Background(), &scope{kubeVirtMachine: kvm})).To(Succeed())
		g.Expect(kvm.Finalizers).NotTo(ContainElement(infrav1.MachineFinalizer))
	})
}

// cachedClient is a manager's client: reads from its cache, writes to the
// API server.
type cachedClient struct {
	client.Client
	cache client.Reader
}

func (c cachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.cache.Get(ctx, key, obj, opts...)
}

func (c cachedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.cache.List(ctx, list, opts...)
}

func conditionOf(kvm *infrav1.KubeVirtMachine, conditionType string) *metav1.Condition {
	for i := range kvm.Status.Conditions {
		if kvm.Status.Conditions[i].Type == conditionType {
			return &kvm.Status.Conditions[i]
		}
	}
	return nil
}
