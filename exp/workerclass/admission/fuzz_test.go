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
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

// FuzzAdmit drives arbitrary old and new pool objects through admission
// (AdmitObjects, as the webhooks and the command call it) and checks the
// table's invariants: a classless UPDATE stays legacy without lookups, a
// classified pool never becomes legacy, a CREATE always stores a class, an
// accepted switch keeps the family, an accepted pool selects no minor newer
// than its control plane, and decisions are deterministic.
func FuzzAdmit(f *testing.F) {
	seeds := []struct {
		create   bool
		old, new string
	}{
		{true, ``, `{"spec":{"cluster":"example","version":"v1.35","sshKeys":[]}}`},
		{true, ``, `{"spec":{"workerClassName":"kairos","version":"v1.35","minReplicas":2,"maxReplicas":3,"sshKeys":[]}}`},
		{true, ``, `{"spec":{"workerClassName":"talos-example-r1","version":"v1.35","talos":{"version":"v1.13.6"},"kernelModules":[{"name":"nvme_tcp"}]}}`},
		{false, `{"spec":{"cluster":"example"}}`, `{"spec":{"cluster":"example","workerClassName":""}}`},
		{false, `{"spec":{"workerClassName":"kairos","version":"v1.35"}}`, `{"spec":{"version":"v1.35"}}`},
		{false, `{"spec":{"workerClassName":"talos","version":"v1.35"}}`, `{"spec":{"workerClassName":"kairos","version":"v1.35"}}`},
		{false, `{"spec":{"workerClassName":"kairos","version":"v1.35"}}`, `{"spec":{"workerClassName":"kairos-example-v1-35-6-r1","version":"v1.35"}}`},
		{true, ``, `{"spec":{"cluster":"example","workerClassName":"talos","version":"v1.35","gpus":[{"name":"gpu1","deviceName":"nvidia.com/X"}]}}`},
		{true, ``, `{"spec":{"cluster":"example","substrate":"proxmox","workerClassName":"talos-proxmox","version":"v1.35","proxmox":{"templateTags":["a"]}}}`},
		{false, `{"spec":{"cluster":"example","workerClassName":"talos","version":"v1.34","gpus":"x"}}`, `{"spec":{"cluster":"example","workerClassName":"talos","version":"v1.35","gpus":"x"}}`},
		// Cozystack's shape (test/cozystack/pools): its schema defaults,
		// and registry mirrors under talos, alone or beside the seed's.
		{true, ``, `{"spec":{"cluster":"example","workerClassName":"kairos","version":"v1.35","minReplicas":0,"maxReplicas":10,"instanceType":"u1.medium","diskSize":"20Gi","talos":{"version":"v1.13.6","schematicID":"ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515","imageFactoryURL":"https://factory.talos.dev","installerRepository":"factory.talos.dev/installer","registryMirrors":{}},"images":{"kubectl":""}}}`},
		{true, ``, `{"spec":{"cluster":"example","version":"v1.35","talos":{"registryMirrors":{"ghcr.io":{"endpoints":["http://ghcr-mirror.kube-system.svc"],"skipFallback":true}}}}}`},
		{false, `{"spec":{"cluster":"example","workerClassName":"talos-hoster-r1","version":"v1.35","registryMirrors":{"docker.io":{"endpoints":["https://m.example.com"]}},"talos":{"registryMirrors":{}}}}`,
			`{"spec":{"cluster":"example","workerClassName":"talos-hoster-r1","version":"v1.35","registryMirrors":{"docker.io":{"endpoints":["https://m.example.com"]}},"talos":{"registryMirrors":{"ghcr.io":{"endpoints":["https://g.example.com"]}}}}}`},
	}
	for _, s := range seeds {
		f.Add(s.create, []byte(s.old), []byte(s.new), "talos")
	}
	f.Fuzz(func(t *testing.T, create bool, oldJSON, newJSON []byte, defaultClass string) {
		newObj, newPool, ok := decodePool(newJSON)
		if !ok {
			t.Skip()
		}
		req := Request{Operation: Create, New: newPool}
		var oldObj map[string]any
		if !create {
			var oldPool Pool
			oldObj, oldPool, ok = decodePool(oldJSON)
			if !ok {
				t.Skip()
			}
			req.Operation, req.Old = Update, &oldPool
		}
		run := func() (Decision, []string, int, error) {
			l := lookups{defClass: defaultClass}
			req.Classes, req.Platform = l.class, l.getPlatform
			req.ControlPlaneVersion = controlPlaneAt("v1.34.9", nil)
			d, errs := AdmitObjects(req, newObj, oldObj)
			return d, l.classes, l.platform, errs.ToAggregate()
		}
		d, classes, platformReads, err := run()
		d2, _, _, err2 := run()
		if !reflect.DeepEqual(d, d2) || (err == nil) != (err2 == nil) {
			t.Fatal("admission is not deterministic")
		}
		if !create && req.Old.ClassName == "" && newPool.ClassName == "" {
			if err != nil || !d.Legacy() || len(classes) > 0 || platformReads > 0 {
				t.Fatalf("a classless UPDATE must stay legacy without lookups: %+v %v %v %d", d, err, classes, platformReads)
			}
			return
		}
		if err != nil {
			return
		}
		if d.Legacy() {
			t.Fatalf("a classified or created pool became legacy: %+v", d)
		}
		selects := create || req.Old.Settings.Version != newPool.Settings.Version || req.Old.Cluster != newPool.Cluster
		if major, minor, _ := validation.ParseMinor(newPool.Settings.Version); d.Result != nil && selects && newPool.Cluster == "example" && (major > 1 || major == 1 && minor > 34) {
			t.Fatalf("minor %q, newer than the control plane's v1.34.9, was accepted", newPool.Settings.Version)
		}
		if !create && req.Old.ClassName != "" && newPool.ClassName == "" && d.ClassName != req.Old.ClassName {
			t.Fatalf("the stored class %q was not restored: %+v", req.Old.ClassName, d)
		}
		if !create && d.ClassName != req.Old.ClassName {
			oldFamily := workerclassv1.BootstrapTalos
			if req.Old.ClassName != "" {
				oldFamily = testClasses[req.Old.ClassName].Spec.Bootstrap
			}
			if testClasses[d.ClassName].Spec.Bootstrap != oldFamily {
				t.Fatalf("an in-place family switch was accepted: %q -> %q", req.Old.ClassName, d.ClassName)
			}
		}
	})
}

