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

package integration

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// TestRemoteInfrastructureCluster runs the controllers with the VMs in an
// infrastructure cluster of their own (--infrastructure-kubeconfig; here a
// client and cache of their own on the same apiserver). A machine's VM,
// disk, cloud-init Secret and import CA carry its labels and no owner
// reference, which cannot cross clusters. When clusterctl moves the machine
// away (it strips the finalizer and deletes it) everything keeps running,
// and the machine recreated with a new UID, as clusterctl recreates it in
// the target, takes its VM back without a new one. A deletion then deletes
// them by name.
//
// Not parallel: the suite's controllers run remote for its duration.
func TestRemoteInfrastructureCluster(t *testing.T) {
	restartControllers(t, rest.CopyConfig(env.Config))
	t.Cleanup(func() { restartControllers(t, nil) })
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()

	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{
		URL: "https://factory.example.com/image/remote/nocloud-amd64.raw.xz", CABundle: caBundle(t)}}
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
	kvm := tc.machine(t, "remote", spec)
	vm := waitForVM(t, kvm)
	expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
	vmi := runningInstance(t, kvm)
	vmSide := []client.Object{
		&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "remote"}},
		&cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "remote-root"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "remote-userdata"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "remote-import-ca"}},
	}
	for _, o := range vmSide {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		g.Expect(o.GetOwnerReferences()).To(BeEmpty(), "%T %s has no owner in the management cluster", o, o.GetName())
		g.Expect(o.GetLabels()).To(HaveKeyWithValue(infrav1.MachineNameLabel, "remote"))
	}

	// clusterctl move: the finalizer is stripped, the machine deleted.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
	moved := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: kvm.Namespace, Name: kvm.Name,
		Labels: kvm.Labels, Annotations: kvm.Annotations, OwnerReferences: kvm.OwnerReferences}, Spec: kvm.Spec}
	original := kvm.DeepCopy()
	kvm.Finalizers = nil
	g.Expect(c.Patch(ctx, kvm, client.MergeFrom(original))).To(Succeed())
	g.Expect(c.Delete(ctx, kvm)).To(Succeed())
	g.Eventually(gone(kvm)).Should(BeTrue())
	g.Consistently(func(g Gomega) {
		for _, o := range vmSide {
			live := o.DeepCopyObject().(client.Object)
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
			g.Expect(live.GetUID()).To(Equal(o.GetUID()))
			g.Expect(live.GetDeletionTimestamp()).To(BeNil(), "%T %s outlives the moved machine", o, o.GetName())
		}
	}, "3s").Should(Succeed())

	// The target's machine: a new UID, no status.
	g.Expect(c.Create(ctx, moved)).To(Succeed())
	g.Expect(moved.UID).NotTo(Equal(original.UID))
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(moved), moved)).To(Succeed())
		g.Expect(moved.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(moved.Status.ProvisionedInstanceUID).To(Equal(string(vmi.UID)))
		expectCondition(g, moved, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	}).Should(Succeed())
	live := &kubevirtv1.VirtualMachine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), live)).To(Succeed())
	g.Expect(live.UID).To(Equal(vm.UID), "the moved machine took its VM back")

	// Deleted for good: the VM side goes by name.
	g.Expect(c.Delete(ctx, moved)).To(Succeed())
	g.Eventually(gone(moved)).Should(BeTrue())
	for _, o := range vmSide {
		g.Eventually(gone(o)).Should(BeTrue(), "%T %s is deleted with the machine", o, o.GetName())
	}
}
