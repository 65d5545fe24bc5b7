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
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

// objectCase is one admission request over pool objects written as JSON
// specs, through AdmitObjects as the webhooks and the command call it.
type objectCase struct {
	name     string
	op       Operation
	old, new string
	// substrate is the default for pools that name none.
	substrate resolve.Substrate
	// controlPlane answers ControlPlaneVersion; nil leaves it unset.
	controlPlane ControlPlaneVersionGetter
	// wantErrs are the exact field errors; empty means admitted.
	wantErrs []string
	check    func(t *testing.T, d Decision)
}

func specObject(t *testing.T, spec string) map[string]any {
	t.Helper()
	if spec == "" {
		return nil
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("%s: %v", spec, err)
	}
	return map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "KubernetesNodes", "spec": s}
}

func runObjectCases(t *testing.T, cases []objectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op := tc.op
			if op == "" {
				op = Create
			}
			var l lookups
			d, errs := AdmitObjects(Request{Operation: op, Classes: l.class, Platform: l.getPlatform,
				ControlPlaneVersion: tc.controlPlane, Substrate: tc.substrate}, specObject(t, tc.new), specObject(t, tc.old))
			got := make([]string, 0, len(errs))
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if len(tc.wantErrs) == 0 && len(got) > 0 {
				t.Fatalf("refused: %s", strings.Join(got, "\n"))
			}
			if len(tc.wantErrs) > 0 {
				if len(got) != len(tc.wantErrs) {
					t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.wantErrs, "\n"))
				}
				for i := range got {
					if !strings.HasPrefix(got[i], tc.wantErrs[i]) {
						t.Errorf("error %d:\n%s\nwant a prefix of\n%s", i, got[i], tc.wantErrs[i])
					}
				}
				return
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// Class-relevant pool fields are read exactly as written: an unknown field
// or a value of the wrong type is refused with its path instead of being
// dropped in silence. Fields of the pool API that admission does not read
// stay the pool API's business.
func TestPoolFieldsAreReadStrictly(t *testing.T) {
	const head = `"cluster":"example","workerClassName":"talos","version":"v1.35"`
	runObjectCases(t, []objectCase{
		{name: "a GPU written with a VirtualMachine's {name, deviceName} shape is refused, not stripped of its device",
			new: `{` + head + `,"gpus":[{"name":"gpu1","deviceName":"nvidia.com/AD102GL_L40S"}]}`,
			wantErrs: []string{"spec.gpus[0].deviceName: Forbidden: unknown field; it would be dropped, not applied. This object has only: name. " +
				"A pool's GPU is named by its resource name alone, for example {name: nvidia.com/AD102GL_L40S}; a VirtualMachine's {name, deviceName} shape does not apply"}},
		{name: "the pool's GPU shape gets the NVIDIA modules",
			new: `{` + head + `,"gpus":[{"name":"nvidia.com/AD102GL_L40S"}]}`,
			check: func(t *testing.T, d Decision) {
				t.Helper()
				if d.Result == nil || d.Result.Talos == nil || len(d.Result.Talos.KernelModules) != 4 || d.Result.Talos.KernelModules[0].Name != "nvidia" {
					t.Errorf("NVIDIA modules not loaded: %+v", d.Result)
				}
			}},
		{name: "a GPU name of the wrong type", new: `{` + head + `,"gpus":[{"name":5}]}`,
			wantErrs: []string{"spec.gpus[0].name: Invalid value: must be a string, not a number"}},
		{name: "a list written as a string", new: `{` + head + `,"kernelModules":"nvme_tcp"}`,
			wantErrs: []string{"spec.kernelModules: Invalid value: must be a list, not a string"}},
		{name: "an unknown kernel module field", new: `{` + head + `,"kernelModules":[{"name":"nvme_tcp","params":["x=1"]}]}`,
			wantErrs: []string{"spec.kernelModules[0].params: Forbidden: unknown field; it would be dropped, not applied. This object has only: name, parameters"}},
		{name: "an unknown field in a mirror keyed by a host with dots", new: `{` + head + `,"registryMirrors":{"docker.io":{"endpoints":["https://m.example.com"],"insecure":true}}}`,
			wantErrs: []string{"spec.registryMirrors[docker.io].insecure: Forbidden: unknown field"}},
		{name: "a Talos scalar spelled with the wrong case", new: `{` + head + `,"talos":{"Version":"v1.13.6"}}`,
			wantErrs: []string{"spec.talos.Version: Forbidden: unknown field; it would be dropped, not applied. This object has only: imageFactoryCA, imageFactoryURL, installerRepository, registryMirrors, schematicID, version"}},
		{name: "an unknown osImage source field", new: `{` + head + `,"osImage":{"factory":{"url":"https://factory.example.com"}}}`,
			wantErrs: []string{"spec.osImage.factory.url: Forbidden: unknown field"}},
		{name: "an unknown Proxmox override", new: `{` + head + `,"proxmox":{"tags":["gpu"]}}`,
			wantErrs: []string{"spec.proxmox.tags: Forbidden: unknown field"}},
		{name: "an SSH key written as an object is refused without echoing it", new: `{"cluster":"c","workerClassName":"kairos","version":"v1.35","sshKeys":[{"key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXAMPLE"}]}`,
			wantErrs: []string{"spec.sshKeys[0]: Invalid value: must be a string, not an object"}},
		{name: "a cluster name of the wrong type", new: `{"cluster":3,"workerClassName":"talos","version":"v1.35"}`,
			wantErrs: []string{"spec.cluster: Invalid value: must be a string, not a number"}},
		{name: "every problem is reported, in field order", new: `{` + head + `,"talos":{"vers":"x"},"gpus":[{"deviceName":"d"}]}`,
			wantErrs: []string{"spec.gpus[0].deviceName: Forbidden", "spec.talos.vers: Forbidden"}},
		{name: "null is not supplied, as JSON reads it", new: `{` + head + `,"talos":null,"kernelModules":null,"gpus":[{"name":"nvidia.com/X"}],"osImage":{"builtin":null}}`},
		{name: "fields of the pool API admission does not read are left alone", new: `{` + head + `,"minReplicas":2,"instanceType":"u1.large","resources":{"cpu":2}}`},
		{name: "the class name is read before anything else", new: `{"workerClassName":7,"gpus":[{"deviceName":"d"}]}`,
			wantErrs: []string{"spec.workerClassName: Invalid value: 7: must be a string"}},
	})
}

