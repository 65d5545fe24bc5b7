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
	"reflect"
	"strings"
	"testing"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

type resolveCase struct {
	name      string
	class     *workerclassv1.WorkerClass
	pool      workerclassv1.PoolSettings
	platform  func(*workerclassv1.WorkerPlatformSpec)
	substrate Substrate
	// check inspects a successful result.
	check func(t *testing.T, res *Result)
	// wantErrs are substrings that must all appear in the errors; a case
	// with wantErrs must fail.
	wantErrs []string
}

func runCases(t *testing.T, cases []resolveCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			platform := testPlatform()
			if tc.platform != nil {
				tc.platform(platform)
			}
			res, errs := Resolve(Input{Class: tc.class, Pool: tc.pool, Platform: platform, Substrate: tc.substrate})
			if len(tc.wantErrs) > 0 {
				if len(errs) == 0 {
					t.Fatalf("expected errors containing %q, got result %+v", tc.wantErrs, res)
				}
				if res != nil {
					t.Fatalf("a failed resolution must not return a result, got %+v", res)
				}
				got := errs.ToAggregate().Error()
				for _, want := range tc.wantErrs {
					if !strings.Contains(got, want) {
						t.Errorf("errors %q do not contain %q", got, want)
					}
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs.ToAggregate())
			}
			if res.Bootstrap != tc.class.Spec.Bootstrap {
				t.Errorf("bootstrap family %q differs from the class's %q", res.Bootstrap, tc.class.Spec.Bootstrap)
			}
			if n := countSources(res.Image); n != 1 {
				t.Errorf("image has %d sources, want exactly one: %+v", n, res.Image)
			}
			if len(res.Hash) != 64 {
				t.Errorf("hash %q is not a hex SHA-256", res.Hash)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

func countSources(img Image) int {
	n := 0
	for _, set := range []bool{img.ContainerDisk != nil, img.HTTPImport != nil, img.Clone != nil, img.ProxmoxTemplate != nil} {
		if set {
			n++
		}
	}
	return n
}

func wantHTTPImport(url string) func(*testing.T, *Result) {
	return func(t *testing.T, res *Result) {
		t.Helper()
		if res.Image.HTTPImport == nil || res.Image.HTTPImport.URL != url {
			t.Fatalf("image = %+v, want HTTP import of %s", res.Image, url)
		}
	}
}

func wantClone(name string) func(*testing.T, *Result) {
	return func(t *testing.T, res *Result) {
		t.Helper()
		if res.Image.Clone == nil || res.Image.Clone.Name != name {
			t.Fatalf("image = %+v, want clone of %s", res.Image, name)
		}
	}
}

// Seed row "Talos scalars": an explicitly supplied pool value replaces the
// baseline; an explicit empty scalar is not silently replaced by it.
func TestTalosScalars(t *testing.T) {
	runCases(t, []resolveCase{
		{
			name:  "pool value replaces the class baseline",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.5")}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.6")}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Talos.Version != "v1.13.6" {
					t.Errorf("version = %s, want the pool's v1.13.6", res.Talos.Version)
				}
				wantHTTPImport(factoryURL("v1.13.6", schematicA))(t, res)
			},
		},
		{
			name:  "absent pool value keeps the class baseline",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.5")}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Talos.Version != "v1.13.5" {
					t.Errorf("version = %s, want the class's v1.13.5", res.Talos.Version)
				}
			},
		},
		{
			name:  "absent class and pool values use the platform default",
			class: talosClass(nil),
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Talos.Version != "v1.13.6" || res.Talos.SchematicID != schematicA {
					t.Errorf("talos = %+v, want the platform's v1.13.6 and schematic", res.Talos)
				}
			},
		},
		{
			name:     "explicit empty pool version is not replaced by the baseline",
			class:    talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}}),
			pool:     workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("")}},
			wantErrs: []string{`spec.talos.version: Invalid value: ""`, "explicitly empty version is kept, not replaced by the baseline"},
		},
		{
			name:     "explicit empty class schematic is not replaced by the platform default",
			class:    talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{SchematicID: ptr("")}}),
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			wantErrs: []string{`workerclasses[talos-example-r1].spec.talos.schematicID: Invalid value: ""`},
		},
		{
			name: "explicit empty installer repository is kept: the installer comes from the factory",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{
				InstallerRepository: ptr("registry.example.com/talos/installer")}}),
			pool: workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{InstallerRepository: ptr("")}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				want := "factory.talos.dev/installer/" + schematicA + ":v1.13.6"
				if res.Talos.InstallerImage != want {
					t.Errorf("installer = %s, want %s", res.Talos.InstallerImage, want)
				}
			},
		},
		{
			name: "class installer repository is used with the effective version",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{
				InstallerRepository: ptr("registry.example.com/talos/installer")}}),
			pool: workerclassv1.PoolSettings{Version: "v1.35"},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Talos.InstallerImage != "registry.example.com/talos/installer:v1.13.6" {
					t.Errorf("installer = %s", res.Talos.InstallerImage)
				}
			},
		},
		{
			name:  "explicit empty pool CA clears the class CA",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{ImageFactoryCA: ptr("class-ca")}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{ImageFactoryCA: ptr("")}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Image.HTTPImport.CABundle != "" || res.Talos.ImageFactoryCA != "" {
					t.Errorf("CA = %q, want the pool's explicit empty", res.Image.HTTPImport.CABundle)
				}
			},
		},
		{
			name:  "class CA reaches the CDI import only",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{ImageFactoryCA: ptr("class-ca")}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Image.HTTPImport.CABundle != "class-ca" {
					t.Errorf("CA = %q, want class-ca", res.Image.HTTPImport.CABundle)
				}
			},
		},
		{
			name:     "explicit empty factory URL without installer repository fails",
			class:    talosClass(nil),
			pool:     workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{ImageFactoryURL: ptr("")}},
			wantErrs: []string{`spec.talos.imageFactoryURL: Invalid value: ""`},
		},
		{
			name:     "no layer supplies a version",
			class:    talosClass(nil),
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			platform: func(p *workerclassv1.WorkerPlatformSpec) { p.TalosFactory.Version = "" },
			wantErrs: []string{"spec.talos.version: Required value: no pool, class or platform setting supplies a Talos version"},
		},
	})
}

