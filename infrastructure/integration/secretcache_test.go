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
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
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

// TestDataSecretNameIsFollowedOnlyToBootstrapData is what a tenant who
// writes Machines would try: point spec.bootstrap.dataSecretName at a
// Secret of its namespace that is not bootstrap data, whose value would
// then be copied into the user data of a VM the tenant runs. Neither the
// cluster's admin kubeconfig, whose value the Secret cache drops, nor a
// Secret the cache never selects, read from the API server, is followed:
// the machine reports BootstrapDataForbidden naming the field, and no
// user-data Secret or VM is made.
func TestDataSecretNameIsFollowedOnlyToBootstrapData(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	tc := newCluster(t)
	unlabelled := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "hoster-credentials"},
		Data:       map[string][]byte{"value": []byte("not for tenants")},
	}
	kubeconfig := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.cluster.Name + "-kubeconfig",
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user: {token: admin-credentials}\n")},
	}
	for _, s := range []*corev1.Secret{unlabelled, kubeconfig} {
		g.Expect(c.Create(ctx, s)).To(Succeed())
	}
	for name, target := range map[string]*corev1.Secret{"points-at-hoster": unlabelled, "points-at-kubeconfig": kubeconfig} {
		kvm := tc.machine(t, name, containerDiskSpec(), func(m *clusterv1.Machine, _ *infrav1.KubeVirtMachine, _ *corev1.Secret) {
			m.Spec.Bootstrap.DataSecretName = ptr.To(target.Name)
		})
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.BootstrapDataForbiddenReason)
			g.Expect(cond.Message).To(HavePrefix("spec.bootstrap.dataSecretName: Secret " + target.Name + " "))
		}).Should(Succeed(), name)
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tc.namespace, Name: vmspec.UserDataSecretName(name)}, &corev1.Secret{})).
			To(MatchError(ContainSubstring("not found")), "%s: no user data was written", name)
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tc.namespace, Name: name}, &kubevirtv1.VirtualMachine{})).
			To(MatchError(ContainSubstring("not found")), "%s: no VM was made", name)
	}
}
