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
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// kubevirtFinalizer holds a VM, instance or DataVolume past KubeVirt's and
// CDI's own finalizers, which release them within moments: the test lets
// each go when it has checked that the machine still waits for it.
const kubevirtFinalizer = "test.kubevirt.io/shutdown"

func addFinalizer(t *testing.T, obj client.Object) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		controllerutil.AddFinalizer(obj, kubevirtFinalizer)
		return c.Update(context.Background(), obj)
	}).Should(Succeed())
}

func removeFinalizer(t *testing.T, obj client.Object) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		controllerutil.RemoveFinalizer(obj, kubevirtFinalizer)
		return c.Update(context.Background(), obj)
	}).Should(Succeed())
}

func gone(obj client.Object) func() bool {
	return func() bool {
		return apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)))
	}
}

// TestDeletionWaitsForVMInstanceAndDisks holds the running VM, its instance
// and its DataVolume with finalizers, as KubeVirt and CDI do while they shut
// down (only longer), and checks that the machine keeps its finalizer until
// each one is gone.
func TestDeletionWaitsForVMInstanceAndDisks(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/worker.raw", CABundle: caBundle(t)}}
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	kvm := tc.machine(t, "deleted", spec)
	vm := waitForVM(t, kvm)
	expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "deleted", Namespace: tc.namespace}}
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "deleted-root", Namespace: tc.namespace}}
	for _, obj := range []client.Object{vm, vmi, dv} {
		addFinalizer(t, obj)
	}

	g.Expect(c.Delete(ctx, kvm)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, obj := range []client.Object{vm, vmi, dv} {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			g.Expect(obj.GetDeletionTimestamp()).NotTo(BeNil(), "%s is being deleted", obj.GetName())
		}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.DeletingReason)
		g.Expect(cond.Message).To(Equal("Waiting for VirtualMachine deleted, VirtualMachineInstance deleted, DataVolume deleted-root to be deleted"))
	}).Should(Succeed(), func() string { return describe(tc.namespace) })

	// KubeVirt keeps a VM until its instance is gone: release the
	// instance first.
	for i, obj := range []client.Object{vmi, vm, dv} {
		g.Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			g.Expect(kvm.Finalizers).To(ContainElement(infrav1.MachineFinalizer))
		}).WithTimeout(time.Second).Should(Succeed(), "finalizer kept while %d objects remain", 3-i)
		removeFinalizer(t, obj)
		g.Eventually(gone(obj)).Should(BeTrue(), func() string { return describe(tc.namespace) })
	}
	g.Eventually(gone(kvm)).Should(BeTrue(), "the finalizer is released once everything is gone")
	for _, name := range []string{"deleted-userdata", "deleted-import-ca"} {
		g.Eventually(gone(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.namespace}})).Should(BeTrue())
	}
	g.Eventually(gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deleted-import-ca", Namespace: tc.namespace}})).Should(BeTrue())
}

// TestDeletionBeforeProvisioning deletes a machine that never got a VM.
func TestDeletionBeforeProvisioning(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	kvm := tc.machine(t, "never-started", containerDiskSpec(), func(m *clusterv1.Machine, _ *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		m.Spec.Bootstrap.DataSecretName = nil
		m.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cozystack.io", Kind: "KairosConfig", Name: "never-started"}
	})
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason)
	}).Should(Succeed())
	g.Expect(c.Delete(ctx, kvm)).To(Succeed())
	g.Eventually(gone(kvm)).Should(BeTrue())
}

// TestRestartNeverDuplicatesTheVM restarts the controllers with empty caches
// while machines are mid-provisioning, and runs a second set of controllers
// beside the first: every machine still has exactly one VM.
func TestRestartNeverDuplicatesTheVM(t *testing.T) {
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	var machines []*infrav1.KubeVirtMachine
	for _, name := range []string{"restart-a", "restart-b", "restart-c"} {
		machines = append(machines, tc.machine(t, name, containerDiskSpec()))
	}
	waitForVM(t, machines[0])
	restartControllers(t, nil)
	second, err := startControllers(ctx, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer second.stop()

	for _, kvm := range machines {
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
	}
	vms := &kubevirtv1.VirtualMachineList{}
	g.Expect(c.List(ctx, vms, client.InNamespace(tc.namespace))).To(Succeed())
	g.Expect(vms.Items).To(HaveLen(len(machines)))
	for _, vm := range vms.Items {
		g.Expect(vm.OwnerReferences).To(HaveLen(1))
	}
}

// TestIdleObjectsAreNotRewritten leaves a provisioned machine, a resolved
// template and a provisioned cluster alone through several cache resyncs:
// no resourceVersion of theirs may change, so the controllers do not
// hot-loop, and the controllers send no write at all to the namespace, so
// they do not rewrite the VM, its instance or its DataVolume either (which
// KubeVirt and CDI may write).
func TestIdleObjectsAreNotRewritten(t *testing.T) {
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	goldenImage(t, tc.namespace, "golden")
	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}
	kvm := tc.machine(t, "idle", spec)
	tmpl := classlessTemplate(tc.namespace, "idle", containerDiskSpec())
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	kc := newKubeVirtCluster(t, tc)
	// Every object's last step written: its conditions and its other
	// status fields, which Cluster API's patch helper sends apart.
	expectProvisioned(t, kvm)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		g.Expect(tmpl.Status.Resolved).NotTo(BeNil())
		expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionTrue, infrav1.ResolvedReason)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kc), kc)).To(Succeed())
		g.Expect(kc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		expectCondition(g, kc, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	}).Should(Succeed())

	// The recorder sends the machine's Events in the background; they
	// are writes to the namespace too.
	waitForEvents(t, "KubeVirtMachine", kvm, "RootDiskCreated", "VirtualMachineCreated", "Provisioned")

	objects := []client.Object{kvm, tmpl, kc,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "idle-userdata", Namespace: tc.namespace}}}
	versions := make([]string, len(objects))
	for i, obj := range objects {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		versions[i] = obj.GetResourceVersion()
	}
	writes := len(controllerWrites.in(tc.namespace))
	g.Consistently(func(g Gomega) {
		for i, obj := range objects {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			g.Expect(obj.GetResourceVersion()).To(Equal(versions[i]), "%T %s was rewritten while idle", obj, obj.GetName())
		}
		g.Expect(names(controllerWrites.in(tc.namespace)[writes:])).To(BeEmpty(), "the controllers wrote while idle")
	}).WithTimeout(2*syncPeriod + time.Second).Should(Succeed())
}
