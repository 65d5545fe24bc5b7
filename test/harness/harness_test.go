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

package harness

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestRenderTemplateNeedsTheClusterName(t *testing.T) {
	g := NewWithT(t)
	_, err := RenderTemplate(KairosPoolTemplate(), map[string]string{"NAMESPACE": "default"})
	g.Expect(err).To(MatchError(ContainSubstring("CLUSTER_NAME")))
}

func TestRenderTemplateDefaults(t *testing.T) {
	g := NewWithT(t)
	objs, err := RenderTemplate(KairosPoolTemplate(), map[string]string{"CLUSTER_NAME": "tenant", "NAMESPACE": "tenants"})
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]unstructured.Unstructured{}
	for _, o := range objs {
		g.Expect(o.GetNamespace()).To(Equal("tenants"))
		kinds[o.GetKind()] = o
	}
	g.Expect(kinds).To(HaveLen(4))
	md := kinds["MachineDeployment"]
	replicas, _, _ := unstructured.NestedFieldNoCopy(md.Object, "spec", "replicas")
	g.Expect(replicas).To(BeEquivalentTo(3))
	template := kinds["KubeVirtMachineTemplate"]
	class, _, _ := unstructured.NestedString(template.Object, "spec", "template", "spec", "workerClass", "name")
	g.Expect(class).To(Equal("kairos"))
	g.Expect(template.GetName()).To(Equal("tenant-kairos-r1"))
}

// TestCreateAndDeleteCluster proves the harness fronts a workload apiserver
// with a Cluster that Cluster API reports initialized, and that deleting it
// removes the control plane stand-in and the Secrets it owns.
func TestCreateAndDeleteCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	h, err := Start(ctx, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("started in %s", time.Since(start))
	defer func() {
		start := time.Now()
		g.Expect(h.Stop()).To(Succeed())
		t.Logf("stopped in %s", time.Since(start))
	}()

	key := client.ObjectKey{Namespace: "harness", Name: "smoke"}
	w, err := h.CreateCluster(ctx, key, ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Workload(key)).To(BeIdenticalTo(w))
	c := &clusterv1.Cluster{}
	g.Expect(h.Client.Get(ctx, key, c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint.Host).To(Equal(w.API.Host()))
	g.Expect(c.Spec.ControlPlaneEndpoint.Port).To(Equal(w.API.Port()))

	// Every part's webhooks are served, not only the last one installed.
	strict := client.FieldValidation("Strict")
	err = h.Client.Create(ctx, &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "no-image"},
		Spec: infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: infrav1.KubeVirtMachineSpec{
			CPU: &infrav1.CPU{Cores: 1}, Memory: ptr.To(resource.MustParse("1Gi")),
		}}},
	}, strict)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "KubeVirtMachineTemplate without image or class: %v", err)
	err = h.Client.Create(ctx, &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "bad-key"},
		Spec: bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: bootstrapv1.KairosConfigSpec{
			SSHKeys: []string{"not-a-public-key"},
		}}},
	}, strict)
	g.Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "KairosConfigTemplate with an invalid SSH key: %v", err)
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "defaulted"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: key.Name,
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName:       key.Name,
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtMachineTemplate", Name: "absent"},
			}},
		},
	}
	g.Expect(h.Client.Create(ctx, md, strict)).To(Succeed())
	g.Expect(md.Spec.Replicas).NotTo(BeNil(), "Cluster API's MachineDeployment defaulting webhook did not run")
	g.Expect(md.Spec.Selector.MatchLabels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, key.Name))

	g.Expect(h.DeleteCluster(ctx, key, time.Minute)).To(Succeed())
	g.Eventually(func(g Gomega) {
		secrets := &corev1.SecretList{}
		g.Expect(h.Client.List(ctx, secrets, client.InNamespace(key.Namespace))).To(Succeed())
		g.Expect(secrets.Items).To(BeEmpty())
		cp := &unstructured.Unstructured{}
		cp.SetGroupVersionKind(HostedControlPlaneGVK)
		g.Expect(apierrors.IsNotFound(h.Client.Get(ctx, key, cp))).To(BeTrue())
		g.Expect(apierrors.IsNotFound(h.Client.Get(ctx, key, &infrav1.KubeVirtCluster{}))).To(BeTrue())
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
}
