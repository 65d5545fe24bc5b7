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
	"encoding/json"
	"reflect"
	"testing"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// FuzzResolve feeds arbitrary classes, pools and platforms through
// resolution and checks the result's invariants: no panic, deterministic
// output, exactly one image source, the class's family, a patch of the
// pool's minor, and an Exact match only for a fixed image.
func FuzzResolve(f *testing.F) {
	platform := mustJSON(f, testPlatform())
	seeds := []struct {
		class *workerclassv1.WorkerClass
		pool  workerclassv1.PoolSettings
	}{
		{talosClass(nil), workerclassv1.PoolSettings{Version: "v1.35"}},
		{talosClass(&workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{}}), workerclassv1.PoolSettings{Version: "v1.34", GPUs: []workerclassv1.GPU{{Name: "nvidia.com/x"}}}},
		{talosClass(nil), workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{Version: "v1.13.5"}}}},
		{talosClass(nil), workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("")}, RegistryMirrors: map[string]workerclassv1.RegistryMirror{}}},
		{kairosClass(), workerclassv1.PoolSettings{Version: "v1.35", SSHKeys: []string{}}},
		{fixedKairosClass(), workerclassv1.PoolSettings{Version: "v1.35"}},
		{fixedKairosClass(), workerclassv1.PoolSettings{Version: "v1.34", OSImage: &workerclassv1.OSImageSource{}}},
	}
	for i, s := range seeds {
		f.Add(mustJSON(f, s.class), mustJSON(f, s.pool), platform, uint8(i%2))
	}
	f.Fuzz(func(t *testing.T, classJSON, poolJSON, platformJSON []byte, substrate uint8) {
		var class workerclassv1.WorkerClass
		var pool workerclassv1.PoolSettings
		var platform workerclassv1.WorkerPlatformSpec
		if json.Unmarshal(classJSON, &class) != nil || json.Unmarshal(poolJSON, &pool) != nil || json.Unmarshal(platformJSON, &platform) != nil {
			t.Skip("not JSON of the API types")
		}
		in := Input{Class: &class, Pool: pool, Platform: &platform, Substrate: []Substrate{KubeVirt, Proxmox}[substrate%2]}
		res, errs := Resolve(in)
		again, againErrs := Resolve(in)
		if !reflect.DeepEqual(res, again) || !reflect.DeepEqual(errs, againErrs) {
			t.Fatalf("resolution is not deterministic")
		}
		if len(errs) > 0 {
			if res != nil {
				t.Fatalf("errors with a result")
			}
			for _, e := range errs {
				if e.Field == "" {
					t.Fatalf("error without a field path: %v", e)
				}
			}
			return
		}
		if res.Bootstrap != class.Spec.Bootstrap {
			t.Fatalf("family changed from %q to %q", class.Spec.Bootstrap, res.Bootstrap)
		}
		if countSources(res.Image) != 1 {
			t.Fatalf("image sources: %+v", res.Image)
		}
		if !validation.SameMinor(res.KubernetesVersion, pool.Version) {
			t.Fatalf("version %s is not a patch of the pool's minor %s", res.KubernetesVersion, pool.Version)
		}
		if (res.KubernetesVersionMatch == workerclassv1.KubernetesVersionMatchExact) != (class.Spec.Image != nil) {
			t.Fatalf("match %s with fixed image %v", res.KubernetesVersionMatch, class.Spec.Image)
		}
		if (res.Talos != nil) != (res.Bootstrap == workerclassv1.BootstrapTalos) {
			t.Fatalf("talos settings %+v for family %s", res.Talos, res.Bootstrap)
		}
		if res.Talos != nil && (res.Talos.Version == "" || res.Talos.SchematicID == "" ||
			res.Talos.InstallerImage != res.Talos.InstallerRepository+":"+res.Talos.Version) {
			t.Fatalf("incomplete Talos settings %+v", res.Talos)
		}
		if len(res.Hash) != 64 {
			t.Fatalf("hash %q", res.Hash)
		}
	})
}

// BenchmarkResolve reports the cost of one resolution per class shape.
// Target: under 20 µs and 50 allocations each (see docs/workerclass.md).
func BenchmarkResolve(b *testing.B) {
	mirrors := map[string]workerclassv1.RegistryMirror{
		"docker.io": {Endpoints: []string{"https://a.example.com"}}, "ghcr.io": {Endpoints: []string{"https://b.example.com"}},
	}
	cases := []struct {
		name  string
		class *workerclassv1.WorkerClass
		pool  workerclassv1.PoolSettings
	}{
		{"talos-factory", talosClass(&workerclassv1.TalosBaseline{RegistryMirrors: mirrors}), workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.6")}}},
		{"talos-builtin", talosClass(nil), workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}}},
		{"talos-nvidia", talosClass(nil), workerclassv1.PoolSettings{Version: "v1.35", GPUs: []workerclassv1.GPU{{Name: "nvidia.com/AD102GL_L40S"}}}},
		{"kairos-fixed", fixedKairosClass(), workerclassv1.PoolSettings{Version: "v1.35"}},
		{"kairos-platform", kairosClass(), workerclassv1.PoolSettings{Version: "v1.35"}},
	}
	platform := testPlatform()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			in := Input{Class: c.class, Pool: c.pool, Platform: platform}
			b.ReportAllocs()
			for b.Loop() {
				if _, errs := Resolve(in); len(errs) > 0 {
					b.Fatal(errs.ToAggregate())
				}
			}
		})
	}
}
