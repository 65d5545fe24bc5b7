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

package admission

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

func fileFrom(secret string) bootstrapv1.File {
	return bootstrapv1.File{Path: "/etc/x", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: secret, Key: "k"}}}
}

func config(labels map[string]string, files ...bootstrapv1.File) *bootstrapv1.KairosConfig {
	return &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", Labels: labels},
		Spec: bootstrapv1.KairosConfigSpec{Files: files}}
}

// TestFilesFromClusterAPISecretsAreRefused: a file may not copy the
// cluster's CA key, kubeconfig or service account key into a worker.
func TestFilesFromClusterAPISecretsAreRefused(t *testing.T) {
	ctx := context.Background()
	prod := map[string]string{clusterv1.ClusterNameLabel: "prod"}
	for _, tc := range []struct {
		name   string
		config *bootstrapv1.KairosConfig
		want   string
	}{
		{"the cluster CA with its key", config(prod, fileFrom("registry-ca"), fileFrom("prod-ca")),
			`spec.files[1].contentFrom.secret.name: Forbidden: Secret prod-ca is Cluster API's "ca" Secret of cluster prod and is never copied into a worker`},
		{"the admin kubeconfig", config(prod, fileFrom("prod-kubeconfig")), `spec.files[0].contentFrom.secret.name: Forbidden: Secret prod-kubeconfig is Cluster API's "kubeconfig" Secret`},
		{"the service account key", config(prod, fileFrom("prod-sa")), `spec.files[0].contentFrom.secret.name: Forbidden`},
		{"a tenant's own Secret is fine", config(prod, fileFrom("registry-ca")), ""},
		{"without the cluster label the controller checks when it renders", config(nil, fileFrom("prod-ca")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := (&KairosConfig{}).ValidateCreate(ctx, tc.config)
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}

	t.Run("templates of a cluster too", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns", Labels: prod}}
		tmpl.Spec.Template.Spec.Files = []bootstrapv1.File{fileFrom("prod-etcd")}
		_, err := (&KairosConfigTemplate{}).ValidateCreate(ctx, tmpl)
		g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec.files[0].contentFrom.secret.name: Forbidden")))
	})
}

// TestFilesFromAnotherClustersSecretsAreRefused: not only the config's own
// cluster's Secrets are Cluster API's. A neighbouring Cluster's
// bring-your-own CA in the same namespace (no label, no Cluster API type:
// only its name says whose it is) is refused as soon as that Cluster
// exists; a Secret named like one of a Cluster that does not exist is a
// tenant's own.
func TestFilesFromAnotherClustersSecretsAreRefused(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	NewWithT(t).Expect(clusterv1.AddToScheme(s)).To(Succeed())
	clusters := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "staging"}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "registry"}},
	).Build()
	prod := map[string]string{clusterv1.ClusterNameLabel: "prod"}
	for _, tc := range []struct {
		name   string
		config *bootstrapv1.KairosConfig
		want   string
	}{
		{"a neighbour's bring-your-own CA", config(prod, fileFrom("staging-ca")),
			`spec.files[0].contentFrom.secret.name: Forbidden: Secret staging-ca is Cluster API's "ca" Secret of cluster staging and is never copied into a worker`},
		{"a neighbour's kubeconfig, from an unlabelled config", config(nil, fileFrom("staging-kubeconfig")),
			`spec.files[0].contentFrom.secret.name: Forbidden: Secret staging-kubeconfig is Cluster API's "kubeconfig" Secret of cluster staging`},
		{"a Cluster of that name in another namespace is not this namespace's", config(prod, fileFrom("registry-ca")), ""},
		{"no Cluster of that name: a tenant's own Secret", config(prod, fileFrom("mirror-ca")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := (&KairosConfig{Clusters: clusters}).ValidateCreate(ctx, tc.config)
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	t.Run("templates too", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"}}
		tmpl.Spec.Template.Spec.Files = []bootstrapv1.File{fileFrom("staging-etcd")}
		_, err := (&KairosConfigTemplate{Clusters: clusters}).ValidateCreate(ctx, tmpl)
		g.Expect(err).To(MatchError(ContainSubstring(`spec.template.spec.files[0].contentFrom.secret.name: Forbidden: Secret staging-etcd is Cluster API's "etcd" Secret of cluster staging`)))
	})
}

// TestUnchangedSpecsAreNotValidatedAgain: a stored object that today's
// rules refuse (created before a rule was tightened) can still lose its
// finalizer, get an owner reference or a label, so that deletion and
// clusterctl move never block on it; a spec change is still refused.
func TestUnchangedSpecsAreNotValidatedAgain(t *testing.T) {
	g := NewWithT(t)
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(false)}})
	prod := map[string]string{clusterv1.ClusterNameLabel: "prod"}
	stored := config(prod, fileFrom("prod-ca"))
	stored.Finalizers = []string{bootstrapv1.ConfigFinalizer}
	_, err := (&KairosConfig{}).ValidateCreate(ctx, stored)
	g.Expect(err).To(HaveOccurred(), "today's rules refuse the stored object")

	released := stored.DeepCopy()
	released.Finalizers = nil
	released.Labels["clusterctl.cluster.x-k8s.io/move"] = ""
	_, err = (&KairosConfig{}).ValidateUpdate(ctx, stored, released)
	g.Expect(err).NotTo(HaveOccurred())

	changed := released.DeepCopy()
	changed.Spec.Files = append(changed.Spec.Files, fileFrom("registry-ca"))
	_, err = (&KairosConfig{}).ValidateUpdate(ctx, stored, changed)
	g.Expect(err).To(MatchError(ContainSubstring("immutable")))

	tmpl := &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns", Labels: prod}}
	tmpl.Spec.Template.Spec.Files = []bootstrapv1.File{fileFrom("prod-ca")}
	moved := tmpl.DeepCopy()
	moved.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "prod", UID: "u"}}
	_, err = (&KairosConfigTemplate{}).ValidateUpdate(ctx, tmpl, moved)
	g.Expect(err).NotTo(HaveOccurred())
}
