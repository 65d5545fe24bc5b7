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

package restore

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

var schematic = strings.Repeat("c", 64)

func platform() *workerclassv1.WorkerPlatformSpec {
	return &workerclassv1.WorkerPlatformSpec{
		DefaultClass:       "talos",
		KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
		TalosFactory:       workerclassv1.TalosFactoryDefaults{URL: "https://factory.talos.dev", Version: "v1.13.6", SchematicID: schematic},
		GoldenImages: []workerclassv1.GoldenImage{{Version: "v1.13.6", SchematicID: schematic,
			Source: workerclassv1.GoldenImageSource{Kind: workerclassv1.GoldenDataSource, Namespace: "golden", Name: "talos"}}},
		KairosImages: []workerclassv1.KairosImage{{Minor: "v1.35", Reference: "ghcr.io/x/kairos@sha256:" + strings.Repeat("1", 64)}},
	}
}

func poolObject(spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(workerclassv1.PoolGroupVersionKind)
	u.SetNamespace("tenant")
	u.SetName("example")
	u.SetLabels(map[string]string{workerclassv1.WorkerClassLabel: "x", "team": "a"})
	u.SetResourceVersion("42")
	return u
}

func resolvePool(t *testing.T, class *workerclassv1.WorkerClass, obj *unstructured.Unstructured, substrate resolve.Substrate) *resolve.Result {
	t.Helper()
	pool, errs := admission.PoolFromObject(obj.Object)
	if len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	res, errs := resolve.Resolve(resolve.Input{Class: class, Pool: pool.Settings, Platform: platform(), Substrate: substrate})
	if len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	return res
}

