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

package kubevirtmachine

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnWritesTellAStaleCacheApart(t *testing.T) {
	machine := types.NamespacedName{Namespace: "ns", Name: "w"}
	for _, tt := range []struct {
		name     string
		before   string
		versions []string
		cached   string
		behind   bool
	}{
		{"the version a write replaced is behind", "1", []string{"2"}, "1", true},
		{"a version between two writes of one reconcile is behind", "1", []string{"2", "3"}, "2", true},
		{"the last write's version is current", "1", []string{"2", "3"}, "3", false},
		{"a version after our writes (someone else's) is current", "1", []string{"2"}, "7", false},
		{"a patch that changed nothing leaves its version current", "1", []string{"1"}, "1", false},
		{"a reconcile without writes records nothing", "1", nil, "1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newOwnWrites()
			w.wrote(machine, tt.before, tt.versions)
			if got := w.cacheBehind(machine, tt.cached); got != tt.behind {
				t.Errorf("cacheBehind = %v, want %v", got, tt.behind)
			}
		})
	}

	t.Run("once the cache moved on, the record is dropped", func(t *testing.T) {
		w := newOwnWrites()
		w.wrote(machine, "1", []string{"2"})
		if w.cacheBehind(machine, "2") || w.cacheBehind(machine, "1") {
			t.Error("a version seen after the cache caught up counts as behind")
		}
	})
	t.Run("a machine that is gone is forgotten", func(t *testing.T) {
		w := newOwnWrites()
		w.wrote(machine, "1", []string{"2"})
		w.forget(machine)
		if w.cacheBehind(machine, "1") {
			t.Error("a forgotten machine counts as behind")
		}
	})
	t.Run("a reconciler without records treats every version as current", func(t *testing.T) {
		var w *ownWrites
		w.wrote(machine, "1", []string{"2"})
		if w.cacheBehind(machine, "1") {
			t.Error("a nil record counts as behind")
		}
	})
}