// Seed row "registryMirrors": a supplied map replaces the baseline map; {}
// clears it, without deep merging.
func TestRegistryMirrors(t *testing.T) {
	baseline := talosClass(&workerclassv1.TalosBaseline{RegistryMirrors: map[string]workerclassv1.RegistryMirror{
		"docker.io": {Endpoints: []string{"https://mirror-a.example.com"}},
		"ghcr.io":   {Endpoints: []string{"https://mirror-b.example.com"}},
	}})
	runCases(t, []resolveCase{
		{
			name:  "supplied map replaces the baseline without deep merge",
			class: baseline,
			pool: workerclassv1.PoolSettings{Version: "v1.35", RegistryMirrors: map[string]workerclassv1.RegistryMirror{
				"docker.io": {Endpoints: []string{"https://mirror-c.example.com"}},
			}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				want := map[string]workerclassv1.RegistryMirror{"docker.io": {Endpoints: []string{"https://mirror-c.example.com"}}}
				if !reflect.DeepEqual(res.Talos.RegistryMirrors, want) {
					t.Errorf("mirrors = %v, want exactly %v", res.Talos.RegistryMirrors, want)
				}
			},
		},
		{
			name:  "{} clears the baseline",
			class: baseline,
			pool:  workerclassv1.PoolSettings{Version: "v1.35", RegistryMirrors: map[string]workerclassv1.RegistryMirror{}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if len(res.Talos.RegistryMirrors) != 0 {
					t.Errorf("mirrors = %v, want none", res.Talos.RegistryMirrors)
				}
			},
		},
		{
			name:  "absent map keeps the baseline",
			class: baseline,
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if !reflect.DeepEqual(res.Talos.RegistryMirrors, baseline.Spec.Talos.RegistryMirrors) {
					t.Errorf("mirrors = %v, want the baseline", res.Talos.RegistryMirrors)
				}
			},
		},
	})
}

