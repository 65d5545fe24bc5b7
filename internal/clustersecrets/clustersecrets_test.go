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

package clustersecrets

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClusterSecrets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster string
		secret  corev1.Secret
		want    bool
	}{
		{"the cluster CA with its key", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-ca"}, Type: corev1.SecretTypeOpaque}, true},
		{"the admin kubeconfig", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubeconfig"}}, true},
		{"the service account key", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-sa"}}, true},
		{"the etcd CA", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-etcd"}}, true},
		{"the front proxy CA", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-proxy"}}, true},
		{"the apiserver's etcd client", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-apiserver-etcd-client"}}, true},
		{"another Machine's bootstrap data, by its type", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-workers-abcde"}, Type: "cluster.x-k8s.io/secret"}, true},
		{"a tenant's registry CA", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-ca"}, Type: corev1.SecretTypeOpaque}, false},
		{"another cluster's name pattern is not this cluster's", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "staging-ca"}}, false},
		{"a suffix that only starts like a purpose", "prod", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-ca-bundle"}}, false},
		{"without a cluster only the type counts", "", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-ca"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(Is(tc.cluster, &tc.secret)).To(Equal(tc.want))
		})
	}
}

// TestOfAnyCluster: Cluster API's Secrets of every cluster of the
// namespace, known by type, by the cluster-name label that matches the
// name, or by a Cluster of that name (a bring-your-own CA without label).
func TestOfAnyCluster(t *testing.T) {
	exists := func(c string) (bool, error) { return c == "staging", nil }
	for _, tc := range []struct {
		name   string
		secret corev1.Secret
		want   string
	}{
		{"a neighbour's bring-your-own CA, no label", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "staging-ca"}, Type: corev1.SecretTypeTLS},
			`Cluster API's "ca" Secret of cluster staging`},
		{"labelled for a cluster not yet created", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "next-sa", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "next"}}},
			`Cluster API's "sa" Secret of cluster next`},
		{"any Machine's bootstrap data, by type", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}, Type: "cluster.x-k8s.io/secret"},
			"of Cluster API's Secret type cluster.x-k8s.io/secret"},
		{"named like a cluster that does not exist", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-ca"}}, ""},
		{"not named like any", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "staging-ca-bundle"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Of(&tc.secret, exists)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
