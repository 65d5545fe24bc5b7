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

package admission

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// cozystackFields is every field of Cozystack's KubernetesNodes spec
// (ConfigSpec in api/apps/v1alpha1/kubernetesnodes/types.go of
// cozystack/cozystack at commit 3c780acd417f086f8f18d040d0d7020ff55d3ba3)
// and whether pool admission reads it. The ones it leaves alone size,
// place and watch the workers: they are the pool's, not the class's, and
// Cozystack's chart renders them.
var cozystackFields = map[string]bool{
	"cluster": true, "version": true, "gpus": true, "talos": true,
	"storageClass": false, "minReplicas": false, "maxReplicas": false, "instanceType": false,
	"diskSize": false, "roles": false, "resources": false, "podCpuLimit": false,
	"podCpuRequest": false, "kubelet": false, "logSerialConsole": false, "maxUnhealthy": false,
	"nodeStartupTimeout": false, "readyUnknownTimeout": false, "readyFalseTimeout": false,
	"maxNodeProvisionTime": false, "images": false,
}

// cozystackSpec reads a pool fixture of test/cozystack/pools, changed by
// edit, as the JSON spec runObjectCases takes.
func cozystackSpec(t *testing.T, name string, edit func(spec map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "cozystack", "pools", name)) //nolint:gosec // A fixture of the repository.
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	spec := obj["spec"].(map[string]any)
	if edit != nil {
		edit(spec)
	}
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func withClass(class string) func(map[string]any) {
	return func(spec map[string]any) { spec[ClassNameField] = class }
}

func talosOf(spec map[string]any) map[string]any { return spec["talos"].(map[string]any) }

// Every field of Cozystack's type is read with the seed's meaning or left
// alone; none is refused for its shape.
func TestCozystackFieldsAreReadOrLeftAlone(t *testing.T) {
	read := []string{ClusterField, SubstrateField, ClassNameField}
	for name := range settingsFields {
		read = append(read, name)
	}
	for name, reads := range cozystackFields {
		if slices.Contains(read, name) != reads {
			t.Errorf("spec.%s: admission reads it: %v, want %v", name, !reads, reads)
		}
	}
	var every map[string]any
	if err := json.Unmarshal([]byte(cozystackSpec(t, "every-field.yaml", nil)), &every); err != nil {
		t.Fatal(err)
	}
	for name := range cozystackFields {
		if _, ok := every[name]; !ok {
			t.Errorf("every-field.yaml lacks spec.%s", name)
		}
	}
	for name := range every {
		if _, ok := cozystackFields[name]; !ok {
			t.Errorf("every-field.yaml has spec.%s, which Cozystack's type does not", name)
		}
	}
}

