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

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pooladmission "github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// cozystackFile reads a file of test/cozystack.
func cozystackFile(g Gomega, dir, name string) []byte {
	data, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "test", "cozystack", dir, name)) //nolint:gosec // A fixture of the repository.
	g.Expect(err).NotTo(HaveOccurred())
	return data
}

// TestCozystackReferenceRendering proves the reference rendering of
// test/cozystack/rendered: for each of Cozystack's sample pools, the
// objects its chart should render are admitted by the real schemas and
// webhooks, the KubeVirtMachineTemplate's workerClass carries exactly the
// settings admission resolved the pool with, and the template controller
// resolves it to the content hash admission resolved. Not parallel: it
// owns the cluster-scoped platform configuration and classes while it runs.
func TestCozystackReferenceRendering(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	platform := &workerclassv1.WorkerPlatform{
		ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.PlatformName},
		Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass:       workerclassv1.TalosClassName,
			KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
			TalosFactory:       workerclassv1.TalosFactoryDefaults{URL: workerclassv1.DefaultTalosFactoryURL, Version: "v1.13.6", SchematicID: schematic},
			KairosImages:       []workerclassv1.KairosImage{{Minor: "v1.35", Reference: kairosImage}},
		},
	}
	g.Expect(c.Create(ctx, platform)).To(Succeed())
	t.Cleanup(func() { deleteAndWait(t, platform) })
	for _, class := range []*workerclassv1.WorkerClass{
		{ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.TalosClassName}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}},
		{ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.KairosClassName}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}},
	} {
		g.Expect(c.Create(ctx, class)).To(Succeed())
		t.Cleanup(func() { deleteAndWait(t, class) })
	}
	getters := pooladmission.Request{
		Operation: pooladmission.Create,
		Classes: func(name string) (*workerclassv1.WorkerClass, error) {
			class := &workerclassv1.WorkerClass{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, class); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, errors.Join(pooladmission.ErrNotFound, err)
				}
				return nil, err
			}
			return class, nil
		},
		Platform: func() (*workerclassv1.WorkerPlatformSpec, error) { return &platform.Spec, nil },
	}

	for _, tc := range []struct{ file, class string }{
		{"default-talos.yaml", workerclassv1.TalosClassName},
		{"default-kairos.yaml", workerclassv1.KairosClassName},
		{"talos-mirrors.yaml", workerclassv1.TalosClassName},
	} {
		t.Run(tc.file, func(t *testing.T) {
			g := NewWithT(t)
			poolObj := map[string]any{}
			g.Expect(yaml.Unmarshal(cozystackFile(g, "pools", tc.file), &poolObj)).To(Succeed())
			decision, errs := pooladmission.AdmitObjects(getters, poolObj, nil)
			g.Expect(errs).To(BeEmpty())
			g.Expect(decision.ClassName).To(Equal(tc.class))
			pool, errs := pooladmission.PoolFromObject(poolObj)
			g.Expect(errs).To(BeEmpty())

			ns := cozystackCluster(t)
			var template *infrav1.KubeVirtMachineTemplate
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(cozystackFile(g, "rendered", tc.file)), 4096)
			for {
				u := &unstructured.Unstructured{}
				err := dec.Decode(&u.Object)
				if errors.Is(err, io.EOF) {
					break
				}
				g.Expect(err).NotTo(HaveOccurred())
				if len(u.Object) == 0 {
					continue
				}
				u.SetNamespace(ns)
				if u.GetKind() == "KubeVirtMachineTemplate" {
					selection, _, err := unstructured.NestedMap(u.Object, "spec", "template", "spec", "workerClass")
					g.Expect(err).NotTo(HaveOccurred())
					want := infrav1.WorkerClassSelection{Name: decision.ClassName, PoolSettings: pool.ClassSettings()}
					g.Expect(asJSON(g, selection)).To(MatchJSON(asJSON(g, want)), "the rendered workerClass is the pool's class and class settings")
					template = &infrav1.KubeVirtMachineTemplate{}
					template.SetNamespace(ns)
					template.SetName(u.GetName())
				}
				g.Expect(c.Create(ctx, u)).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
			}
			g.Expect(template).NotTo(BeNil(), "the rendering has a KubeVirtMachineTemplate")
			waitResolved(t, template)
			g.Expect(template.Status.Resolved.WorkerClassName).To(Equal(decision.ClassName))
			g.Expect(template.Status.Resolved.ContentHash).To(Equal(decision.Result.Hash), "the template resolves as admission resolved the pool")
		})
	}
}

// cozystackCluster makes a namespace with the Cluster Cozystack names
// kubernetes-<cluster> for the pools' spec.cluster example.
func cozystackCluster(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t)}}
	g.Expect(c.Create(ctx, namespace)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-example", Namespace: namespace.Name},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.example.example.com", Port: 6443}},
	}
	g.Expect(c.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(c.Status().Update(ctx, cluster)).To(Succeed())
	return namespace.Name
}

func asJSON(g Gomega, v any) string {
	data, err := json.Marshal(v)
	g.Expect(err).NotTo(HaveOccurred())
	return string(data)
}

// deleteAndWait deletes a cluster-scoped object and waits until it is
// gone, so the next test may create its own.
func deleteAndWait(t *testing.T, obj client.Object) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(client.IgnoreNotFound(c.Delete(ctx, obj))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)))
	}).Should(BeTrue())
}