// Seed row "kernelModules": a supplied list replaces the baseline, []
// disables loading, and the automatic NVIDIA rule runs only when neither
// baseline nor pool supplies a list.
func TestKernelModules(t *testing.T) {
	nvidia := []workerclassv1.GPU{{Name: "nvidia.com/AD102GL_L40S"}}
	wantModules := func(names ...string) func(*testing.T, *Result) {
		return func(t *testing.T, res *Result) {
			t.Helper()
			got := make([]string, 0, len(res.Talos.KernelModules))
			for _, m := range res.Talos.KernelModules {
				got = append(got, m.Name)
			}
			if !reflect.DeepEqual(got, append([]string{}, names...)) {
				t.Errorf("modules = %v, want %v", got, names)
			}
		}
	}
	classModules := &workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{{Name: "nvme_tcp"}}}
	runCases(t, []resolveCase{
		{
			name:  "supplied list replaces the baseline",
			class: talosClass(classModules),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", KernelModules: []workerclassv1.KernelModule{{Name: "drbd"}}},
			check: wantModules("drbd"),
		},
		{
			name:  "absent list keeps the baseline",
			class: talosClass(classModules),
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			check: wantModules("nvme_tcp"),
		},
		{
			name:  "[] disables loading, including the NVIDIA rule",
			class: talosClass(classModules),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", KernelModules: []workerclassv1.KernelModule{}, GPUs: nvidia},
			check: wantModules(),
		},
		{
			name:  "NVIDIA rule runs when neither baseline nor pool supplies a list",
			class: talosClass(nil),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", GPUs: nvidia},
			check: wantModules("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"),
		},
		{
			name:  "NVIDIA rule does not run when the baseline supplies a list",
			class: talosClass(classModules),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", GPUs: nvidia},
			check: wantModules("nvme_tcp"),
		},
		{
			name:  "NVIDIA rule does not run when the baseline supplies []",
			class: talosClass(&workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", GPUs: nvidia},
			check: wantModules(),
		},
		{
			name:  "NVIDIA rule does not run when the pool supplies a list",
			class: talosClass(nil),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", GPUs: nvidia, KernelModules: []workerclassv1.KernelModule{{Name: "drbd"}}},
			check: wantModules("drbd"),
		},
		{
			name:  "NVIDIA rule ignores other GPU vendors",
			class: talosClass(nil),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", GPUs: []workerclassv1.GPU{{Name: "amd.com/gpu"}}},
			check: wantModules(),
		},
	})
}

// Seed rows "KubeVirt osImage absent" and "KubeVirt osImage supplied".
func TestOSImageSelection(t *testing.T) {
	builtinClass := class("talos-builtin", workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		KubeVirt:  &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}},
	})
	runCases(t, []resolveCase{
		{
			name:  "absent: the class's KubeVirt source is used",
			class: builtinClass,
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			check: wantClone("talos-v1-13-6-a"),
		},
		{
			name:  "absent without a class source: the default factory path from effective Talos settings",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{SchematicID: ptr(schematicB)}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			check: wantHTTPImport(factoryURL("v1.13.6", schematicB)),
		},
		{
			name:  "supplied: replaces the class's source selection as a unit",
			class: builtinClass,
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Factory: &workerclassv1.FactoryImageSource{Endpoint: "https://factory.example.com"}}},
			check: wantHTTPImport("https://factory.example.com/image/" + schematicA + "/v1.13.6/nocloud-amd64.raw.xz"),
		},
		{
			name:  "supplied {}: selects the default factory path over the class's builtin",
			class: builtinClass,
			pool:  workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{}},
			check: wantHTTPImport(factoryURL("v1.13.6", schematicA)),
		},
		{
			name:  "supplied: builtin and factory cannot both be set",
			class: talosClass(nil),
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Builtin: &workerclassv1.BuiltinImageSource{}, Factory: &workerclassv1.FactoryImageSource{}}},
			wantErrs: []string{"spec.osImage: Forbidden: builtin and factory cannot both be set"},
		},
		{
			name:  "platform image settings shape the factory path",
			class: talosClass(nil),
			pool:  workerclassv1.PoolSettings{Version: "v1.35"},
			platform: func(p *workerclassv1.WorkerPlatformSpec) {
				p.TalosFactory.ImagePlatform, p.TalosFactory.Architecture = "openstack", "arm64"
			},
			check: wantHTTPImport("https://factory.talos.dev/image/" + schematicA + "/v1.13.6/openstack-arm64.raw.xz"),
		},
	})
}

