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

package packaging

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestReleaseBinaries runs make release-binaries as a release would and
// checks what a hoster downloads: the workerclass command for linux amd64
// and arm64, each a static ELF of its architecture (no interpreter, no
// shared libraries), whose sums in workerclass-checksums.txt match; and
// the amd64 binary, run here, prints the restore layout (resolve
// --legacy) exactly as the command's golden test has it. Cost: one
// cross-compile per architecture (about a minute each with a warm build
// cache, more on a cold one).
func TestReleaseBinaries(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	run(t, []string{"RELEASE_DIR=" + dir}, repoRoot, "make", "--no-print-directory", "release-binaries")

	machines := map[string]elf.Machine{"workerclass-linux-amd64": elf.EM_X86_64, "workerclass-linux-arm64": elf.EM_AARCH64}
	sums, err := os.ReadFile(filepath.Join(dir, "workerclass-checksums.txt")) //nolint:gosec // The test's own output folder.
	g.Expect(err).NotTo(HaveOccurred())
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		g.Expect(ok).To(BeTrue(), "a sha256sum line: %q", line)
		listed[name] = sum
	}
	g.Expect(listed).To(HaveLen(len(machines)), "one sum per binary")
	for name, machine := range machines {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path) //nolint:gosec // The test's own output folder.
		g.Expect(err).NotTo(HaveOccurred())
		sum := sha256.Sum256(data)
		g.Expect(listed).To(HaveKeyWithValue(name, hex.EncodeToString(sum[:])), "%s's sum", name)

		f, err := elf.Open(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(f.Machine).To(Equal(machine), name)
		for _, p := range f.Progs {
			g.Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "%s is static: no dynamic loader", name)
		}
		libs, err := f.ImportedLibraries()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(libs).To(BeEmpty(), "%s links no shared library", name)
		g.Expect(f.Close()).To(Succeed())
	}

	// The restore interface, as the command's golden test runs it (from
	// cmd/workerclass, with its test data).
	golden, err := os.ReadFile(filepath.Join(repoRoot, "cmd", "workerclass", "testdata", "golden", "legacy-example-talos.golden"))
	g.Expect(err).NotTo(HaveOccurred())
	_, rest, ok := strings.Cut(string(golden), "--- stdout\n")
	g.Expect(ok).To(BeTrue())
	want, _, ok := strings.Cut(rest, "--- stderr\n")
	g.Expect(ok).To(BeTrue())
	got := run(t, nil, filepath.Join(repoRoot, "cmd", "workerclass"), filepath.Join(dir, "workerclass-linux-amd64"),
		"resolve", "--pool", filepath.Join("testdata", "pools", "example-talos.yaml"), "--classes", filepath.Join("testdata", "classes"),
		"--platform", filepath.Join("testdata", "platform.yaml"), "--legacy")
	g.Expect(got).To(Equal(want))
}
