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
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilversion "k8s.io/apimachinery/pkg/util/version"
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