// Cozystack's own pools, its defaults and the seed's Kairos switch,
// through AdmitObjects as the webhooks call it.
func TestCozystackPools(t *testing.T) {
	const platformSchematic = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	talosResult := func(check func(t *testing.T, r *Decision)) func(t *testing.T, d Decision) {
		return func(t *testing.T, d Decision) {
			t.Helper()
			if d.Result == nil || d.Result.Talos == nil {
				t.Fatalf("no Talos resolution: %+v", d)
			}
			check(t, &d)
		}
	}
	mirror := map[string]workerclassv1.RegistryMirror{"ghcr.io": {Endpoints: []string{"http://ghcr-mirror.kube-system.svc"}, SkipFallback: true}}
	topMirrors := func(m any) func(map[string]any) {
		return func(spec map[string]any) { spec["registryMirrors"] = m }
	}
	runObjectCases(t, []objectCase{
		{name: "a default Cozystack pool takes the platform's default class and the platform's Talos settings",
			new: cozystackSpec(t, "default-talos.yaml", nil),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				tl := d.Result.Talos
				if d.ClassName != "talos" || !d.Defaulted || tl.Version != "v1.13.6" || tl.SchematicID != platformSchematic ||
					tl.InstallerImage != "factory.talos.dev/installer/"+platformSchematic+":v1.13.6" || len(tl.RegistryMirrors) != 0 {
					t.Errorf("decision %+v, Talos %+v", d, tl)
				}
			})},
		{name: "Cozystack's defaults do not override a hoster's Talos baseline",
			new: cozystackSpec(t, "default-talos.yaml", withClass("talos-hoster-r1")),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				tl, b := d.Result.Talos, strings.Repeat("b", 64)
				if tl.ImageFactoryURL != "https://factory.hoster.example" || tl.SchematicID != b ||
					tl.InstallerImage != "factory.hoster.example/installer/"+b+":v1.13.6" ||
					!reflect.DeepEqual(tl.RegistryMirrors, testClasses["talos-hoster-r1"].Spec.Talos.RegistryMirrors) {
					t.Errorf("Talos %+v", tl)
				}
			})},
		{name: "a Talos setting other than Cozystack's default is the tenant's and replaces the baseline",
			new: cozystackSpec(t, "default-talos.yaml", func(spec map[string]any) {
				withClass("talos-hoster-r1")(spec)
				talosOf(spec)["imageFactoryURL"] = "https://factory.tenant.example"
			}),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				if d.Result.Talos.ImageFactoryURL != "https://factory.tenant.example" {
					t.Errorf("Talos %+v", d.Result.Talos)
				}
			})},
		{name: "a default Cozystack pool switched to Kairos holds no Talos settings",
			new: cozystackSpec(t, "default-kairos.yaml", nil),
			check: func(t *testing.T, d Decision) {
				t.Helper()
				if d.ClassName != "kairos" || d.Result == nil || d.Result.Bootstrap != workerclassv1.BootstrapKairos {
					t.Errorf("decision %+v", d)
				}
			}},
		{name: "an explicit empty Talos setting is no Talos setting for Kairos",
			new: cozystackSpec(t, "default-kairos.yaml", func(spec map[string]any) { talosOf(spec)["imageFactoryURL"] = "" })},
		{name: "a Talos setting other than Cozystack's default is refused for Kairos",
			new:      cozystackSpec(t, "default-kairos.yaml", func(spec map[string]any) { talosOf(spec)["version"] = "v1.13.5" }),
			wantErrs: []string{"spec.talos: Forbidden: Talos settings are not Kairos configuration"}},
		{name: "talos.registryMirrors are the pool's mirrors, skipFallback included",
			new: cozystackSpec(t, "talos-mirrors.yaml", nil),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				if !reflect.DeepEqual(d.Result.Talos.RegistryMirrors, mirror) {
					t.Errorf("mirrors %+v", d.Result.Talos.RegistryMirrors)
				}
			})},
		{name: "talos.registryMirrors replace the class's mirrors",
			new: cozystackSpec(t, "talos-mirrors.yaml", withClass("talos-hoster-r1")),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				if !reflect.DeepEqual(d.Result.Talos.RegistryMirrors, mirror) {
					t.Errorf("mirrors %+v", d.Result.Talos.RegistryMirrors)
				}
			})},
		{name: "talos.registryMirrors are refused for Kairos where they are written",
			new:      cozystackSpec(t, "talos-mirrors.yaml", withClass("kairos")),
			wantErrs: []string{"spec.talos.registryMirrors: Forbidden: Talos settings are not Kairos configuration"}},
		{name: "a bad mirror endpoint is named where it is written",
			new: cozystackSpec(t, "talos-mirrors.yaml", func(spec map[string]any) {
				talosOf(spec)["registryMirrors"] = map[string]any{"ghcr.io": map[string]any{"endpoints": []any{"not a url"}}}
			}),
			wantErrs: []string{"spec.talos.registryMirrors[ghcr.io].endpoints[0]: Invalid value"}},
		{name: "an unknown mirror field is refused with its path",
			new: cozystackSpec(t, "talos-mirrors.yaml", func(spec map[string]any) {
				talosOf(spec)["registryMirrors"] = map[string]any{"ghcr.io": map[string]any{"endpoints": []any{"https://m.example.com"}, "overridePath": true}}
			}),
			wantErrs: []string{"spec.talos.registryMirrors[ghcr.io].overridePath: Forbidden: unknown field; it would be dropped, not applied. This object has only: endpoints, skipFallback"}},
		{name: "Cozystack's default talos.registryMirrors beside the seed's spec.registryMirrors leaves the seed's",
			new: cozystackSpec(t, "default-talos.yaml", topMirrors(map[string]any{"ghcr.io": map[string]any{
				"endpoints": []any{"http://ghcr-mirror.kube-system.svc"}, "skipFallback": true}})),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				if !reflect.DeepEqual(d.Result.Talos.RegistryMirrors, mirror) {
					t.Errorf("mirrors %+v", d.Result.Talos.RegistryMirrors)
				}
			})},
		{name: "the seed's {} clears a class's mirrors beside Cozystack's default",
			new: cozystackSpec(t, "default-talos.yaml", func(spec map[string]any) {
				withClass("talos-hoster-r1")(spec)
				topMirrors(map[string]any{})(spec)
			}),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				if len(d.Result.Talos.RegistryMirrors) != 0 {
					t.Errorf("mirrors %+v", d.Result.Talos.RegistryMirrors)
				}
			})},
		{name: "the same mirrors in both places are read once",
			new: cozystackSpec(t, "talos-mirrors.yaml", topMirrors(map[string]any{"ghcr.io": map[string]any{
				"endpoints": []any{"http://ghcr-mirror.kube-system.svc"}, "skipFallback": true}})),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				if !reflect.DeepEqual(d.Result.Talos.RegistryMirrors, mirror) {
					t.Errorf("mirrors %+v", d.Result.Talos.RegistryMirrors)
				}
			})},
		{name: "different mirrors in both places are refused, naming both",
			new: cozystackSpec(t, "talos-mirrors.yaml", topMirrors(map[string]any{"ghcr.io": map[string]any{
				"endpoints": []any{"http://ghcr-mirror.kube-system.svc"}}})),
			wantErrs: []string{"spec.talos.registryMirrors: Forbidden: differs from spec.registryMirrors"}},
		{name: "an UPDATE that makes the two places differ is refused",
			op: Update,
			old: cozystackSpec(t, "talos-mirrors.yaml", func(spec map[string]any) {
				withClass("talos")(spec)
				spec["registryMirrors"] = talosOf(spec)["registryMirrors"]
			}),
			new: cozystackSpec(t, "talos-mirrors.yaml", func(spec map[string]any) {
				withClass("talos")(spec)
				spec["registryMirrors"] = talosOf(spec)["registryMirrors"]
				talosOf(spec)["registryMirrors"] = map[string]any{"docker.io": map[string]any{"endpoints": []any{"https://m.example.com"}}}
			}),
			wantErrs: []string{"spec.talos.registryMirrors: Forbidden: differs from spec.registryMirrors"}},
		{name: "a pool setting every field of Cozystack's type is admitted",
			new: cozystackSpec(t, "every-field.yaml", withClass("talos")),
			check: talosResult(func(t *testing.T, d *Decision) {
				t.Helper()
				tl := d.Result.Talos
				if tl.Version != "v1.13.5" || tl.ImageFactoryURL != "https://factory.example.com" ||
					tl.InstallerImage != "registry.example.com/talos/installer:v1.13.5" || len(tl.RegistryMirrors) != 1 {
					t.Errorf("Talos %+v", tl)
				}
			})},
	})
}

// ClassSettings reads Cozystack's schema defaults as not supplied and
// leaves Settings, which the legacy path renders, as written.
func TestClassSettings(t *testing.T) {
	var spec map[string]any
	if err := json.Unmarshal([]byte(cozystackSpec(t, "default-talos.yaml", nil)), &spec); err != nil {
		t.Fatal(err)
	}
	p, errs := PoolFromObject(map[string]any{"spec": spec})
	if len(errs) > 0 || len(p.shape) > 0 {
		t.Fatal(errs, p.shape)
	}
	if got := p.ClassSettings(); got.Talos != nil || got.RegistryMirrors != nil || got.Version != "v1.35" {
		t.Errorf("class settings %+v", got)
	}
	if p.Settings.Talos == nil || *p.Settings.Talos.Version != "v1.13.6" || p.Settings.RegistryMirrors == nil {
		t.Errorf("settings as written lost: %+v", p.Settings)
	}
}