// Seed rows "Builtin version/schematic" and "Factory
// version/schematic/endpoint".
func TestSourceValues(t *testing.T) {
	runCases(t, []resolveCase{
		{
			name:  "builtin: nonempty source values take precedence over platform defaults",
			class: talosClass(nil),
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Builtin: &workerclassv1.BuiltinImageSource{Version: "v1.13.5"}}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				wantClone("talos-v1-13-5-a")(t, res)
				if res.Talos.Version != "v1.13.5" || res.Talos.InstallerImage != "factory.talos.dev/installer/"+schematicA+":v1.13.5" {
					t.Errorf("installer does not follow the disk: %+v", res.Talos)
				}
			},
		},
		{
			name:  "builtin: omitted values use effective talos.version and talos.schematicID",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.5")}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}},
			check: wantClone("talos-v1-13-5-a"),
		},
		{
			name:  "builtin: the matching golden must exist",
			class: talosClass(nil),
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Builtin: &workerclassv1.BuiltinImageSource{SchematicID: schematicB}}},
			wantErrs: []string{"spec.osImage.builtin: Invalid value: \"v1.13.6/" + schematicB + "\"", "golden catalog has no image"},
		},
		{
			name:  "factory: nonempty source values take precedence",
			class: talosClass(nil),
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{
				Version: "v1.13.7", SchematicID: schematicB, Endpoint: "https://factory.example.com/"}}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				wantHTTPImport("https://factory.example.com/image/"+schematicB+"/v1.13.7/nocloud-amd64.raw.xz")(t, res)
				if res.Talos.Version != "v1.13.7" || res.Talos.SchematicID != schematicB {
					t.Errorf("installer does not follow the disk: %+v", res.Talos)
				}
			},
		},
		{
			name: "factory: omitted values use the effective Talos settings",
			class: talosClass(&workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{
				Version: ptr("v1.13.4"), ImageFactoryURL: ptr("https://factory.internal.example")}}),
			pool:  workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{}}},
			check: wantHTTPImport("https://factory.internal.example/image/" + schematicA + "/v1.13.4/nocloud-amd64.raw.xz"),
		},
	})
}

// Seed row "Proxmox template tags": a supplied pool list replaces the
// baseline; an empty final list fails; nonempty osImage is not a Proxmox
// source.
func TestProxmoxTemplateTags(t *testing.T) {
	proxmoxClass := class("talos-proxmox", workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		Proxmox:   &workerclassv1.ProxmoxTemplateSource{TemplateTags: []string{"talos", "v1.13.6"}},
	})
	wantTags := func(tags ...string) func(*testing.T, *Result) {
		return func(t *testing.T, res *Result) {
			t.Helper()
			if res.Image.ProxmoxTemplate == nil || !reflect.DeepEqual(res.Image.ProxmoxTemplate.Tags, tags) {
				t.Errorf("image = %+v, want template tags %v", res.Image, tags)
			}
		}
	}
	runCases(t, []resolveCase{
		{name: "absent pool list keeps the baseline", class: proxmoxClass, substrate: Proxmox,
			pool: workerclassv1.PoolSettings{Version: "v1.35"}, check: wantTags("talos", "v1.13.6")},
		{name: "supplied pool list replaces the baseline", class: proxmoxClass, substrate: Proxmox,
			pool:  workerclassv1.PoolSettings{Version: "v1.35", Proxmox: &workerclassv1.ProxmoxOverrides{TemplateTags: []string{"gpu"}}},
			check: wantTags("gpu")},
		{name: "empty final list fails", class: proxmoxClass, substrate: Proxmox,
			pool:     workerclassv1.PoolSettings{Version: "v1.35", Proxmox: &workerclassv1.ProxmoxOverrides{TemplateTags: []string{}}},
			wantErrs: []string{"spec.proxmox.templateTags: Required value: the final Proxmox template tag list is empty"}},
		{name: "no tags anywhere fails", class: talosClass(nil), substrate: Proxmox,
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			wantErrs: []string{"workerclasses[talos-example-r1].spec.proxmox.templateTags: Required value"}},
		{name: "nonempty osImage is not a Proxmox source", class: proxmoxClass, substrate: Proxmox,
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Factory: &workerclassv1.FactoryImageSource{Version: "v1.13.6"}}},
			wantErrs: []string{"spec.osImage: Forbidden: osImage is a KubeVirt source, not a Proxmox template"}},
		{name: "empty osImage is ignored on Proxmox", class: proxmoxClass, substrate: Proxmox,
			pool:  workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{}},
			check: wantTags("talos", "v1.13.6")},
	})
}

