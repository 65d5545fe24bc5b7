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

package cloneauth

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

// fakeAuthorizer answers SubjectAccessReviews as an API server whose RBAC
// grants create on datavolumes/source to the users in allowed, only in the
// namespace golden.
func fakeAuthorizer(t *testing.T, allowed ...string) *Authorizer {
	t.Helper()
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(cdiv1.AddToScheme(scheme)).To(Succeed())
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "golden"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		&cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "redirect"},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos"}}}},
		&cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "own"},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "tenant", Name: "talos"}}}},
	).WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		sar, ok := obj.(*authorizationv1.SubjectAccessReview)
		if !ok {
			return c.Create(ctx, obj, opts...)
		}
		ra := sar.Spec.ResourceAttributes
		for _, u := range allowed {
			if sar.Spec.User == u && ra.Namespace == "golden" && ra.Group == "cdi.kubevirt.io" &&
				ra.Resource == "datavolumes" && ra.Subresource == "source" && ra.Verb == "create" {
				sar.Status.Allowed = true
			}
		}
		return nil
	}}).Build()
	return &Authorizer{Client: cl, Reader: cl}
}

func pvcClone(namespace, name string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "m-root"},
		Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: namespace, Name: name}}}}
}

func dataSourceClone(namespace, name string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "m-root"},
		Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: ptr.To(namespace), Name: name}}}
}

func TestAsUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		user string
		dv   *cdiv1.DataVolume
		want Decision
	}{
		{"a clone within the namespace needs nothing more", "mallory", pvcClone("tenant", "talos"), Decision{Allowed: true}},
		{"a DataSource of the namespace that points within it needs nothing more", "mallory", dataSourceClone("tenant", "own"), Decision{Allowed: true}},
		{"an import is not a clone", "mallory", &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "m-root"},
			Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://x"}}}}, Decision{Allowed: true}},
		{"a user granted in the source namespace may clone from it", "alice", pvcClone("golden", "talos"), Decision{Allowed: true}},
		{"a user not granted there may not", "mallory", pvcClone("golden", "talos"),
			Decision{Reason: "User mallory has insufficient permissions in clone source namespace golden"}},
		{"a DataSource is authorized where it points, not where it lives", "mallory", dataSourceClone("tenant", "redirect"),
			Decision{Reason: "User mallory has insufficient permissions in clone source namespace golden"}},
		{"a DataSource that does not exist is missing", "alice", dataSourceClone("tenant", "absent"),
			Decision{Missing: true, Reason: "DataSource tenant/absent does not exist"}},
		{"a source namespace that does not exist is missing", "alice", pvcClone("nowhere", "talos"),
			Decision{Missing: true, Reason: "namespace nowhere does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := fakeAuthorizer(t, "alice").AsUser(context.Background(), tc.dv, authenticationv1.UserInfo{Username: tc.user})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestAsNamespace(t *testing.T) {
	g := NewWithT(t)
	granted := fakeAuthorizer(t, "system:serviceaccount:tenant:default")
	got, err := granted.AsNamespace(context.Background(), pvcClone("golden", "talos"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(Decision{Allowed: true}))

	// The user who wrote the spec being allowed does not make the
	// namespace allowed.
	got, err = fakeAuthorizer(t, "alice").AsNamespace(context.Background(), dataSourceClone("tenant", "redirect"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(Decision{Reason: "User system:serviceaccount:tenant:default has insufficient permissions in clone source namespace golden"}))
}

func TestPin(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   *cdiv1.DataSource
		want Decision
		// source is what the DataVolume clones once pinned.
		source *cdiv1.DataVolumeSource
	}{
		{"a DataSource's claim is named with its namespace", &cdiv1.DataSource{
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos"}}}},
			Decision{Allowed: true}, &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos"}}},
		{"a claim without a namespace is the DataSource's", &cdiv1.DataSource{
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "talos"}}}},
			Decision{Allowed: true}, &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "catalog", Name: "talos"}}},
		{"a snapshot is named as one", &cdiv1.DataSource{
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Name: "talos-snap"}}}},
			Decision{Allowed: true}, &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "catalog", Name: "talos-snap"}}},
		{"a DataSource of a DataSource is read from its status, as CDI's authorization reads it", &cdiv1.DataSource{
			Spec:   cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{DataSource: &cdiv1.DataSourceRefSourceDataSource{Namespace: "golden", Name: "upstream"}}},
			Status: cdiv1.DataSourceStatus{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos-v2"}}}},
			Decision{Allowed: true}, &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos-v2"}}},
		{"a DataSource that points at nothing is missing", &cdiv1.DataSource{},
			Decision{Missing: true, Reason: "DataSource catalog/ds points at no PersistentVolumeClaim or VolumeSnapshot"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a := fakeAuthorizer(t)
			tc.ds.Namespace, tc.ds.Name = "catalog", "ds"
			g.Expect(a.Client.Create(context.Background(), tc.ds)).To(Succeed())
			dv := dataSourceClone("catalog", "ds")
			got, err := a.Pin(context.Background(), dv)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			if tc.source == nil {
				return
			}
			g.Expect(dv.Spec.SourceRef).To(BeNil())
			g.Expect(dv.Spec.Source).To(Equal(tc.source))
		})
	}

	t.Run("a DataVolume that names no DataSource is left alone", func(t *testing.T) {
		g := NewWithT(t)
		dv := pvcClone("golden", "talos")
		got, err := fakeAuthorizer(t).Pin(context.Background(), dv)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(Decision{Allowed: true}))
		g.Expect(dv).To(Equal(pvcClone("golden", "talos")))
	})

	t.Run("a DataSource repointed after the authorization does not change what is cloned", func(t *testing.T) {
		g := NewWithT(t)
		a := fakeAuthorizer(t)
		ctx := context.Background()
		dv := dataSourceClone("tenant", "own")
		got, err := a.AsNamespace(ctx, dv)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(Decision{Allowed: true}))
		own := &cdiv1.DataSource{}
		g.Expect(a.Reader.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "own"}, own)).To(Succeed())
		own.Spec.Source.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "talos"}
		g.Expect(a.Client.Update(ctx, own)).To(Succeed())
		g.Expect(dv.Spec.SourceRef).To(BeNil())
		g.Expect(dv.Spec.Source).To(Equal(&cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "tenant", Name: "talos"}}))
	})
}
