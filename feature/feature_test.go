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

package feature

import "testing"

func TestWorkerClassGate(t *testing.T) {
	gates := MutableGates.DeepCopy()
	if gates.Enabled(WorkerClass) {
		t.Fatal("WorkerClass must be off by default")
	}
	if spec := gates.GetAll()[WorkerClass]; spec.PreRelease != "ALPHA" {
		t.Errorf("WorkerClass is %q, want alpha", spec.PreRelease)
	}
	if err := gates.Set("WorkerClass=true"); err != nil {
		t.Fatal(err)
	}
	if !gates.Enabled(WorkerClass) {
		t.Fatal("--feature-gates=WorkerClass=true must enable it")
	}
	if err := gates.Set("NoSuchGate=true"); err == nil {
		t.Error("an unknown gate must be rejected")
	}
}