// The final compatibility check: a conflicting artifact, version or
// schematic is rejected, another source selection does not waive it, an
// override cannot change the bootstrap family, and nonempty Talos settings
// on a Kairos class are rejected rather than reinterpreted.
func TestCompatibilityCheck(t *testing.T) {
	pinned := &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6"), SchematicID: ptr(schematicA)}}
	runCases(t, []resolveCase{
		{
			name:  "conflicting builtin version is rejected",
			class: talosClass(pinned),
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Builtin: &workerclassv1.BuiltinImageSource{Version: "v1.13.5"}}},
			wantErrs: []string{`spec.osImage.builtin.version: Invalid value: "v1.13.5": conflicts with the effective Talos version "v1.13.6"`},
		},
		{
			name:  "conflicting factory schematic is rejected",
			class: talosClass(pinned),
			pool: workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{
				Factory: &workerclassv1.FactoryImageSource{SchematicID: schematicB}}},
			wantErrs: []string{"spec.osImage.factory.schematicID", "conflicts with the effective Talos schematic"},
		},
		{
			name: "conflicting class source is rejected against a pool version",
			class: class("talos-builtin-pinned", workerclassv1.WorkerClassSpec{
				Bootstrap: workerclassv1.BootstrapTalos,
				KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{
					Builtin: &workerclassv1.BuiltinImageSource{Version: "v1.13.6"}}},
			}),
			pool:     workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.5")}},
			wantErrs: []string{"workerclasses[talos-builtin-pinned].spec.kubevirt.osImage.builtin.version", "conflicts"},
		},
		{
			name: "another source selection does not waive the check",
			class: class("talos-builtin-pinned", workerclassv1.WorkerClassSpec{
				Bootstrap: workerclassv1.BootstrapTalos,
				KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{
					Builtin: &workerclassv1.BuiltinImageSource{Version: "v1.13.6"}}},
			}),
			pool: workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.5")},
				OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{Version: "v1.13.6"}}},
			wantErrs: []string{"spec.osImage.factory.version", "conflicts"},
		},
		{
			name: "conflicting Proxmox template declaration is rejected",
			class: class("talos-proxmox", workerclassv1.WorkerClassSpec{
				Bootstrap: workerclassv1.BootstrapTalos,
				Talos:     pinned,
				Proxmox:   &workerclassv1.ProxmoxTemplateSource{TemplateTags: []string{"talos"}, SchematicID: schematicB},
			}),
			substrate: Proxmox,
			pool:      workerclassv1.PoolSettings{Version: "v1.35"},
			wantErrs:  []string{"workerclasses[talos-proxmox].spec.proxmox.schematicID", "conflicts"},
		},
		{
			name: "a fixed image on a Talos class is a conflicting artifact",
			class: class("talos-fixed", workerclassv1.WorkerClassSpec{
				Bootstrap: workerclassv1.BootstrapTalos,
				Image:     &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: kairosRef},
			}),
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			wantErrs: []string{"workerclasses[talos-fixed].spec.image: Forbidden"},
		},
		{
			name:     "an osImage on a fixed Kairos image is a conflicting artifact",
			class:    fixedKairosClass(),
			pool:     workerclassv1.PoolSettings{Version: "v1.35", OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}},
			wantErrs: []string{"spec.osImage: Forbidden"},
		},
		{
			name:  "an override cannot change the bootstrap family: Talos overrides on Kairos are rejected, not reinterpreted",
			class: kairosClass(),
			pool: workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.6")},
				KernelModules:   []workerclassv1.KernelModule{{Name: "nvme_tcp"}},
				RegistryMirrors: map[string]workerclassv1.RegistryMirror{"docker.io": {Endpoints: []string{"https://m.example.com"}}}},
			wantErrs: []string{
				"spec.talos: Forbidden: Talos settings are not Kairos configuration",
				"spec.kernelModules: Forbidden", "spec.registryMirrors: Forbidden",
			},
		},
		{
			name: "nonempty Talos settings on a Kairos class are rejected",
			class: class("kairos-with-talos", workerclassv1.WorkerClassSpec{
				Bootstrap: workerclassv1.BootstrapKairos,
				Talos:     &workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{{Name: "nvme_tcp"}}},
			}),
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			wantErrs: []string{"workerclasses[kairos-with-talos].spec.talos: Forbidden"},
		},
		{
			name:  "empty Talos settings on Kairos are not a request for anything",
			class: kairosClass(),
			pool: workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("")},
				KernelModules: []workerclassv1.KernelModule{}, RegistryMirrors: map[string]workerclassv1.RegistryMirror{},
				OSImage: &workerclassv1.OSImageSource{}, SSHKeys: []string{}},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				if res.Talos != nil {
					t.Errorf("a Kairos result has Talos settings: %+v", res.Talos)
				}
			},
		},
		{
			name:      "Kairos supports KubeVirt only",
			class:     kairosClass(),
			substrate: Proxmox,
			pool:      workerclassv1.PoolSettings{Version: "v1.35"},
			wantErrs:  []string{"workerclasses[kairos].spec.bootstrap: Forbidden: Kairos supports KubeVirt only"},
		},
	})
}

