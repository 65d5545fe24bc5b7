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

package scenarios

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestManagementClustersSharingAnInfrastructureClusterKeepTheirVMs: two
// management clusters whose infrastructure providers share one
// infrastructure cluster, each with an identity of its own (the default:
// its kube-system UID). Management cluster "other" has a Cluster and a
// KubeVirtMachine of the same namespace and names as one of "owner"'s
// joined machines. Its machine neither adopts the VM (it reports
// NameConflict and is never provisioned from it) nor deletes anything of
// it when it is deleted; owner's pool stays joined on the same VM.
// Without the identity the VM's labels (namespace, machine name, no owner)
// made it other's, which took it over and deleted it.
func TestManagementClustersSharingAnInfrastructureClusterKeepTheirVMs(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	owner := startScenarioHarness(t, harness.Options{RemoteInfrastructure: true})
	other := startScenarioHarness(t, harness.Options{InfrastructureOf: owner})
	ownerID, err := owner.ManagementClusterIdentity(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	otherID, err := other.ManagementClusterIdentity(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(otherID).NotTo(Equal(ownerID), "each management cluster has an identity of its own")

	key := client.ObjectKey{Namespace: "shared-infrastructure", Name: "tenant"}
	w, err := owner.CreateCluster(ctx, key, harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(owner.Apply(ctx, poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "1"}))).To(Succeed())
	joined := poolOf(w).expectJoinedIn(t, owner, 1)
	machine := joined[0]
	vm := &kubevirtv1.VirtualMachine{}
	g.Expect(owner.Client.Get(ctx, vmKey(machine), vm)).To(Succeed())
	g.Expect(vm.Labels).To(HaveKeyWithValue(infrav1.ManagementClusterLabel, ownerID))
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(owner.Client.Get(ctx, vmKey(machine), vmi)).To(Succeed())
	userData := &corev1.Secret{}
	g.Expect(owner.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: vm.Name + "-userdata"}, userData)).To(Succeed())
	vmSide := []client.Object{vm, vmi, userData}
	expectUntouched := func(g Gomega) {
		for _, o := range vmSide {
			live := o.DeepCopyObject().(client.Object)
			g.Expect(owner.Client.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
			g.Expect(live.GetUID()).To(Equal(o.GetUID()), "%T %s is the same", o, o.GetName())
			g.Expect(live.GetDeletionTimestamp()).To(BeNil(), "%T %s is not being deleted", o, o.GetName())
			g.Expect(live.GetLabels()).To(HaveKeyWithValue(infrav1.ManagementClusterLabel, ownerID))
		}
	}

	// The other management cluster: the same Cluster, and a Machine and
	// KubeVirtMachine of the same names.
	_, err = other.CreateCluster(ctx, key, harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: machine.Name + "-data",
			Labels: map[string]string{clusterv1.ClusterNameLabel: key.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": []byte("#cloud-config\n")},
	}
	g.Expect(other.Client.Create(ctx, data)).To(Succeed())
	twin := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: machine.Name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: key.Name}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       key.Name,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
			InfrastructureRef: machine.Spec.InfrastructureRef,
			Version:           machine.Spec.Version,
		},
	}
	g.Expect(other.Client.Create(ctx, twin)).To(Succeed())
	ownerKVM := &infrav1.KubeVirtMachine{}
	g.Expect(owner.Client.Get(ctx, vmKey(machine), ownerKVM)).To(Succeed())
	twinKVM := &infrav1.KubeVirtMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: ownerKVM.Name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: key.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine",
				Name: twin.Name, UID: twin.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: ownerKVM.Spec,
	}
	twinKVM.Spec.ProviderID = ""
	g.Expect(other.Client.Create(ctx, twinKVM)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(other.Client.Get(ctx, client.ObjectKeyFromObject(twinKVM), twinKVM)).To(Succeed())
		c := conditions.Get(twinKVM, infrav1.VirtualMachineProvisionedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.NameConflictReason))
		g.Expect(c.Message).To(Equal("VirtualMachine " + vm.Name + " exists and belongs to another management cluster"))
	}, timeout, poll).Should(Succeed(), "the other management cluster's machine does not adopt the VM")
	g.Expect(ptr.Deref(twinKVM.Status.Initialization.Provisioned, false)).To(BeFalse())
	g.Expect(twinKVM.Status.ProvisionedInstanceUID).To(BeEmpty())
	expectUntouched(g)

	// Deleted, it deletes nothing of the VM's and lets go.
	g.Expect(other.Client.Delete(ctx, twin)).To(Succeed())
	g.Expect(other.Client.Delete(ctx, twinKVM)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := other.Client.Get(ctx, client.ObjectKeyFromObject(twinKVM), &infrav1.KubeVirtMachine{})
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		g.Expect(err).To(HaveOccurred(), "the other management cluster's machine is gone")
	}, timeout, poll).Should(Succeed())
	expectUntouched(g)
	after := poolOf(w).expectJoinedIn(t, owner, 1)
	g.Expect(after[0].UID).To(Equal(machine.UID), "owner's Machine was not replaced")
	g.Expect(after[0].Status.NodeRef.Name).To(Equal(machine.Status.NodeRef.Name))
}