// An UPDATE is judged on what it writes: a classless pool stays legacy
// whatever it holds, a field stored before admission read it strictly does
// not block a scale or another field's change, and a change that only adds
// an unknown field is not mistaken for "nothing changed".
func TestStrictReadingOfUpdates(t *testing.T) {
	const stored = `{"cluster":"c","workerClassName":"talos","version":"v1.35","minReplicas":1,"gpus":[{"name":"gpu1","deviceName":"nvidia.com/X"}]}`
	runObjectCases(t, []objectCase{
		{name: "a classless pool stays legacy whatever its fields hold", op: Update,
			old: `{"cluster":"c","gpus":"x"}`, new: `{"cluster":"c","gpus":[{"deviceName":"d"}],"substrate":"metal"}`,
			check: func(t *testing.T, d Decision) {
				t.Helper()
				if !d.Legacy() {
					t.Errorf("decision %+v", d)
				}
			}},
		{name: "a scale keeps a stored unreadable field", op: Update, old: stored,
			new: strings.Replace(stored, `"minReplicas":1`, `"minReplicas":3`, 1)},
		{name: "another field's change keeps a stored unreadable field", op: Update, old: stored,
			new: strings.Replace(stored, `"version":"v1.35"`, `"version":"v1.34"`, 1)},
		{name: "changing the unreadable field is refused", op: Update, old: stored,
			new:      strings.Replace(stored, `"nvidia.com/X"`, `"nvidia.com/Y"`, 1),
			wantErrs: []string{"spec.gpus[0].deviceName: Forbidden: unknown field"}},
		{name: "adding only an unknown field is a change, and refused", op: Update,
			old:      `{"cluster":"c","workerClassName":"talos","version":"v1.35","gpus":[{"name":"nvidia.com/X"}]}`,
			new:      `{"cluster":"c","workerClassName":"talos","version":"v1.35","gpus":[{"name":"nvidia.com/X","count":2}]}`,
			wantErrs: []string{"spec.gpus[0].count: Forbidden: unknown field"}},
		{name: "restoring the stored class validates the fields the update writes", op: Update,
			old: `{"cluster":"c","workerClassName":"talos","version":"v1.35"}`, new: `{"cluster":"c","version":"v1.35","talos":{"versions":"v1.13.6"}}`,
			wantErrs: []string{"spec.talos.versions: Forbidden: unknown field"}},
	})
}

var proxmoxTags = `"proxmox":{"templateTags":["gpu"]}`

