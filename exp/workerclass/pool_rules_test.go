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

package workerclass_test

import (
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A GPU written in a VirtualMachine's {name, deviceName} shape reaches the
// webhooks (the pool API does not prune) and is refused with its path,
// instead of losing its device and its NVIDIA modules without a word.
func TestPoolUnknownFieldsAreRefused(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	_, err := createPool(t, ns, "vm-shaped-gpu", map[string]any{"cluster": "c", "workerClassName": talosR1, "version": "v1.35",
		"gpus": []any{map[string]any{"name": "gpu1", "deviceName": "nvidia.com/AD102GL_L40S"}}})
	g.Expect(err).To(MatchError(ContainSubstring("spec.gpus[0].deviceName: Forbidden: unknown field")))

	_, err = createPool(t, ns, "typo", map[string]any{"cluster": "c", "workerClassName": talosR1, "version": "v1.35",
		"talos": map[string]any{"versions": "v1.13.6"}})
	g.Expect(err).To(MatchError(ContainSubstring("spec.talos.versions: Forbidden: unknown field")))

	pool, err := createPool(t, ns, "pool-api-fields", map[string]any{"cluster": "c", "workerClassName": talosR1, "version": "v1.35",
		"gpus": []any{map[string]any{"name": "nvidia.com/AD102GL_L40S"}}, "instanceType": "u1.large"})
	g.Expect(err).NotTo(HaveOccurred(), "fields of the pool API that admission does not read are the pool API's")
	expectClass(g, pool, talosR1)
}

// A pool that names its substrate gets that substrate's rows.
func TestPoolSubstrateIsEnforced(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	_, err := createPool(t, ns, "kairos-on-proxmox", map[string]any{"cluster": "c", "substrate": "proxmox", "workerClassName": "kairos", "version": "v1.35"})
	g.Expect(err).To(MatchError(ContainSubstring("Kairos supports KubeVirt only, not Proxmox")))
	_, err = createPool(t, ns, "talos-on-proxmox", map[string]any{"cluster": "c", "substrate": "proxmox", "workerClassName": talosR1, "version": "v1.35"})
	g.Expect(err).To(MatchError(ContainSubstring("the final Proxmox template tag list is empty")))
	_, err = createPool(t, ns, "talos-on-proxmox-tags", map[string]any{"cluster": "c", "substrate": "proxmox", "workerClassName": talosR1, "version": "v1.35",
		"proxmox": map[string]any{"templateTags": []any{"talos"}}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = createPool(t, ns, "kairos-on-kubevirt", map[string]any{"cluster": "c", "substrate": "kubevirt", "workerClassName": "kairos", "version": "v1.35"})
	g.Expect(err).NotTo(HaveOccurred())
}

var testControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.workerclass.test", Version: "v1", Kind: "TestControlPlane"}

// installControlPlaneKind serves a control-plane kind with the contract's
// spec.version and status.version, created after the manager started.
func installControlPlaneKind(g Gomega) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "testcontrolplanes." + testControlPlaneGVK.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: testControlPlaneGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: testControlPlaneGVK.Kind, ListKind: testControlPlaneGVK.Kind + "List",
				Plural: "testcontrolplanes", Singular: "testcontrolplane"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: testControlPlaneGVK.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTo(true)}}}},
		},
	}
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, crd))).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(crd), got)).To(Succeed())
		established := false
		for _, c := range got.Status.Conditions {
			established = established || c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
		}
		g.Expect(established).To(BeTrue())
	}).Should(Succeed())
}

func ptrTo[T any](v T) *T { return &v }

// "Upgrade the parent control-plane minor first": through the real
// apiserver, a pool may not select a minor newer than its Cluster's
// control plane; once the control plane is upgraded it may. The manager
// runs with its flags' defaults, so the pool's spec.cluster example is
// Cozystack's Cluster kubernetes-example; a Cluster named example beside
// it, already on v1.35, is not the pool's.
func TestPoolMinorWaitsForTheControlPlane(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	installControlPlaneKind(g)
	controlPlaneCluster := func(name, specVersion, statusVersion string) *unstructured.Unstructured {
		cp := &unstructured.Unstructured{Object: map[string]any{
			"spec":   map[string]any{"version": specVersion},
			"status": map[string]any{"version": statusVersion},
		}}
		cp.SetGroupVersionKind(testControlPlaneGVK)
		cp.SetNamespace(ns)
		cp.SetName(name)
		g.Eventually(func() error { return env.Client.Create(ctx, cp) }).Should(Succeed())
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: clusterv1.ClusterSpec{
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: testControlPlaneGVK.Group, Kind: testControlPlaneGVK.Kind, Name: name},
		}}
		g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())
		return cp
	}
	// The control plane is upgrading: its spec asks for v1.35, its
	// apiservers still run v1.34.
	cp := controlPlaneCluster("kubernetes-example", "v1.35.6", "v1.34.9")
	controlPlaneCluster("example", "v1.35.6", "v1.35.6")

	_, err := createPool(t, ns, "too-new", map[string]any{"cluster": "example", "workerClassName": talosR1, "version": "v1.35"})
	g.Expect(err).To(MatchError(ContainSubstring(`spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first: cluster example's control plane runs Kubernetes v1.34.9`)))
	pool, err := createPool(t, ns, "workers", map[string]any{"cluster": "example", "workerClassName": talosR1, "version": "v1.34"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(replaceSpec(pool, map[string]any{"cluster": "example", "workerClassName": talosR1, "version": "v1.35"})).
		To(MatchError(ContainSubstring("upgrade the parent control-plane minor first")))

	// The upgrade finished.
	g.Expect(unstructured.SetNestedField(cp.Object, "v1.35.6", "status", "version")).To(Succeed())
	g.Expect(env.Client.Update(ctx, cp)).To(Succeed())
	g.Expect(replaceSpec(pool, map[string]any{"cluster": "example", "workerClassName": talosR1, "version": "v1.35"})).To(Succeed())
}
