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

package webhooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// With the webhook server stopped, an UPDATE of a classless pool still
// succeeds (the matchConditions never send it), while a class-defaulting
// CREATE and any classified UPDATE fail closed.
func TestPoolWebhooksDown(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	// Two shared cores: controllers and webhooks may take seconds to react.
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	g := NewWithT(t)
	ctx := context.Background()
	env, err := envtest.Start(ctx, envtest.WorkerClassOptions(false))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })

	g.Expect(env.Client.Create(ctx, &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos"},
		Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &workerclassv1.WorkerPlatform{ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.PlatformName},
		Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass:       "talos",
			KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
			TalosFactory:       workerclassv1.TalosFactoryDefaults{Version: "v1.13.6", SchematicID: strings.Repeat("a", 64)},
		}})).To(Succeed())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())

	legacy := envtest.NewPool(ns.Name, "legacy", map[string]any{"cluster": "c", "minReplicas": int64(1)})
	g.Expect(env.CreateLegacyPools(ctx, legacy)).To(Succeed())
	classified := envtest.NewPool(ns.Name, "classified", map[string]any{"cluster": "c", "version": "v1.35"})
	g.Expect(env.Client.Create(ctx, classified)).To(Succeed())
	g.Expect(classified.GetLabels()).To(HaveKeyWithValue(workerclassv1.WorkerClassLabel, "talos"), "the webhooks are up")

	env.StopManager()

	update := func(name string, mutate func(spec map[string]any)) error {
		pool := envtest.NewPool(ns.Name, name, nil)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		spec, _, _ := unstructured.NestedMap(pool.Object, "spec")
		mutate(spec)
		pool.Object["spec"] = spec
		return env.Client.Update(ctx, pool)
	}
	g.Expect(update("legacy", func(s map[string]any) { s["minReplicas"] = int64(3) })).To(Succeed(),
		"a classless UPDATE is never sent to the webhook")
	g.Expect(update("legacy", func(s map[string]any) { s["workerClassName"] = "" })).To(Succeed(),
		"an empty class on a classless pool is not a class")

	err = env.Client.Create(ctx, envtest.NewPool(ns.Name, "new", map[string]any{"cluster": "c", "version": "v1.35"}))
	g.Expect(err).To(HaveOccurred(), "a class-defaulting CREATE fails closed")
	g.Expect(err.Error()).To(ContainSubstring("failed calling webhook"))

	g.Expect(update("classified", func(s map[string]any) { s["minReplicas"] = int64(2) })).To(
		MatchError(ContainSubstring("failed calling webhook")), "a classified UPDATE fails closed")
	g.Expect(update("legacy", func(s map[string]any) { s["workerClassName"] = "talos" })).To(
		MatchError(ContainSubstring("failed calling webhook")), "selecting a class fails closed")

	// A classless UPDATE reaches no webhook, and still stores nothing but
	// a public key line: the admission policy refuses every private key
	// encoding in the apiserver.
	g.Expect(update("legacy", func(s map[string]any) { s["sshKeys"] = []any{sshkeystest.PublicKey()} })).To(Succeed(),
		"a public key is not a private key")
	for name, key := range sshkeystest.EncodedPrivateKeys() {
		err := update("legacy", func(s map[string]any) { s["sshKeys"] = []any{key} })
		g.Expect(err).To(MatchError(ContainSubstring("spec.sshKeys: "+sshkeys.PolicyMessage)), name)
		for _, line := range strings.Split(key, "\n") {
			if len(line) > 8 {
				g.Expect(err.Error()).NotTo(ContainSubstring(line), "%s: the refusal echoes the key", name)
			}
		}
	}
}