// Where a pool names its substrate (spec.substrate, as Cozystack's
// Kubernetes application spells it), admission enforces that substrate's
// rows; a pool that names none runs on the webhook's default.
func TestPoolSubstrate(t *testing.T) {
	proxmoxTemplate := func(want ...string) func(t *testing.T, d Decision) {
		return func(t *testing.T, d Decision) {
			t.Helper()
			if d.Substrate != resolve.Proxmox || d.Result == nil || d.Result.Image.ProxmoxTemplate == nil ||
				!reflect.DeepEqual(d.Result.Image.ProxmoxTemplate.Tags, want) {
				t.Errorf("substrate %q, result %+v", d.Substrate, d.Result)
			}
		}
	}
	runObjectCases(t, []objectCase{
		{name: "Proxmox: Kairos is refused", new: `{"cluster":"c","substrate":"proxmox","workerClassName":"kairos","version":"v1.35"}`,
			wantErrs: []string{"workerclasses[kairos].spec.bootstrap: Forbidden: Kairos supports KubeVirt only, not Proxmox"}},
		{name: "Proxmox: nonempty osImage is not a Proxmox source", new: `{"cluster":"c","substrate":"proxmox","workerClassName":"talos-proxmox","version":"v1.35","osImage":{"factory":{}}}`,
			wantErrs: []string{"spec.osImage: Forbidden: osImage is a KubeVirt source, not a Proxmox template"}},
		{name: "Proxmox: an empty final template tag list fails", new: `{"cluster":"c","substrate":"proxmox","workerClassName":"talos","version":"v1.35"}`,
			wantErrs: []string{"workerclasses[talos].spec.proxmox.templateTags: Required value: the final Proxmox template tag list is empty"}},
		{name: "Proxmox: the pool's tags replace the class's", new: `{"cluster":"c","substrate":"proxmox","workerClassName":"talos-proxmox","version":"v1.35",` + proxmoxTags + `}`,
			check: proxmoxTemplate("gpu")},
		{name: "Proxmox: the class's tags when the pool supplies none", new: `{"cluster":"c","substrate":"proxmox","workerClassName":"talos-proxmox","version":"v1.35"}`,
			check: proxmoxTemplate("talos", "v1.13.6")},
		{name: "a pool naming kubevirt runs on KubeVirt whatever the default", substrate: resolve.Proxmox,
			new: `{"cluster":"c","substrate":"kubevirt","workerClassName":"kairos","version":"v1.35"}`,
			check: func(t *testing.T, d Decision) {
				t.Helper()
				if d.Substrate != resolve.KubeVirt || d.Result == nil || d.Result.Image.ContainerDisk == nil {
					t.Errorf("substrate %q, result %+v", d.Substrate, d.Result)
				}
			}},
		{name: "a pool naming no substrate runs on the default", substrate: resolve.Proxmox,
			new:      `{"cluster":"c","workerClassName":"kairos","version":"v1.35"}`,
			wantErrs: []string{"workerclasses[kairos].spec.bootstrap: Forbidden: Kairos supports KubeVirt only, not Proxmox"}},
		{name: "without a configured default, KubeVirt", new: `{"cluster":"c","workerClassName":"talos","version":"v1.35"}`,
			check: func(t *testing.T, d Decision) {
				t.Helper()
				if d.Substrate != resolve.KubeVirt || d.Result == nil || d.Result.Image.HTTPImport == nil {
					t.Errorf("substrate %q, result %+v", d.Substrate, d.Result)
				}
			}},
		{name: "an unknown substrate is refused", new: `{"cluster":"c","substrate":"Proxmox","workerClassName":"talos","version":"v1.35"}`,
			wantErrs: []string{`spec.substrate: Unsupported value: "Proxmox": supported values: "kubevirt", "proxmox"`}},
		{name: "an UPDATE changing only the substrate is validated again", op: Update,
			old:      `{"cluster":"c","workerClassName":"kairos","version":"v1.35"}`,
			new:      `{"cluster":"c","substrate":"proxmox","workerClassName":"kairos","version":"v1.35"}`,
			wantErrs: []string{"workerclasses[kairos].spec.bootstrap: Forbidden: Kairos supports KubeVirt only, not Proxmox"}},
	})
}

// controlPlaneAt answers ControlPlaneVersion for cluster "example" only.
func controlPlaneAt(version string, err error) ControlPlaneVersionGetter {
	return func(cluster string) (string, error) {
		if cluster != "example" {
			return "", fmt.Errorf("cluster %s: %w", cluster, ErrNotFound)
		}
		return version, err
	}
}

