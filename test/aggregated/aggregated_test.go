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

package aggregated_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/controllers"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
	"github.com/cozystack/cluster-api-workers/test/aggregated"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

var (
	env *envtest.Environment
	ctx = context.Background()
)

// One kube-apiserver with the WorkerClass CRDs, the pool webhooks and the
// private-key policy as the releases install them, but no pool CRD: the
// pool kind is the aggregated apiserver's.
func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	os.Exit(run(m))
}

func run(m *testing.M) int {
	opts := envtest.WorkerClassOptions(false)
	opts.CRDPaths = nil
	var err error
	if env, err = envtest.Start(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	// The server runs as the user the RBAC file grants, so the file is
	// the complete set of what it needs.
	if err := env.CreateManifests(ctx, []string{filepath.Join(envtest.RepoRoot(), "test", "aggregated", "testdata", "apiserver-rbac.yaml")}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	identity, err := env.AddUser("cozystack-api")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server, err := aggregated.Start(ctx, env, identity)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	if err := configurePlatform(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// configurePlatform creates the built-in classes and the platform
// configuration as the class controller does, with the Kubernetes minors
// and images the pools below select.
func configurePlatform() error {
	if err := controllers.EnsureDefaults(ctx, env.Client); err != nil {
		return err
	}
	platform := &workerclassv1.WorkerPlatform{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, platform); err != nil {
		return err
	}
	platform.Spec.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}}
	platform.Spec.TalosFactory.Version = "v1.13.6"
	platform.Spec.TalosFactory.SchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	platform.Spec.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.35", Reference: "ghcr.io/cozystack/kairos-worker@sha256:" + strings.Repeat("5e", 32)}}
	return env.Client.Update(ctx, platform)
}

// The pool webhooks and the private-key policy judge a pool kind that an
// aggregated apiserver serves: the kube-apiserver runs no admission for
// it, it proxies the request, and the aggregated apiserver's recommended
// admission chain calls the webhooks and evaluates the policy.
func TestPoolAdmissionOnAnAggregatedAPI(t *testing.T) {
	g := NewWithT(t)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err := env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PoolResource.GroupResource().String()}, crd)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the kube-apiserver must not serve the pool kind itself: %v", err)
	apiService := &unstructured.Unstructured{}
	apiService.SetAPIVersion("apiregistration.k8s.io/v1")
	apiService.SetKind("APIService")
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: "v1alpha1.apps.cozystack.io"}, apiService)).To(Succeed())
	service, _, _ := unstructured.NestedString(apiService.Object, "spec", "service", "name")
	g.Expect(service).To(Equal(aggregated.ServiceName), "the group is the aggregated apiserver's")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-aggregated"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	pool := func(name string, spec map[string]any) *unstructured.Unstructured {
		return envtest.NewPool(ns.Name, name, spec)
	}
	refusedByWebhook := func(g Gomega, err error, message string) {
		g.ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
		g.ExpectWithOffset(1, err.Error()).To(And(
			MatchRegexp(`admission webhook "[a-z]+\.kubernetesnodes\.workerclass\.cozystack\.io" denied the request`),
			ContainSubstring(message)))
	}

	t.Run("CREATE without a class stores the platform default the mutating webhook writes", func(t *testing.T) {
		g := NewWithT(t)
		p := pool("omitted", map[string]any{"cluster": "example", "version": "v1.35"})
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		expectClass(g, p, workerclassv1.TalosClassName)
	})
	t.Run("CREATE naming no class that exists is refused", func(t *testing.T) {
		err := env.Client.Create(ctx, pool("missing", map[string]any{"cluster": "example", "version": "v1.35", "workerClassName": "no-such-class"}))
		refusedByWebhook(NewWithT(t), err, `spec.workerClassName: Not found: "no-such-class"`)
	})
	t.Run("UPDATE switching the bootstrap family in place is refused", func(t *testing.T) {
		g := NewWithT(t)
		p := pool("switch", map[string]any{"cluster": "example", "version": "v1.35", "workerClassName": workerclassv1.TalosClassName})
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		err := envtest.ReplacePoolSpec(ctx, env.Client, p, map[string]any{"cluster": "example", "version": "v1.35", "workerClassName": workerclassv1.KairosClassName})
		refusedByWebhook(g, err, "from class talos (bootstrap family talos) to class kairos (bootstrap family kairos) in place is refused")
		expectClass(g, p, workerclassv1.TalosClassName)
	})
	t.Run("the private-key policy refuses a classless UPDATE, which the webhooks never see", func(t *testing.T) {
		g := NewWithT(t)
		legacy := pool("legacy", map[string]any{"cluster": "example", "version": "v1.35"})
		g.Expect(env.CreateLegacyPools(ctx, legacy)).To(Succeed())
		public, private := sshkeystest.KeyPair()

		err := envtest.ReplacePoolSpec(ctx, env.Client, legacy, map[string]any{"cluster": "example", "version": "v1.35", "sshKeys": []any{private}})
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
		g.Expect(err.Error()).To(And(
			ContainSubstring("ValidatingAdmissionPolicy 'workerclass-pool-private-keys'"),
			ContainSubstring("spec.sshKeys: "+sshkeys.PolicyMessage)))
		for _, line := range strings.Split(private, "\n") {
			if len(line) > 16 && !strings.HasPrefix(line, "-----") {
				g.Expect(err.Error()).NotTo(ContainSubstring(line), "the refusal echoes the private key")
			}
		}

		g.Expect(envtest.ReplacePoolSpec(ctx, env.Client, legacy, map[string]any{"cluster": "example", "version": "v1.35", "sshKeys": []any{public}})).To(Succeed(),
			"a public key passes the policy")
		got, err := envtest.GetPool(ctx, env.Client, legacy)
		g.Expect(err).NotTo(HaveOccurred())
		_, found, _ := envtest.PoolClass(got)
		g.Expect(found).To(BeFalse(), "the UPDATE reached no webhook: the pool stays classless")
	})
}

func expectClass(g Gomega, pool *unstructured.Unstructured, class string) {
	got, err := envtest.GetPool(ctx, env.Client, pool)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	name, _, _ := envtest.PoolClass(got)
	g.ExpectWithOffset(1, name).To(Equal(class), "stored class")
	g.ExpectWithOffset(1, got.GetLabels()).To(HaveKeyWithValue(workerclassv1.WorkerClassLabel, class), "class label")
}
