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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestTheKubeconfigNeverEntersTheSecretCache: the provider's Secret cache
// selects every Secret with a cluster-name label, and the workload
// cluster's admin kubeconfig is one, with Cluster API's Secret type and its
// credentials under value, the key bootstrap data has too. What the
// running manager's cache holds of it is its metadata only; a machine's
// bootstrap data keeps its value.
func TestTheKubeconfigNeverEntersTheSecretCache(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	tc := newCluster(t)
	labels := map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}
	kubeconfig := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.cluster.Name + "-kubeconfig", Labels: labels},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user: {token: admin-credentials}\n")},
	}
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "worker-0", Labels: labels},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
	}
	g.Expect(c.Create(ctx, kubeconfig)).To(Succeed())
	g.Expect(c.Create(ctx, data)).To(Succeed())

	cache := controllers.Load().mgr.GetCache()
	g.Eventually(func(g Gomega) {
		cached := &corev1.Secret{}
		g.Expect(cache.Get(ctx, client.ObjectKeyFromObject(data), cached)).To(Succeed())
		g.Expect(cached.Data).To(HaveKeyWithValue("value", data.Data["value"]))
		g.Expect(cached.Data).NotTo(HaveKey("format"))
	}).Should(Succeed())
	cached := &corev1.Secret{}
	g.Expect(cache.Get(ctx, client.ObjectKeyFromObject(kubeconfig), cached)).To(Succeed(), "the kubeconfig is selected; only its data is left out")
	g.Expect(cached.Data).To(BeEmpty())
	g.Expect(cached.StringData).To(BeEmpty())
}
