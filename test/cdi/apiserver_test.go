//go:build node

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

package cdi

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// TestCloneFromAnotherNamespaceIsAdmittedAsItsCreator: cdi-apiserver's
// webhooks, registered as CDI's operator registers them, decide a
// DataVolume that clones a claim of another namespace as the user who
// creates it: a user granted create on datavolumes/source there gets
// the clone token cdi-controller requires; one without is refused in
// CDI's words. cdi-apiserver runs in a network namespace of its own
// (it binds :8443, as cdi-controller does on the host) and talks with the
// apiserver through its forwards. No node is needed; root is
// (namespaces), and CDI's binaries (hack/node/cdi.sh).
func TestCloneFromAnotherNamespaceIsAdmittedAsItsCreator(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cdi-controller runs in namespaces of its own: root only")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	scheme := envtest.DefaultScheme()
	if err := cdiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env, err := envtest.Start(ctx, envtest.Options{Scheme: scheme, CRDPaths: envtest.ExternalCRDPaths()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := Start(ctx, env, Options{LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})

	// cdi-controller runs: it makes the CDIConfig.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		return env.Client.Get(ctx, client.ObjectKey{Name: "config"}, &cdiv1.CDIConfig{}) == nil, nil
	}); err != nil {
		t.Fatalf("cdi-controller made no CDIConfig: %v\n%s", err, c.Process.Tail())
	}

	const source, target = "golden", "tenant"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "clone-test"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{cdiv1.SchemeGroupVersion.Group}, Resources: []string{"datavolumes"}, Verbs: []string{"create"}},
		{APIGroups: []string{cdiv1.SchemeGroupVersion.Group}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}},
	}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: source}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}},
		role,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: "both"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}, {Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: source, Name: "alice"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}},
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	clone := func(name string) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: name},
			Spec: cdiv1.DataVolumeSpec{
				Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: source, Name: "disk"}},
				Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")},
				}},
			},
		}
	}
	as := func(user string) client.Client {
		cfg, err := env.AddUser(user)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}

	allowed := clone("allowed")
	if err := as("alice").Create(ctx, allowed); err != nil {
		t.Fatalf("alice, who may clone from %s: %v\ncdi-apiserver: %s", source, err, c.APIServer.Tail())
	}
	if allowed.Annotations["cdi.kubevirt.io/storage.clone.token"] == "" {
		t.Errorf("alice's DataVolume has no clone token: %v", allowed.Annotations)
	}
	err = as("mallory").Create(ctx, clone("refused"))
	if err == nil || !strings.Contains(err.Error(), "insufficient permissions in clone source namespace "+source) {
		t.Errorf("mallory, who may not clone from %s: %v, want CDI's refusal", source, err)
	}
}