// "Upgrade the parent control-plane minor first": a pool may not select a
// minor newer than its cluster's control plane where that version is
// known; an unknown version is a warning, no cluster is no check.
func TestControlPlaneMinorFirst(t *testing.T) {
	const create135 = `{"cluster":"example","workerClassName":"talos","version":"v1.35"}`
	noWarnings := func(t *testing.T, d Decision) {
		t.Helper()
		if len(d.Warnings) > 0 {
			t.Errorf("warnings %q", d.Warnings)
		}
	}
	warns := func(want string) func(t *testing.T, d Decision) {
		return func(t *testing.T, d Decision) {
			t.Helper()
			if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], want) {
				t.Errorf("warnings %q, want one with %q", d.Warnings, want)
			}
		}
	}
	runObjectCases(t, []objectCase{
		{name: "CREATE of a minor newer than the control plane is refused", new: create135, controlPlane: controlPlaneAt("v1.34.9", nil),
			wantErrs: []string{`spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first: cluster example's control plane runs Kubernetes v1.34.9, so a pool may select v1.34 or an older minor`}},
		{name: "CREATE of the control plane's minor is admitted", new: create135, controlPlane: controlPlaneAt("v1.35.0", nil), check: noWarnings},
		{name: "CREATE of an older minor is admitted", new: create135, controlPlane: controlPlaneAt("v1.36.2", nil), check: noWarnings},
		{name: "a fixed image's minor is checked too", new: `{"cluster":"example","workerClassName":"kairos-example-v1-35-6-r1","version":"v1.35"}`,
			controlPlane: controlPlaneAt("v1.34.9", nil), wantErrs: []string{`spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first`}},
		{name: "a newer major is refused", new: create135, controlPlane: controlPlaneAt("v0.99.0", nil),
			wantErrs: []string{`spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first`}},
		{name: "UPDATE raising the minor past the control plane is refused", op: Update,
			old: `{"cluster":"example","workerClassName":"talos","version":"v1.34"}`, new: create135, controlPlane: controlPlaneAt("v1.34.9", nil),
			wantErrs: []string{`spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first`}},
		{name: "UPDATE raising the minor after the control plane is admitted", op: Update,
			old: `{"cluster":"example","workerClassName":"talos","version":"v1.34"}`, new: create135, controlPlane: controlPlaneAt("v1.35.6", nil)},
		{name: "UPDATE restoring the class while raising the minor is checked", op: Update,
			old: `{"cluster":"example","workerClassName":"talos","version":"v1.34"}`, new: `{"cluster":"example","version":"v1.35"}`, controlPlane: controlPlaneAt("v1.34.9", nil),
			wantErrs: []string{`spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first`}},
		{name: "UPDATE keeping the minor is not checked again", op: Update,
			old: create135, new: `{"cluster":"example","workerClassName":"talos","version":"v1.35","kernelModules":[]}`, controlPlane: controlPlaneAt("v1.34.9", nil)},
		{name: "UPDATE of a legacy pool is not checked", op: Update,
			old: `{"cluster":"example","version":"v1.34"}`, new: `{"cluster":"example","version":"v1.35"}`, controlPlane: controlPlaneAt("v1.34.9", nil)},
		{name: "a pool whose cluster is unknown is not checked", new: `{"cluster":"other","workerClassName":"talos","version":"v1.35"}`,
			controlPlane: controlPlaneAt("v1.34.9", nil), check: noWarnings},
		{name: "an unknown control plane version is a warning", new: create135,
			controlPlane: controlPlaneAt("", fmt.Errorf("%w: its control plane reports no version", ErrVersionUnknown)),
			check:        warns("spec.version was not checked against cluster example's control plane: the control plane's Kubernetes version is not known: its control plane reports no version")},
		{name: "a control plane version that is no release is a warning", new: create135, controlPlane: controlPlaneAt("latest", nil),
			check: warns(`its version "latest" is not a Kubernetes release`)},
		{name: "a failed lookup is an internal error", new: create135, controlPlane: controlPlaneAt("", fmt.Errorf("connection refused")),
			wantErrs: []string{"spec.cluster: Internal error: reading cluster example's control plane: connection refused"}},
		{name: "without a getter nothing is checked", new: create135, check: noWarnings},
	})
}

// The shape check knows every kind PoolSettings holds, so its default
// (an internal error) is unreachable for pools.
func TestShapeCheckCoversPoolSettings(t *testing.T) {
	var walk func(typ reflect.Type, path string)
	seen := map[reflect.Type]bool{}
	walk = func(typ reflect.Type, path string) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walk(typ.Elem(), path)
		case reflect.Struct:
			for name, f := range jsonFields(typ) {
				walk(f.typ, path+"."+name)
			}
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64:
		default:
			t.Errorf("%s: the shape check cannot read a %s", path, typ.Kind())
		}
	}
	walk(reflect.TypeFor[workerclassv1.PoolSettings](), "spec")
	if errs := checkShape(complex(1, 1), reflect.TypeFor[complex128](), field.NewPath("x")); len(errs) != 1 || errs[0].Type != field.ErrorTypeInternal {
		t.Errorf("an unknown kind: %v", errs)
	}
}
