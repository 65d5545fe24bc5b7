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

package packaging

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// cozystackPackage is the release's Cozystack package, written by
// hack/release-manifests.sh.
const cozystackPackage = "cozystack-capi-providers.yaml"

// cozystackProviders are the provider objects of the package: their
// version is the release's with a suffix, and their ConfigMap carries the
// release's components file.
var cozystackProviders = []struct {
	kind, name, versionSuffix, components string
}{
	{"BootstrapProvider", "kairos-kubeadm", "-bootstrap-kairos-kubeadm", "bootstrap-components.yaml"},
	{"InfrastructureProvider", "kubevirt-workers", "-infraprovider-kubevirt-workers", "infrastructure-components.yaml"},
}

// cozystackNamespace is the namespace Cozystack installs every Cluster API
// provider into, as its package reconciler makes it for packages installed
// privileged (cozystack/cozystack commit 3c780acd4,
// packages/core/platform/sources/capi-provider-*.yaml and
// internal/operator/package_reconciler.go): a Pod Security level of its
// own, which no provider's install may change.
var cozystackNamespace = corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
	Name:        "cozy-cluster-api",
	Labels:      map[string]string{"cozystack.io/system": "true", "pod-security.kubernetes.io/enforce": "privileged"},
	Annotations: map[string]string{"helm.sh/resource-policy": "keep"},
}}

// cozystackBlocks are the blocks of docs/packaging.md that
// TestCozystackPackageWithOperator runs as written.
var cozystackBlocks = map[string]string{"cozystack-package": "sh"}

// cozystackSelectors are the fetchConfig selectors of the providers
// Cozystack installs into the namespace they share (cozystack/cozystack
// commit 3c780acd4, packages/system/capi-providers-{core,bootstrap,
// infraprovider,cpprovider}/templates/providers.yaml). The operator refuses
// a selector that matches two ConfigMaps of its namespace, so the
// package's ConfigMaps must match none of them.
var cozystackSelectors = map[string]map[string]string{
	"CoreProvider cluster-api":        {"core-components": "cozy"},
	"BootstrapProvider kubeadm":       {"bootstrap-components": "cozy", "bootstrap-provider": "kubeadm"},
	"BootstrapProvider talos":         {"bootstrap-components": "cozy", "bootstrap-provider": "talos"},
	"InfrastructureProvider kubevirt": {"infraprovider-components": "cozy"},
	"ControlPlaneProvider kamaji":     {"cp-components": "cozy"},
}

// TestCozystackPackage checks the release's Cozystack package against the
// release it comes from: each provider object's selector matches exactly
// one ConfigMap of the package, named by the provider's version as the
// operator reads it, whose components are the release's components file
// byte for byte (gzipped, with the operator's compressed annotation) and
// whose metadata is the release's metadata.yaml; no object names a
// namespace (the hoster's shared namespace is the one it is applied to);
// no ConfigMap falls under a selector of a provider Cozystack installs
// today; and the file holds no Helm template syntax, so that it goes into a
// chart's templates/ as it is.
func TestCozystackPackage(t *testing.T) {
	g := NewWithT(t)
	releaseDir := release(t, "pod")
	data, err := os.ReadFile(filepath.Join(releaseDir, cozystackPackage)) //nolint:gosec // The release the test built.
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).NotTo(ContainSubstring("{{"), "a chart's templates/ takes the package as it is")
	metadata, err := os.ReadFile(filepath.Join(releaseDir, "metadata.yaml")) //nolint:gosec // The release the test built.
	g.Expect(err).NotTo(HaveOccurred())
	version := releaseVersion(t, filepath.Join(releaseDir, "metadata.yaml"))

	objs := decode(t, data)
	g.Expect(objs).To(HaveLen(2 * len(cozystackProviders)))
	configMaps := byKind(objs, "ConfigMap")
	for _, o := range objs {
		g.Expect(o.GetNamespace()).To(BeEmpty(), "%s %s goes into the namespace it is applied to", o.GetKind(), o.GetName())
	}
	for _, cm := range configMaps {
		for provider, selector := range cozystackSelectors {
			g.Expect(selects(selector, cm.GetLabels())).To(BeFalse(), "Cozystack's %s would select the ConfigMap %s", provider, cm.GetName())
		}
	}

	for _, want := range cozystackProviders {
		var p *unstructured.Unstructured
		for _, o := range byKind(objs, want.kind) {
			if o.GetName() == want.name {
				p = o
			}
		}
		g.Expect(p).NotTo(BeNil(), "the package holds the %s %s", want.kind, want.name)
		if p == nil {
			continue
		}
		g.Expect(p.GetAPIVersion()).To(Equal("operator.cluster.x-k8s.io/v1alpha2"))
		providerVersion, _, _ := unstructured.NestedString(p.Object, "spec", "version")
		g.Expect(providerVersion).To(Equal(version+want.versionSuffix), want.name)
		_, err := utilversion.ParseSemantic(providerVersion)
		g.Expect(err).NotTo(HaveOccurred(), "the operator parses %s's version", want.name)
		selector, _, _ := unstructured.NestedStringMap(p.Object, "spec", "fetchConfig", "selector", "matchLabels")

		var selected []*unstructured.Unstructured
		for _, cm := range configMaps {
			if selects(selector, cm.GetLabels()) {
				selected = append(selected, cm)
			}
		}
		g.Expect(selected).To(HaveLen(1), "%s's selector %v matches one ConfigMap", want.name, selector)
		if len(selected) != 1 {
			continue
		}
		cm := selected[0]
		g.Expect(cm.GetName()).To(Equal(providerVersion), "the operator reads the version from the ConfigMap's name")
		g.Expect(cm.GetAnnotations()).To(HaveKeyWithValue("provider.cluster.x-k8s.io/compressed", "true"))
		encoded, _, _ := unstructured.NestedString(cm.Object, "binaryData", "components")
		compressed, err := base64.StdEncoding.DecodeString(encoded)
		g.Expect(err).NotTo(HaveOccurred())
		zr, err := gzip.NewReader(bytes.NewReader(compressed))
		g.Expect(err).NotTo(HaveOccurred())
		components, err := io.ReadAll(zr)
		g.Expect(err).NotTo(HaveOccurred())
		released, err := os.ReadFile(filepath.Join(releaseDir, want.components)) //nolint:gosec // The release the test built.
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bytes.Equal(components, released)).To(BeTrue(), "%s carries the release's %s as it is", cm.GetName(), want.components)
		gotMetadata, _, _ := unstructured.NestedString(cm.Object, "data", "metadata")
		g.Expect(strings.TrimSpace(gotMetadata)).To(Equal(strings.TrimSpace(string(metadata))), "%s carries the release's metadata.yaml", cm.GetName())
	}
}

