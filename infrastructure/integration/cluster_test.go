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
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func newKubeVirtCluster(t *testing.T, tc *testCluster) *infrav1.KubeVirtCluster {
	t.Helper()
	kc := &infrav1.KubeVirtCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: tc.namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster",
				Name: tc.cluster.Name, UID: tc.cluster.UID}}},
		Spec: infrav1.KubeVirtClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.tenant.example.com", Port: 6443},
			FailureDomains:       []clusterv1.FailureDomain{{Name: "zone-a"}, {Name: "zone-b", Attributes: map[string]string{"rack": "r2"}}},
		},
	}
	NewWithT(t).Expect(c.Create(context.Background(), kc)).To(Succeed())
	return kc
}

func TestKubeVirtClusterPassesThrough(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	kc := newKubeVirtCluster(t, tc)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kc), kc)).To(Succeed())
		g.Expect(kc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(kc.Status.FailureDomains).To(Equal(kc.Spec.FailureDomains))
		cond := expectCondition(g, kc, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(cond.Message).To(Equal("Control plane endpoint is api.tenant.example.com:6443"))
		g.Expect(kc.Status.ObservedGeneration).To(Equal(kc.Generation))
	}).Should(Succeed())
	changed := kc.DeepCopy()
	changed.Spec.ControlPlaneEndpoint.Host = "other.example.com"
	g.Expect(c.Update(ctx, changed)).To(MatchError(ContainSubstring("cannot be changed once set")))
}

// TestBesideCAPK installs cluster-api-provider-kubevirt's machine CRD name
// next to ours and puts a VM that is not ours where a machine wants its VM:
// both APIs serve, and the machine neither adopts nor touches the VM.
func TestBesideCAPK(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()

	capk := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirtmachines.infrastructure.cluster.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "infrastructure.cluster.x-k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "kubevirtmachines", Singular: "kubevirtmachine", Kind: "KubevirtMachine", ListKind: "KubevirtMachineList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"providerID": {Type: "string"}}}}}}}},
		},
	}
	if err := c.Create(ctx, capk); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(capk), capk)).To(Succeed())
		established := false
		for _, cond := range capk.Status.Conditions {
			established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
		}
		g.Expect(established).To(BeTrue())
	}).Should(Succeed())

	// A VM CAPK made, without our labels or owner, named like our machine.
	foreign := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "shared-name", Namespace: tc.namespace, Labels: map[string]string{"cluster.x-k8s.io/role": "worker"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
				Memory:  &kubevirtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))},
				Devices: kubevirtv1.Devices{}}}}},
	}
	g.Expect(c.Create(ctx, foreign)).To(Succeed())
	labels := foreign.Labels

	kvm := tc.machine(t, "shared-name", containerDiskSpec())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		// Every condition the machine owns says so, not Ready alone.
		for _, conditionType := range []string{infrav1.ReadyCondition, infrav1.BootDiskReadyCondition, infrav1.VirtualMachineProvisionedCondition} {
			cond := expectCondition(g, kvm, conditionType, metav1.ConditionFalse, infrav1.NameConflictReason)
			g.Expect(cond.Message).To(Equal("VirtualMachine shared-name exists and is not controlled by this KubeVirtMachine"))
		}
	}).Should(Succeed())
	// KubeVirt runs the foreign VM and writes it; the provider never does.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(foreign), foreign)).To(Succeed())
	g.Expect(foreign.Labels).To(Equal(labels))
	g.Expect(foreign.OwnerReferences).To(BeEmpty())
	g.Expect(vmWrites(tc.namespace, foreign.Name)).To(BeEmpty(), "the foreign VM is untouched")

	g.Expect(c.Delete(ctx, kvm)).To(Succeed())
	g.Eventually(gone(kvm)).Should(BeTrue())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(foreign), foreign)).To(Succeed(), "deleting our machine leaves the foreign VM")
	g.Expect(foreign.DeletionTimestamp.IsZero()).To(BeTrue(), "deleting our machine leaves the foreign VM")
	g.Expect(vmWrites(tc.namespace, foreign.Name)).To(BeEmpty(), "the foreign VM is untouched")
}

// vmWrites returns the controllers' writes to a VirtualMachine or its
// instance that the API server accepted.
func vmWrites(namespace, name string) []string {
	var out []string
	for _, w := range controllerWrites.in(namespace) {
		if w.Name == name && !w.Failed && (strings.HasPrefix(w.Resource, "virtualmachines") || strings.HasPrefix(w.Resource, "virtualmachineinstances")) {
			out = append(out, w.String())
		}
	}
	return out
}