// Seed section "Versions and replacement".
func TestVersionsAndReplacement(t *testing.T) {
	wantVersion := func(v string, match workerclassv1.KubernetesVersionMatch) func(*testing.T, *Result) {
		return func(t *testing.T, res *Result) {
			t.Helper()
			if res.KubernetesVersion != v || res.KubernetesVersionMatch != match {
				t.Errorf("kubernetes = %s (%s), want %s (%s)", res.KubernetesVersion, res.KubernetesVersionMatch, v, match)
			}
		}
	}
	runCases(t, []resolveCase{
		{name: "the pool picks the minor and the platform map the patch (Talos)", class: talosClass(nil),
			pool: workerclassv1.PoolSettings{Version: "v1.34"}, check: wantVersion("v1.34.9", workerclassv1.KubernetesVersionMatchMinor)},
		{name: "the pool picks the minor and the platform map the patch (platform Kairos image)", class: kairosClass(),
			pool: workerclassv1.PoolSettings{Version: "v1.35"},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				wantVersion("v1.35.6", workerclassv1.KubernetesVersionMatchMinor)(t, res)
				if res.Image.ContainerDisk.Reference != "ghcr.io/cozystack/kairos-worker@"+digestB {
					t.Errorf("image = %s", res.Image.ContainerDisk.Reference)
				}
			}},
		{name: "a fixed image supplies its exact patch", class: fixedKairosClass(),
			pool: workerclassv1.PoolSettings{Version: "v1.35"},
			check: func(t *testing.T, res *Result) {
				t.Helper()
				wantVersion("v1.35.6", workerclassv1.KubernetesVersionMatchExact)(t, res)
				if res.Image.ContainerDisk.Reference != kairosRef {
					t.Errorf("image = %s, want %s", res.Image.ContainerDisk.Reference, kairosRef)
				}
			}},
		{name: "the pool must select the fixed image's minor", class: fixedKairosClass(),
			pool:     workerclassv1.PoolSettings{Version: "v1.34"},
			wantErrs: []string{`spec.version: Invalid value: "v1.34": class kairos-example-v1-35-6-r1's fixed image packages Kubernetes v1.35.6; the pool must select minor v1.35`}},
		{name: "a platform patch change does not rewrite a fixed image's patch", class: fixedKairosClass(),
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			platform: func(p *workerclassv1.WorkerPlatformSpec) { p.KubernetesVersions[1].Patch = "v1.35.9" },
			check:    wantVersion("v1.35.6", workerclassv1.KubernetesVersionMatchExact)},
		{name: "a fixed image needs no platform map entry", class: fixedKairosClass(),
			pool:     workerclassv1.PoolSettings{Version: "v1.35"},
			platform: func(p *workerclassv1.WorkerPlatformSpec) { p.KubernetesVersions = nil },
			check:    wantVersion("v1.35.6", workerclassv1.KubernetesVersionMatchExact)},
		{name: "no arbitrary pool patch selector", class: talosClass(nil),
			pool:     workerclassv1.PoolSettings{Version: "v1.35.6"},
			wantErrs: []string{`spec.version: Invalid value: "v1.35.6": a pool selects a Kubernetes minor`}},
		{name: "the pool must choose a minor", class: talosClass(nil),
			pool:     workerclassv1.PoolSettings{},
			wantErrs: []string{"spec.version: Required value"}},
		{name: "an unsupported minor is rejected", class: talosClass(nil),
			pool:     workerclassv1.PoolSettings{Version: "v1.36"},
			wantErrs: []string{`spec.version: Unsupported value: "v1.36": supported values: "v1.34", "v1.35"`}},
		{name: "a platform Kairos image must exist for the minor", class: kairosClass(),
			pool:     workerclassv1.PoolSettings{Version: "v1.34"},
			wantErrs: []string{"the platform has no Kairos image for this minor"}},
	})
}