func decodePool(data []byte) (map[string]any, Pool, bool) {
	var obj map[string]any
	if json.Unmarshal(data, &obj) != nil {
		return nil, Pool{}, false
	}
	p, errs := PoolFromObject(obj)
	return obj, p, len(errs) == 0
}

// FuzzPoolFromObject checks the strict reading of pool objects against
// apimachinery's own strict converter: a class-relevant field has a
// recorded problem exactly when the converter, asked to report unknown
// fields, refuses it; and a field without problems is read completely.
func FuzzPoolFromObject(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{"gpus":[{"name":"gpu1","deviceName":"nvidia.com/X"}]}}`,
		`{"spec":{"gpus":[{"name":5}],"kernelModules":"x"}}`,
		`{"spec":{"registryMirrors":{"docker.io":{"endpoints":["https://m"],"x":1}},"talos":{"Version":"v1"}}}`,
		`{"spec":{"osImage":{"builtin":null,"factory":{"endpoint":"https://f"}},"proxmox":{"templateTags":[]},"sshKeys":[null]}}`,
		`{"spec":{"cluster":"c","substrate":"proxmox","version":"v1.35","talos":{"version":""},"kernelModules":[{"name":"a","parameters":["b=c"]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			t.Skip()
		}
		p, errs := PoolFromObject(obj)
		if len(errs) > 0 {
			return
		}
		spec, _ := obj["spec"].(map[string]any)
		for name := range settingsFields {
			raw, present := spec[name]
			if !present || raw == nil {
				continue
			}
			var strict workerclassv1.PoolSettings
			oracle := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(map[string]any{name: raw}, &strict, true)
			if (oracle != nil) != (len(p.shape[name]) > 0) {
				t.Fatalf("field %s: strict converter says %v, PoolFromObject recorded %v", name, oracle, p.shape[name].ToAggregate())
			}
			for _, e := range p.shape[name] {
				if !strings.HasPrefix(e.Field, "spec."+name) {
					t.Fatalf("field %s: problem at %s", name, e.Field)
				}
			}
			if oracle == nil {
				f := settingsFields[name]
				got := reflect.ValueOf(p.Settings).FieldByIndex(f.index).Interface()
				want := reflect.ValueOf(strict).FieldByIndex(f.index).Interface()
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("field %s read as %#v, want %#v", name, got, want)
				}
			}
		}
	})
}
