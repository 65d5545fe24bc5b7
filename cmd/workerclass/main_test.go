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

package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGolden runs the command on the seed's examples and compares exit
// code, stdout and stderr with testdata/golden. Run with -update to
// rewrite them after an intended change.
func TestGolden(t *testing.T) {
	resolveArgs := func(pool string, extra ...string) []string {
		return append([]string{"resolve", "--pool", filepath.Join("testdata", "pools", pool+".yaml"),
			"--classes", filepath.Join("testdata", "classes"), "--platform", filepath.Join("testdata", "platform.yaml")}, extra...)
	}
	updateArgs := func(old, pool string, extra ...string) []string {
		return append([]string{"resolve", "--old", filepath.Join("testdata", "updates", old+".yaml"), "--pool", filepath.Join("testdata", "updates", pool+".yaml"),
			"--classes", filepath.Join("testdata", "classes"), "--platform", filepath.Join("testdata", "platform.yaml")}, extra...)
	}
	cases := []struct {
		name string
		args []string
	}{
		{"resolve-example-talos", resolveArgs("example-talos")},
		{"resolve-example-kairos", resolveArgs("example-kairos")},
		{"resolve-example-custom-kairos", resolveArgs("example-custom-kairos")},
		{"resolve-platform-default-nvidia", resolveArgs("gpu-default-class")},
		{"resolve-golden-clone", resolveArgs("golden-configdrive")},
		{"resolve-rejected", resolveArgs("wrong-minor")},
		{"legacy-example-talos", resolveArgs("example-talos", "--legacy")},
		{"legacy-already-classless", resolveArgs("gpu-default-class", "--legacy")},
		{"legacy-kairos-refused", resolveArgs("example-kairos", "--legacy")},
		{"legacy-configdrive-refused", resolveArgs("golden-configdrive", "--legacy")},
		{"single-class-file", []string{"resolve", "--pool", filepath.Join("testdata", "pools", "example-kairos.yaml"),
			"--classes", filepath.Join("testdata", "classes", "builtin.yaml"), "--platform", filepath.Join("testdata", "platform.yaml")}},
		{"unknown-class", []string{"resolve", "--pool", filepath.Join("testdata", "pools", "example-talos.yaml"),
			"--classes", filepath.Join("testdata", "classes", "builtin.yaml"), "--platform", filepath.Join("testdata", "platform.yaml")}},
		{"usage", nil},
		{"bad-substrate", resolveArgs("example-talos", "--substrate", "Metal")},
		// Pool fields are read strictly, with their paths.
		{"strict-vm-shaped-gpu", resolveArgs("vm-shaped-gpu")},
		{"strict-duplicate-key", resolveArgs("duplicate-key")},
		{"strict-class-unknown-field", []string{"resolve", "--pool", filepath.Join("testdata", "pools", "example-talos.yaml"),
			"--classes", filepath.Join("testdata", "bad-classes", "unknown-field.yaml"), "--platform", filepath.Join("testdata", "platform.yaml")}},
		// The built-in names keep their family, as the class webhook says.
		{"builtin-family", []string{"resolve", "--pool", filepath.Join("testdata", "pools", "example-kairos.yaml"),
			"--classes", filepath.Join("testdata", "bad-classes", "builtin-family.yaml"), "--platform", filepath.Join("testdata", "platform.yaml")}},
		// A pool that names its substrate gets that substrate's rows.
		{"substrate-proxmox-kairos", resolveArgs("proxmox-kairos")},
		{"substrate-proxmox-talos", resolveArgs("proxmox-talos")},
		// Upgrade the parent control-plane minor first.
		{"control-plane-older", resolveArgs("example-talos", "--control-plane-version", "v1.34.9")},
		{"control-plane-upgraded", resolveArgs("example-talos", "--control-plane-version", "v1.35.0")},
		{"control-plane-bad-version", resolveArgs("example-talos", "--control-plane-version", "1.35")},
		// UPDATEs, the stored pool beside the new one.
		{"update-scale-not-resolved", updateArgs("stored-talos", "scaled")},
		{"update-class-omitted-restores", updateArgs("stored-talos", "class-omitted")},
		{"update-class-omitted-control-plane-older", updateArgs("stored-talos", "class-omitted", "--control-plane-version", "v1.34.9")},
		{"update-family-switch-refused", updateArgs("stored-talos", "switch-to-kairos")},
		{"update-legacy-stays-legacy", updateArgs("legacy-stored", "legacy-scaled")},
		{"update-legacy-to-kairos-refused", updateArgs("legacy-stored", "switch-to-kairos")},
		{"update-other-pool", []string{"resolve", "--old", filepath.Join("testdata", "updates", "stored-talos.yaml"),
			"--pool", filepath.Join("testdata", "pools", "example-talos.yaml"),
			"--classes", filepath.Join("testdata", "classes"), "--platform", filepath.Join("testdata", "platform.yaml")}},
		{"update-legacy-flag", updateArgs("stored-talos", "scaled", "--legacy")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			got := fmt.Sprintf("exit: %d\n--- stdout\n%s--- stderr\n%s", code, stdout.String(), stderr.String())
			path := filepath.Join("testdata", "golden", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil { //nolint:gosec // A golden file in the repository, as readable as its neighbours.
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path) //nolint:gosec // The test's own golden file.
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}

// The legacy layout printed for a Talos pool is itself a valid pool file
// that resolves, as the built-in talos class, to the same content hash.
func TestLegacyOutputResolvesToTheSameHash(t *testing.T) {
	args := []string{"resolve", "--pool", filepath.Join("testdata", "pools", "example-talos.yaml"),
		"--classes", filepath.Join("testdata", "classes"), "--platform", filepath.Join("testdata", "platform.yaml")}
	var effective, legacy, stderr bytes.Buffer
	if code := run(args, &effective, &stderr); code != 0 {
		t.Fatalf("resolve: %d %s", code, stderr.String())
	}
	if code := run(append(args, "--legacy"), &legacy, &stderr); code != 0 {
		t.Fatalf("legacy: %d %s", code, stderr.String())
	}
	// Resolve the legacy layout with the built-in class named explicitly.
	file := filepath.Join(t.TempDir(), "legacy.yaml")
	withClass := strings.Replace(legacy.String(), "spec:\n", "spec:\n  workerClassName: talos\n", 1)
	if err := os.WriteFile(file, []byte(withClass), 0o600); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	args[2] = file
	if code := run(args, &again, &stderr); code != 0 {
		t.Fatalf("resolving the legacy layout: %d %s", code, stderr.String())
	}
	hash := func(out string) string {
		for _, line := range strings.Split(out, "\n") {
			if h, ok := strings.CutPrefix(line, "contentHash: "); ok {
				return h
			}
		}
		return ""
	}
	if hash(again.String()) == "" || hash(again.String()) != hash(effective.String()) {
		t.Errorf("legacy hash %q, original %q", hash(again.String()), hash(effective.String()))
	}
}