func TestPlatformChangesAndHash(t *testing.T) {
	resolve := func(c *workerclassv1.WorkerClass, pool workerclassv1.PoolSettings, mutate func(*workerclassv1.WorkerPlatformSpec)) *Result {
		t.Helper()
		p := testPlatform()
		if mutate != nil {
			mutate(p)
		}
		res, errs := Resolve(Input{Class: c, Pool: pool, Platform: p})
		if len(errs) > 0 {
			t.Fatalf("resolve: %v", errs.ToAggregate())
		}
		return res
	}
	pool := workerclassv1.PoolSettings{Version: "v1.35"}
	patchBump := func(p *workerclassv1.WorkerPlatformSpec) { p.KubernetesVersions[1].Patch = "v1.35.9" }

	t.Run("a platform patch change leaves a fixed image's hash unchanged", func(t *testing.T) {
		if a, b := resolve(fixedKairosClass(), pool, nil), resolve(fixedKairosClass(), pool, patchBump); a.Hash != b.Hash {
			t.Errorf("hash changed from %s to %s", a.Hash, b.Hash)
		}
	})
	t.Run("a platform patch change changes a platform image's version and hash", func(t *testing.T) {
		a, b := resolve(kairosClass(), pool, nil), resolve(kairosClass(), pool, patchBump)
		if b.KubernetesVersion != "v1.35.9" || a.Hash == b.Hash {
			t.Errorf("version %s, hashes %s and %s", b.KubernetesVersion, a.Hash, b.Hash)
		}
	})
	t.Run("a platform Kairos rebuild (new digest) enters the hash", func(t *testing.T) {
		a := resolve(kairosClass(), pool, nil)
		b := resolve(kairosClass(), pool, func(p *workerclassv1.WorkerPlatformSpec) {
			p.KairosImages[0].Reference = "ghcr.io/cozystack/kairos-worker@" + digestA
		})
		if a.Hash == b.Hash {
			t.Error("a new platform digest must change the hash")
		}
	})
	t.Run("equal inputs give equal hashes", func(t *testing.T) {
		c := talosClass(&workerclassv1.TalosBaseline{RegistryMirrors: map[string]workerclassv1.RegistryMirror{
			"docker.io": {Endpoints: []string{"https://a.example.com"}}, "ghcr.io": {Endpoints: []string{"https://b.example.com"}},
			"quay.io": {Endpoints: []string{"https://c.example.com"}},
		}})
		first := resolve(c, pool, nil).Hash
		for range 20 {
			if h := resolve(c.DeepCopy(), pool, nil).Hash; h != first {
				t.Fatalf("hash %s differs from %s", h, first)
			}
		}
	})
	t.Run("the factory CA does not enter the hash", func(t *testing.T) {
		a := resolve(talosClass(nil), pool, nil)
		b := resolve(talosClass(nil), workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{ImageFactoryCA: ptr("ca")}}, nil)
		if a.Hash != b.Hash {
			t.Error("the CA changes how bytes are fetched, not which bytes boot")
		}
	})
	t.Run("boot-relevant settings enter the hash", func(t *testing.T) {
		base := resolve(talosClass(nil), pool, nil).Hash
		variants := map[string]workerclassv1.PoolSettings{
			"kernel modules":   {Version: "v1.35", KernelModules: []workerclassv1.KernelModule{{Name: "drbd"}}},
			"registry mirrors": {Version: "v1.35", RegistryMirrors: map[string]workerclassv1.RegistryMirror{"docker.io": {Endpoints: []string{"https://m.example.com"}}}},
			"talos version":    {Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.7")}},
			"installer":        {Version: "v1.35", Talos: &workerclassv1.TalosScalars{InstallerRepository: ptr("registry.example.com/installer")}},
			"minor":            {Version: "v1.34"},
		}
		for name, p := range variants {
			if resolve(talosClass(nil), p, nil).Hash == base {
				t.Errorf("%s does not change the hash", name)
			}
		}
		mirrored := workerclassv1.PoolSettings{Version: "v1.35", RegistryMirrors: map[string]workerclassv1.RegistryMirror{
			"docker.io": {Endpoints: []string{"https://m.example.com"}}, "ghcr.io": {Endpoints: []string{"https://g.example.com"}}}}
		skipping := *mirrored.DeepCopy()
		skipping.RegistryMirrors["ghcr.io"] = workerclassv1.RegistryMirror{Endpoints: []string{"https://g.example.com"}, SkipFallback: true}
		if resolve(talosClass(nil), skipping, nil).Hash == resolve(talosClass(nil), mirrored, nil).Hash {
			t.Error("skipFallback does not change the hash")
		}
		// Pinned from before skipFallback was read: templates resolved then
		// must keep their hash, or every mirrored pool would roll.
		if got := resolve(talosClass(nil), mirrored, nil).Hash; got != mirroredHash {
			t.Errorf("the hash of mirrors without skipFallback changed to %s", got)
		}
		cd := class("talos-configdrive", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos, CloudInitDatasource: workerclassv1.CloudInitConfigDrive})
		if resolve(cd, pool, nil).Hash == base {
			t.Error("the cloud-init datasource does not change the hash")
		}
	})
}

