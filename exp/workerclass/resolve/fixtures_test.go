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

package resolve

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

var (
	schematicA = strings.Repeat("a", 64)
	schematicB = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	digestA    = "sha256:" + strings.Repeat("1", 64)
	digestB    = "sha256:" + strings.Repeat("2", 64)
	kairosRef  = "registry.example.com/workers/kairos-worker@" + digestA
)

func ptr(s string) *string { return &s }

// testPlatform is a platform with two minors, Talos defaults, one golden
// image and one platform Kairos image.
func testPlatform() *workerclassv1.WorkerPlatformSpec {
	return &workerclassv1.WorkerPlatformSpec{
		DefaultClass: workerclassv1.TalosClassName,
		KubernetesVersions: []workerclassv1.KubernetesVersion{
			{Minor: "v1.34", Patch: "v1.34.9"},
			{Minor: "v1.35", Patch: "v1.35.6"},
		},
		TalosFactory: workerclassv1.TalosFactoryDefaults{
			URL:         "https://factory.talos.dev",
			Version:     "v1.13.6",
			SchematicID: schematicA,
		},
		GoldenImages: []workerclassv1.GoldenImage{
			{Version: "v1.13.6", SchematicID: schematicA, Source: workerclassv1.GoldenImageSource{
				Kind: workerclassv1.GoldenDataSource, Namespace: "cozy-golden", Name: "talos-v1-13-6-a"}},
			{Version: "v1.13.5", SchematicID: schematicA, Source: workerclassv1.GoldenImageSource{
				Kind: workerclassv1.GoldenPersistentVolumeClaim, Namespace: "cozy-golden", Name: "talos-v1-13-5-a"}},
		},
		KairosImages: []workerclassv1.KairosImage{
			{Minor: "v1.35", Reference: "ghcr.io/cozystack/kairos-worker@" + digestB},
		},
	}
}

func class(name string, spec workerclassv1.WorkerClassSpec) *workerclassv1.WorkerClass {
	return &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func talosClass(t *workerclassv1.TalosBaseline) *workerclassv1.WorkerClass {
	return class("talos-example-r1", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos, Talos: t})
}

func kairosClass() *workerclassv1.WorkerClass {
	return class(workerclassv1.KairosClassName, workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos})
}

func fixedKairosClass() *workerclassv1.WorkerClass {
	return class("kairos-example-v1-35-6-r1", workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapKairos,
		Image:     &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: kairosRef},
	})
}

func factoryURL(version, schematic string) string {
	return "https://factory.talos.dev/image/" + schematic + "/" + version + "/nocloud-amd64.raw.xz"
}
