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
	"testing"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// FuzzAdmit drives arbitrary old and new pool objects through admission and
// checks the table's invariants: a classless UPDATE stays legacy without
// lookups, a classified pool never becomes legacy, a CREATE always stores a
// class, an accepted switch keeps the family, and decisions are
// deterministic.
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
	}
	for _, s := range seeds {
		f.Add(s.create, []byte(s.old), []byte(s.new), "talos")
	}
	f.Fuzz(func(t *testing.T, create bool, oldJSON, newJSON []byte, defaultClass string) {
		newPool, ok := decodePool(newJSON)
		if !ok {
			t.Skip()
		}
		req := Request{Operation: Create, New: newPool}
		if !create {
			oldPool, ok := decodePool(oldJSON)
			if !ok {
				t.Skip()
			}
			req.Operation, req.Old = Update, &oldPool
		}
		run := func() (Decision, []string, int, error) {
			l := lookups{defClass: defaultClass}
			req.Classes, req.Platform = l.class, l.getPlatform
			d, errs := Admit(req)
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

func decodePool(data []byte) (Pool, bool) {
	var obj map[string]any
	if json.Unmarshal(data, &obj) != nil {
		return Pool{}, false
	}
	p, errs := PoolFromObject(obj)
	return p, len(errs) == 0
}
