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

package workerclass_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// One apiserver with the WorkerClass CRDs, the pool test CRD, the webhooks
// and the class controller serves every test in this package.
var (
	env *envtest.Environment
	ctx = context.Background()
)

const (
	schematic  = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	fixedClass = "kairos-example-v1-35-6-r1"
	talosR1    = "talos-example-r1"
)

var diskDigest = "sha256:" + strings.Repeat("5e", 32)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	// Two shared cores: controllers and webhooks may take seconds to react.
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	var err error
	env, err = envtest.Start(ctx, envtest.WorkerClassOptions(true))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := configurePlatform(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// configurePlatform waits for the controller's defaults, fills in the
// hoster's part of the platform configuration and publishes the seed's
// example classes.
func configurePlatform() error {
	platform := &workerclassv1.WorkerPlatform{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, platform) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the controller did not create the platform configuration: %w", err)
	}
	platform.Spec.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.34", Patch: "v1.34.9"}, {Minor: "v1.35", Patch: "v1.35.6"}}
	platform.Spec.TalosFactory.Version = "v1.13.6"
	platform.Spec.TalosFactory.SchematicID = schematic
	platform.Spec.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.35", Reference: "ghcr.io/cozystack/kairos-worker@" + diskDigest}}
	if err := env.Client.Update(ctx, platform); err != nil {
		return fmt.Errorf("configuring the platform: %w", err)
	}
	for _, c := range []*workerclassv1.WorkerClass{
		{ObjectMeta: metav1.ObjectMeta{Name: talosR1}, Spec: workerclassv1.WorkerClassSpec{
			Bootstrap: workerclassv1.BootstrapTalos,
			Talos:     &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: fixedClass}, Spec: workerclassv1.WorkerClassSpec{
			Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6",
				Reference: "registry.example.com/workers/kairos-worker@" + diskDigest},
		}},
	} {
		if err := env.Client.Create(ctx, c); err != nil {
			return fmt.Errorf("creating class %s: %w", c.Name, err)
		}
	}
	return nil
}

func ptr(s string) *string { return &s }

var namespaceCounter atomic.Int32

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tenant-%d", namespaceCounter.Add(1))}}
	NewWithT(t).Expect(env.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// createPool creates a pool and deletes it when the test ends, so classes
// are unused between tests.
func createPool(t *testing.T, ns, name string, spec map[string]any) (*unstructured.Unstructured, error) {
	t.Helper()
	pool := envtest.NewPool(ns, name, spec)
	err := env.Client.Create(ctx, pool, client.FieldValidation(metav1.FieldValidationStrict))
	if err == nil {
		t.Cleanup(func() { deletePool(t, pool) })
	}
	return pool, err
}

func deletePool(t *testing.T, pool *unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(client.IgnoreNotFound(env.Client.Delete(ctx, pool))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool.DeepCopy()))
	}).Should(BeTrue())
}

func getPool(g Gomega, pool *unstructured.Unstructured) *unstructured.Unstructured {
	got, err := envtest.GetPool(ctx, env.Client, pool)
	g.Expect(err).NotTo(HaveOccurred())
	return got
}

func classOf(g Gomega, pool *unstructured.Unstructured) (string, bool) {
	name, found, err := envtest.PoolClass(pool)
	g.Expect(err).NotTo(HaveOccurred())
	return name, found
}

func expectClass(g Gomega, pool *unstructured.Unstructured, class string) {
	got := getPool(g, pool)
	name, _ := classOf(g, got)
	g.ExpectWithOffset(1, name).To(Equal(class), "stored class")
	g.ExpectWithOffset(1, got.GetLabels()).To(HaveKeyWithValue(workerclassv1.WorkerClassLabel, class), "class label")
}

// replaceSpec updates a pool with a whole new spec, as a full replace does.
func replaceSpec(pool *unstructured.Unstructured, spec map[string]any) error {
	return envtest.ReplacePoolSpec(ctx, env.Client, pool, spec)
}

func setPlatformDefault(g Gomega, class string) {
	g.Eventually(func() error {
		platform := &workerclassv1.WorkerPlatform{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, platform); err != nil {
			return err
		}
		platform.Spec.DefaultClass = class
		return env.Client.Update(ctx, platform)
	}).Should(Succeed())
}

// classEvents returns the reasons of the events about a class.
func classEvents(g Gomega, class *workerclassv1.WorkerClass) []string {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctx, &list)).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "WorkerClass" && e.Regarding.Name == class.Name && e.Regarding.UID == class.UID {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}
