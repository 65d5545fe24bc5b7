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
	"context"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAdmissionClonesAskTheManagementClusterAboutItsUsers: with a remote
// infrastructure cluster, the user who writes a clone source is judged by
// the management cluster's RBAC (here: alice may clone from golden), never
// by the infrastructure cluster's (here: anyone may), while the
// DataSource that points into golden is read where the data is.
func TestAdmissionClonesAskTheManagementClusterAboutItsUsers(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(cdiv1.AddToScheme(scheme)).To(Succeed())
	answering := func(allowed func(user string) bool) interceptor.Funcs {
		return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			sar, ok := obj.(*authorizationv1.SubjectAccessReview)
			if !ok {
				return c.Create(ctx, obj, opts...)
			}
			ra := sar.Spec.ResourceAttributes
			sar.Status.Allowed = allowed(sar.Spec.User) && ra.Namespace == "golden" &&
				ra.Resource == "datavolumes" && ra.Subresource == "source" && ra.Verb == "create"
			return nil
		}}
	}
	management := fake.NewClientBuilder().WithScheme(scheme).
		WithInterceptorFuncs(answering(func(user string) bool { return user == "alice" })).Build()
	infrastructure := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "golden"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		&cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "talos"},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos"}}}},
	).WithInterceptorFuncs(answering(func(string) bool { return true })).Build()

	clones := AdmissionClones(management, infrastructure)
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "m-root"},
		Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: ptr.To("tenant"), Name: "talos"}}}
	for user, allowed := range map[string]bool{"alice": true, "bob": false} {
		d, err := clones.AsUser(context.Background(), dv, authenticationv1.UserInfo{Username: user})
		g.Expect(err).NotTo(HaveOccurred(), user)
		g.Expect(d.Allowed).To(Equal(allowed), "%s: %s", user, d.Reason)
	}
}