func class(name string, spec workerclassv1.WorkerClassSpec) *workerclassv1.WorkerClass {
	return &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func TestLegacyPool(t *testing.T) {
	baseline := class("talos-example-r1", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos, Talos: &workerclassv1.TalosBaseline{
		TalosScalars:    workerclassv1.TalosScalars{Version: ptr("v1.13.6"), ImageFactoryCA: ptr("ca")},
		RegistryMirrors: map[string]workerclassv1.RegistryMirror{"docker.io": {Endpoints: []string{"https://mirror.example.com"}}},
	}})

	t.Run("a classified Talos pool's effective settings land in the pool's own fields", func(t *testing.T) {
		obj := poolObject(map[string]any{"cluster": "example", "workerClassName": "talos-example-r1", "version": "v1.35",
			"minReplicas": int64(2), "gpus": []any{map[string]any{"name": "nvidia.com/GA102"}}})
		res := resolvePool(t, baseline, obj, resolve.KubeVirt)
		legacy, err := LegacyPool(obj, res, platform(), resolve.KubeVirt)
		if err != nil {
			t.Fatal(err)
		}
		spec := legacy.Object["spec"].(map[string]any)
		if _, ok := spec["workerClassName"]; ok {
			t.Error("the class name must go")
		}
		if _, ok := legacy.GetLabels()[workerclassv1.WorkerClassLabel]; ok || legacy.GetLabels()["team"] != "a" {
			t.Errorf("labels %v: the class label must go, others stay", legacy.GetLabels())
		}
		if legacy.GetResourceVersion() != "" {
			t.Error("server-set metadata must go")
		}
		if spec["minReplicas"] != int64(2) || spec["cluster"] != "example" || spec["version"] != "v1.35" {
			t.Errorf("unrelated pool fields changed: %v", spec)
		}
		want := map[string]any{
			"version": "v1.13.6", "schematicID": schematic, "imageFactoryURL": "https://factory.talos.dev",
			"imageFactoryCA": "ca", "installerRepository": "factory.talos.dev/installer/" + schematic,
		}
		if !reflect.DeepEqual(spec["talos"], want) {
			t.Errorf("talos = %v, want %v", spec["talos"], want)
		}
		if mods := spec["kernelModules"].([]any); len(mods) != 4 {
			t.Errorf("the NVIDIA modules must be written out: %v", mods)
		}
		if !reflect.DeepEqual(spec["osImage"], map[string]any{"factory": map[string]any{"version": "v1.13.6", "schematicID": schematic, "endpoint": "https://factory.talos.dev"}}) {
			t.Errorf("osImage = %v", spec["osImage"])
		}
		if obj.GetLabels()[workerclassv1.WorkerClassLabel] != "x" {
			t.Error("the input pool was modified")
		}
	})
	t.Run("[] and {} are written out, not dropped", func(t *testing.T) {
		obj := poolObject(map[string]any{"cluster": "c", "workerClassName": "talos", "version": "v1.35"})
		res := resolvePool(t, class("talos", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}), obj, resolve.KubeVirt)
		legacy, err := LegacyPool(obj, res, platform(), resolve.KubeVirt)
		if err != nil {
			t.Fatal(err)
		}
		spec := legacy.Object["spec"].(map[string]any)
		if m, ok := spec["kernelModules"].([]any); !ok || len(m) != 0 {
			t.Errorf("kernelModules = %#v, want []", spec["kernelModules"])
		}
		if m, ok := spec["registryMirrors"].(map[string]any); !ok || len(m) != 0 {
			t.Errorf("registryMirrors = %#v, want {}", spec["registryMirrors"])
		}
	})
	t.Run("a builtin golden source becomes an explicit builtin selection", func(t *testing.T) {
		builtin := class("talos-golden", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}}})
		obj := poolObject(map[string]any{"cluster": "c", "workerClassName": "talos-golden", "version": "v1.35"})
		legacy, err := LegacyPool(obj, resolvePool(t, builtin, obj, resolve.KubeVirt), platform(), resolve.KubeVirt)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"builtin": map[string]any{"version": "v1.13.6", "schematicID": schematic}}
		if got := legacy.Object["spec"].(map[string]any)["osImage"]; !reflect.DeepEqual(got, want) {
			t.Errorf("osImage = %v", got)
		}
	})
	t.Run("a Proxmox pool keeps its template tags", func(t *testing.T) {
		px := class("talos-px", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			Proxmox: &workerclassv1.ProxmoxTemplateSource{TemplateTags: []string{"talos"}}})
		obj := poolObject(map[string]any{"cluster": "c", "workerClassName": "talos-px", "version": "v1.35"})
		legacy, err := LegacyPool(obj, resolvePool(t, px, obj, resolve.Proxmox), platform(), resolve.Proxmox)
		if err != nil {
			t.Fatal(err)
		}
		if got := legacy.Object["spec"].(map[string]any)["proxmox"]; !reflect.DeepEqual(got, map[string]any{"templateTags": []any{"talos"}}) {
			t.Errorf("proxmox = %v", got)
		}
	})
	t.Run("a Kairos pool has no legacy layout", func(t *testing.T) {
		obj := poolObject(map[string]any{"cluster": "c", "workerClassName": "kairos", "version": "v1.35"})
		res := resolvePool(t, class("kairos", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}), obj, resolve.KubeVirt)
		if _, err := LegacyPool(obj, res, platform(), resolve.KubeVirt); !errors.Is(err, ErrKairos) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("a class setting with no pool field is refused, not dropped", func(t *testing.T) {
		cd := class("talos-cd", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos, CloudInitDatasource: workerclassv1.CloudInitConfigDrive})
		obj := poolObject(map[string]any{"cluster": "c", "workerClassName": "talos-cd", "version": "v1.35"})
		_, err := LegacyPool(obj, resolvePool(t, cd, obj, resolve.KubeVirt), platform(), resolve.KubeVirt)
		if err == nil || !strings.Contains(err.Error(), "ConfigDrive") {
			t.Errorf("err = %v", err)
		}
	})
}

func ptr(s string) *string { return &s }
