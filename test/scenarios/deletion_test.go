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
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestDeletionLeavesNothing: deleting the Cluster of a joined pool (one
// machine booting a container disk, one an imported disk) removes every
// object the pool made in the management cluster (no Machine, VM, instance,
// DataVolume, claim, Secret or ConfigMap of ours) and leaves no bootstrap
// token or certificate request in the workload cluster.
func TestDeletionLeavesNothing(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	poolOf(w).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "1"})
	applyImportPool(t, w, map[string]string{"POOL_NAME": "imported", "WORKER_MACHINE_COUNT": "1"})
	expectBootsClean(g, poolOf(w).expectJoined(t, 2))

	g.Expect(h.DeleteCluster(ctx, w.Key, timeout)).To(Succeed(), func() string { return describe(w) })

	in := client.InNamespace(w.Key.Namespace)
	g.Eventually(func(g Gomega) {
		left := objectsLeft(g, h.Client, w.Key.Namespace, map[string]client.ObjectList{
			"MachineDeployment":       &clusterv1.MachineDeploymentList{},
			"MachineSet":              &clusterv1.MachineSetList{},
			"Machine":                 &clusterv1.MachineList{},
			"MachineHealthCheck":      &clusterv1.MachineHealthCheckList{},
			"KairosConfig":            &bootstrapv1.KairosConfigList{},
			"KairosConfigTemplate":    &bootstrapv1.KairosConfigTemplateList{},
			"KubeVirtMachine":         &infrav1.KubeVirtMachineList{},
			"KubeVirtMachineTemplate": &infrav1.KubeVirtMachineTemplateList{},
			"KubeVirtCluster":         &infrav1.KubeVirtClusterList{},
			"VirtualMachine":          &kubevirtv1.VirtualMachineList{},
			"VirtualMachineInstance":  &kubevirtv1.VirtualMachineInstanceList{},
			"DataVolume":              &cdiv1.DataVolumeList{},
			"PersistentVolumeClaim":   &corev1.PersistentVolumeClaimList{},
			"Secret":                  &corev1.SecretList{},
			"ConfigMap":               &corev1.ConfigMapList{},
		})
		controlPlanes := &unstructured.UnstructuredList{}
		controlPlanes.SetGroupVersionKind(harness.HostedControlPlaneGVK.GroupVersion().WithKind(harness.HostedControlPlaneGVK.Kind + "List"))
		g.Expect(h.Client.List(ctx, controlPlanes, in)).To(Succeed())
		for _, cp := range controlPlanes.Items {
			left = append(left, "HostedControlPlane "+cp.GetName())
		}
		g.Expect(left).To(BeEmpty())
		// Nodes are not checked: Cluster API does not delete Nodes of a
		// Cluster being deleted, whose control plane goes with it (the
		// harness keeps the workload apiserver only to look for tokens).
		g.Expect(bootstrapTokens(g, w)).To(BeEmpty())
		csrs := &certificatesv1.CertificateSigningRequestList{}
		g.Expect(w.API.Client.List(ctx, csrs)).To(Succeed())
		g.Expect(csrs.Items).To(BeEmpty())
	}, timeout, poll).Should(Succeed())
}

// objectsLeft lists, as "<kind> <name>", the objects of the kinds given in a
// namespace, but the kube-root-ca.crt ConfigMap every namespace has.
func objectsLeft(g Gomega, c client.Client, namespace string, kinds map[string]client.ObjectList) []string {
	var left []string
	for kind, list := range kinds {
		g.Expect(c.List(context.Background(), list, client.InNamespace(namespace))).To(Succeed())
		items, err := meta.ExtractList(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			if o := item.(client.Object); kind != "ConfigMap" || o.GetName() != "kube-root-ca.crt" {
				left = append(left, kind+" "+o.GetName())
			}
		}
	}
	return left
}
