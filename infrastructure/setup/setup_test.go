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

package setup

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// TestCachedSecretsKeepOnlyWhatTheControllerReads: every Secret with a
// cluster-name label is cached, the cluster CA's key and the workload
// cluster's admin kubeconfig among them, so the transform keeps only
// bootstrap data and cloud-init user data, told apart by type and labels:
// the kubeconfig keeps its credentials under value, with the type and the
// label of bootstrap data.
func TestCachedSecretsKeepOnlyWhatTheControllerReads(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	opts, err := ManagerCacheOptions(scheme, "test", "", time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	var transform func(any) (any, error)
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			transform = by.Transform
		}
	}
	g.Expect(transform).NotTo(BeNil(), "cached Secrets are transformed")
	cluster := map[string]string{clusterv1.ClusterNameLabel: "prod"}
	machine := map[string]string{clusterv1.ClusterNameLabel: "prod", infrav1.MachineNameLabel: "prod-workers-x"}
	for name, tc := range map[string]struct {
		name   string
		labels map[string]string
		typ    corev1.SecretType
		data   map[string][]byte
		kept   []string
	}{
		"bootstrap data keeps its value": {"prod-workers-x", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"value": []byte("#cloud-config"), "format": []byte("cloud-config")}, []string{"value"}},
		"a cloud-init Secret keeps its user data": {"prod-workers-x-userdata", machine, corev1.SecretTypeOpaque,
			map[string][]byte{"userdata": []byte("#cloud-config")}, []string{"userdata"}},
		"the admin kubeconfig keeps nothing": {"prod-kubeconfig", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")}, nil},
		"the cluster CA keeps nothing": {"prod-ca", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, nil},
		"the service account keys keep nothing": {"prod-sa", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, nil},
		"another Secret with a value key keeps nothing": {"tenant-kubeconfig-copy", cluster, corev1.SecretTypeOpaque,
			map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")}, nil},
		"a Secret without data stays without data": {"prod-workers-y", cluster, clusterv1.ClusterSecretType, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			in := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Labels: tc.labels, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Type: tc.typ, Data: tc.data}
			out, err := transform(in)
			g.Expect(err).NotTo(HaveOccurred())
			s := out.(*corev1.Secret)
			g.Expect(s.ManagedFields).To(BeEmpty())
			g.Expect(s.Data).To(HaveLen(len(tc.kept)))
			for _, k := range tc.kept {
				g.Expect(s.Data).To(HaveKeyWithValue(k, tc.data[k]))
			}
		})
	}
}

// TestCachedMachinesKeepOnlyTheNodeRefOfTheirStatus: the manager caches
// Machines cut down by watchview.CachedMachine, keeping the nodeRef that
// tells the controller the node joined.
func TestCachedMachinesKeepOnlyTheNodeRefOfTheirStatus(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	opts, err := ManagerCacheOptions(scheme, "machine-cache-test", "", time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	var transform func(any) (any, error)
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*clusterv1.Machine); ok {
			transform = by.Transform
		}
	}
	g.Expect(transform).NotTo(BeNil(), "cached Machines are transformed")
	out, err := transform(&clusterv1.Machine{Status: clusterv1.MachineStatus{
		NodeRef:    clusterv1.MachineNodeReference{Name: "n"},
		Conditions: []metav1.Condition{{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue}},
	}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*clusterv1.Machine).Status).To(Equal(clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: "n"}}))
}
