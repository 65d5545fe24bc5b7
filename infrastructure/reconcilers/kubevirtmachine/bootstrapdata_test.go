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
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// TestBootstrapSecretProblem: dataSecretName is followed only to a
// bootstrap data Secret of the Machine.
func TestBootstrapSecretProblem(t *testing.T) {
	config := metav1.OwnerReference{APIVersion: "bootstrap.cozystack.io/v1alpha1", Kind: "KairosConfig", Name: "w-1", Controller: ptr.To(true)}
	data := func(edit func(*corev1.Secret)) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "w-1", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"},
				OwnerReferences: []metav1.OwnerReference{config}},
			Type: clusterv1.ClusterSecretType,
		}
		if edit != nil {
			edit(s)
		}
		return s
	}
	withConfig := &clusterv1.Machine{Spec: clusterv1.MachineSpec{ClusterName: "demo", Bootstrap: clusterv1.Bootstrap{
		ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cozystack.io", Kind: "KairosConfig", Name: "w-1"}}}}
	dataOnly := &clusterv1.Machine{Spec: clusterv1.MachineSpec{ClusterName: "demo"}}
	for _, tc := range []struct {
		name    string
		machine *clusterv1.Machine
		secret  *corev1.Secret
		want    string
	}{
		{"the config's data", withConfig, data(nil), ""},
		{"data the user brought, with no config", dataOnly, data(func(s *corev1.Secret) { s.OwnerReferences = nil }), ""},
		{"another type", dataOnly, data(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }), "is not of type cluster.x-k8s.io/secret"},
		{"no cluster label", dataOnly, data(func(s *corev1.Secret) { s.Labels = nil }), "does not carry the label cluster.x-k8s.io/cluster-name=demo"},
		{"another cluster's", dataOnly, data(func(s *corev1.Secret) { s.Labels[clusterv1.ClusterNameLabel] = "other" }), "does not carry the label"},
		{"the cluster's kubeconfig", dataOnly, data(func(s *corev1.Secret) { s.Name = "demo-kubeconfig" }), "is one of Cluster demo's own Secrets"},
		{"the cluster's service account key", withConfig, data(func(s *corev1.Secret) { s.Name = "demo-sa" }), "own Secrets"},
		{"another config's data", withConfig, data(func(s *corev1.Secret) { s.OwnerReferences[0].Name = "w-2" }), "is not controlled by the Machine's bootstrap config KairosConfig w-1"},
		{"a config of another group", withConfig, data(func(s *corev1.Secret) { s.OwnerReferences[0].APIVersion = "example.com/v1" }), "is not controlled"},
		{"an owner that does not control", withConfig, data(func(s *corev1.Secret) { s.OwnerReferences[0].Controller = nil }), "is not controlled"},
	} {
		got := bootstrapSecretProblem(tc.machine, tc.secret)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