// mirroredHash is the content hash of TestPlatformChangesAndHash's mirrored
// pool, as resolved before skipFallback entered the hash.
const mirroredHash = "d617b47840bff2ed5d5015fe73a95cab0ff10ee5e8cd57cdceccfaa6b460c1c2"

func TestResolveInputs(t *testing.T) {
	t.Run("a classless input is refused, not guessed", func(t *testing.T) {
		if _, errs := Resolve(Input{Pool: workerclassv1.PoolSettings{Version: "v1.35"}}); len(errs) == 0 {
			t.Fatal("expected an error")
		}
	})
	t.Run("a nil platform reads as empty", func(t *testing.T) {
		res, errs := Resolve(Input{Class: fixedKairosClass(), Pool: workerclassv1.PoolSettings{Version: "v1.35"}})
		if len(errs) > 0 || res.KubernetesVersion != "v1.35.6" {
			t.Fatalf("res %+v, errs %v", res, errs)
		}
	})
	t.Run("the cloud-init datasource defaults to NoCloud", func(t *testing.T) {
		res, _ := Resolve(Input{Class: fixedKairosClass(), Pool: workerclassv1.PoolSettings{Version: "v1.35"}})
		if res.CloudInitDatasource != workerclassv1.CloudInitNoCloud {
			t.Errorf("datasource = %s", res.CloudInitDatasource)
		}
	})
	t.Run("errors use the caller's path", func(t *testing.T) {
		_, errs := Resolve(Input{Class: talosClass(nil), Path: nil, Platform: testPlatform()})
		if len(errs) == 0 || errs[0].Field != "spec.version" {
			t.Fatalf("errs = %v", errs)
		}
	})
	t.Run("resolution does not modify its input", func(t *testing.T) {
		c := talosClass(&workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{{Name: "nvme_tcp"}}})
		before := c.DeepCopy()
		p := testPlatform()
		pBefore := p.DeepCopy()
		pool := workerclassv1.PoolSettings{Version: "v1.35", GPUs: []workerclassv1.GPU{{Name: "nvidia.com/x"}}}
		Resolve(Input{Class: c, Pool: pool, Platform: p})
		if !reflect.DeepEqual(c, before) || !reflect.DeepEqual(p, pBefore) {
			t.Error("input changed")
		}
	})
}