// TestCozystackPackageWithOperator installs the release's Cozystack
// package with the Cluster API operator (installOperator, as
// TestClusterAPIOperator) into the namespace Cozystack's providers share,
// which exists with Cozystack's labels and holds Cluster API's core
// provider installed as Cozystack's capi-providers-core package installs
// it (a ConfigMap named by its version, selected by core-components=cozy).
// The docs' block applies the package as written. Both our providers reach
// ProviderInstalled, Ready and their version; every object of their
// components is in the cluster as the provider's own (the namespaced ones
// in the shared namespace), their managers with the release's image and
// their CRDs with the contract label. The namespace keeps every label and
// annotation it had, Pod Security's included, and gains no label. The core
// provider stays Ready at its version, its
// Deployment at its generation, and every object of its components its
// own. A plain apiserver is enough (no manager runs a Pod here), so this
// costs the operator's start-up and the installs, not
// TestClusterAPIOperator's harness.
func TestCozystackPackageWithOperator(t *testing.T) {
	start := time.Now()
	ctx := t.Context()
	g := NewWithT(t)

	var block docBlock
	for _, b := range markedBlocks(t, "docs/packaging.md") {
		if cozystackBlocks[b.name] != "" {
			g.Expect(b.lang).To(Equal(cozystackBlocks[b.name]), b.name)
			block = b
		}
	}
	g.Expect(block.name).To(Equal("cozystack-package"), "docs/packaging.md has the block marked <!-- docs-test: cozystack-package -->")
	operator := tool(t, "cluster-api-operator")
	kubectl := tool(t, "kubectl")
	releaseDir := release(t, "pod")
	version := releaseVersion(t, filepath.Join(releaseDir, "metadata.yaml"))
	g.Expect(version).To(Equal("v0.1.0"), "the docs' block installs the release v0.1.0")

	env, err := envtest.Start(ctx, envtest.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c, _ := warningClient(t, env)
	op := installOperator(t, operator, env.Config)
	namespace := cozystackNamespace.Name
	g.Expect(c.Create(ctx, cozystackNamespace.DeepCopy())).To(Succeed())

	// Cluster API's core provider, as Cozystack's capi-providers-core
	// package installs it (templates/configmaps.yaml, providers.yaml).
	capi, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	g.Expect(err).NotTo(HaveOccurred())
	coreVersion := clusterAPIVersion + "-core"
	core := coreComponents(t, capi)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write([]byte(core))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(zw.Close()).To(Succeed())
	coreMetadata, err := os.ReadFile(filepath.Join(capi, "metadata.yaml")) //nolint:gosec // Cluster API's module.
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: coreVersion, Namespace: namespace,
			Labels:      map[string]string{"core-components": "cozy"},
			Annotations: map[string]string{"provider.cluster.x-k8s.io/compressed": "true"},
		},
		BinaryData: map[string][]byte{"components": gz.Bytes()},
		Data:       map[string]string{"metadata": string(coreMetadata)},
	})).To(Succeed())
	coreProvider := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operator.cluster.x-k8s.io/v1alpha2",
		"kind":       "CoreProvider",
		"metadata":   map[string]any{"name": "cluster-api", "namespace": namespace},
		"spec": map[string]any{
			"version":     coreVersion,
			"fetchConfig": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"core-components": "cozy"}}},
		},
	}}
	g.Expect(c.Create(ctx, coreProvider, strict)).To(Succeed())
	coreWant := operatorProviderWant{"CoreProvider", "cluster-api", namespace, coreVersion}
	waitProvidersInstalled(ctx, g, c, op, []operatorProviderWant{coreWant})
	coreObjects := decode(t, []byte(core))
	coreDeployment := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: deployment(t, coreObjects).Name}, coreDeployment)).To(Succeed())
	installedCore := time.Since(start)

	// The docs' block, as written, in a checkout whose out/v0.1.0 is the
	// release.
	work := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(work, "out"), 0o750)).To(Succeed())
	g.Expect(os.Symlink(releaseDir, filepath.Join(work, "out", version))).To(Succeed())
	bin := t.TempDir()
	g.Expect(os.Symlink(kubectl, filepath.Join(bin, "kubectl"))).To(Succeed())
	script := filepath.Join(t.TempDir(), "cozystack-package.sh")
	g.Expect(os.WriteFile(script, []byte("set -euo pipefail\n"+block.script+"\n"), 0o600)).To(Succeed())
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := commandIn(runCtx, []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"KUBECONFIG=" + writeKubeconfig(t, env.Config),
	}, work, "bash", script)
	g.Expect(err).NotTo(HaveOccurred(), "the docs' cozystack-package block, as written:\n%s\noutput:\n%s", block.script, out)

	want := []operatorProviderWant{coreWant}
	for _, p := range cozystackProviders {
		want = append(want, operatorProviderWant{p.kind, p.name, namespace, version + p.versionSuffix})
	}
	waitProvidersInstalled(ctx, g, c, op, want)

	for _, p := range providers {
		objs := readObjects(t, filepath.Join(releaseDir, p.components))
		checkInstalledAsOwn(ctx, g, c, objs, namespace, p.label)
		dep := deployment(t, objs)
		installed := &appsv1.Deployment{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: dep.Name}, installed)).To(Succeed(), "the operator applied the %s manager", p.name)
		g.Expect(installed.Spec.Template.Spec.Containers[0].Image).To(Equal(dep.Spec.Template.Spec.Containers[0].Image))
		g.Expect(contractCRDs(ctx, g, c, p.label)).To(BeNumerically(">=", 2), "the %s CRDs are installed and labelled with the contract", p.name)
	}

	ns := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: namespace}, ns)).To(Succeed())
	for k, v := range cozystackNamespace.Labels {
		g.Expect(ns.Labels).To(HaveKeyWithValue(k, v), "the shared namespace keeps its label %s", k)
	}
	for k, v := range cozystackNamespace.Annotations {
		g.Expect(ns.Annotations).To(HaveKeyWithValue(k, v), "the shared namespace keeps its annotation %s", k)
	}
	added := maps.Clone(ns.Labels)
	maps.DeleteFunc(added, func(k, _ string) bool { _, had := cozystackNamespace.Labels[k]; return had })
	delete(added, corev1.LabelMetadataName) // the apiserver's own
	g.Expect(added).To(BeEmpty(), "no provider's install adds a label to the shared namespace")

	// The core provider is as it was.
	coreAfter := operatorProvider(ctx, g, c, "CoreProvider", namespace, "cluster-api")
	installedVersion, _, _ := unstructured.NestedString(coreAfter.Object, "status", "installedVersion")
	g.Expect(installedVersion).To(Equal(coreVersion))
	g.Expect(conditionStatus(coreAfter, "Ready")).To(Equal("True"), conditionsOf(coreAfter))
	depAfter := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(coreDeployment), depAfter)).To(Succeed())
	g.Expect(depAfter.Generation).To(Equal(coreDeployment.Generation), "the core manager's Deployment is not changed")
	checkInstalledAsOwn(ctx, g, c, coreObjects, namespace, "cluster-api")
	t.Logf("installed the core provider in %s, then the Cozystack package in %s", installedCore.Round(time.Second), (time.Since(start) - installedCore).Round(time.Second))
}

// checkInstalledAsOwn checks that every object of a provider's components
// but its Namespace is in the cluster, the namespaced ones in namespace,
// labelled as the provider's (label, the value of cluster.x-k8s.io/provider):
// no other provider's install replaced one of them.
func checkInstalledAsOwn(ctx context.Context, g Gomega, c client.Client, objs []*unstructured.Unstructured, namespace, label string) {
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		key := client.ObjectKey{Namespace: namespace, Name: o.GetName()}
		if clusterScoped[o.GetKind()] {
			key.Namespace = ""
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(c.Get(ctx, key, got)).To(Succeed(), "%s %s is installed", o.GetKind(), key)
		g.Expect(got.GetLabels()).To(HaveKeyWithValue(providerLabel, label), "%s %s is %s's", o.GetKind(), key, label)
	}
}
