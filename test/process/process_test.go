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

package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestAnExitIsReportedWithItsLog(t *testing.T) {
	g := NewWithT(t)
	log := filepath.Join(t.TempDir(), "child.log")
	g.Expect(os.WriteFile(log, []byte("an earlier life\n"), 0o600)).To(Succeed())

	p, err := Start("the child", log, exec.CommandContext(t.Context(), "sh", "-c", "echo out; echo err >&2; exit 3"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(p.Done(), time.Minute).Should(BeClosed())

	g.Expect(p.Exited()).To(BeTrue())
	g.Expect(p.Err()).To(MatchError("exit status 3"))
	g.Expect(p.Tail(1<<10)).To(Equal("an earlier life\nout\nerr\n"), "the output is appended")
	g.Expect(p.Tail(4)).To(Equal("err\n"), "the tail is the log's last bytes")
	g.Expect(p.Stop(time.Minute)).To(Succeed(), "a process that has exited is stopped")
	g.Expect(p.Kill()).To(Succeed(), "and killed")
}

func TestStopEndsAProcessWithSIGTERM(t *testing.T) {
	g := NewWithT(t)
	p, err := Start("sleep", filepath.Join(t.TempDir(), "sleep.log"), exec.CommandContext(t.Context(), "sleep", "600"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Exited()).To(BeFalse())
	g.Expect(p.Err()).NotTo(HaveOccurred(), "no exit yet")

	g.Expect(p.Stop(time.Minute)).To(Succeed())
	g.Expect(p.Err()).To(MatchError("signal: terminated"))
}

func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	g := NewWithT(t)
	log := filepath.Join(t.TempDir(), "stubborn.log")
	p, err := Start("the stubborn child", log, exec.CommandContext(t.Context(), "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`))
	g.Expect(err).NotTo(HaveOccurred())
	// SIGTERM is ignored only once the trap is set.
	g.Eventually(func() string { return Tail(log, 1<<10) }, time.Minute).Should(Equal("ready\n"))

	g.Expect(p.Stop(10 * time.Millisecond)).To(MatchError("the stubborn child did not stop within 10ms of SIGTERM: killed"))
	g.Expect(p.Exited()).To(BeTrue())
	g.Expect(p.Err()).To(MatchError("signal: killed"))
}

func TestKillWaitsUntilTheProcessHasExited(t *testing.T) {
	g := NewWithT(t)
	p, err := Start("sleep", filepath.Join(t.TempDir(), "sleep.log"), exec.CommandContext(t.Context(), "sleep", "600"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.PID()).To(BeNumerically(">", 0))

	g.Expect(p.Kill()).To(Succeed())
	g.Expect(p.Exited()).To(BeTrue())
	g.Expect(p.Err()).To(MatchError("signal: killed"))
}

func TestStartFailsForAMissingCommandOrLogDirectory(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	_, err := Start("the missing command", filepath.Join(dir, "missing.log"), exec.CommandContext(t.Context(), filepath.Join(dir, "no-such-command"))) //nolint:gosec // A path in the test's own directory.
	g.Expect(err).To(MatchError(ContainSubstring("starting the missing command: ")))

	_, err = Start("sleep", filepath.Join(dir, "no-such-directory", "sleep.log"), exec.CommandContext(t.Context(), "sleep", "600"))
	g.Expect(err).To(MatchError(os.ErrNotExist))
}

func TestTailOfAMissingLogSaysWhy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.log")
	if got := Tail(missing, 10); !strings.Contains(got, "no such file or directory") {
		t.Errorf("Tail(%s) = %q, want the read error", missing, got)
	}
}

// TestWorkDir: a given directory is created and kept; without one, a
// temporary directory is made and reported as such.
func TestWorkDir(t *testing.T) {
	given := filepath.Join(t.TempDir(), "logs", "component")
	dir, temporary, err := WorkDir(given, "component-")
	if err != nil || dir != given || temporary {
		t.Fatalf("WorkDir(%q) = %q, %v, %v; want the directory itself, not temporary", given, dir, temporary, err)
	}
	if st, err := os.Stat(given); err != nil || !st.IsDir() {
		t.Fatalf("the given directory was not created: %v", err)
	}
	dir, temporary, err = WorkDir("", "component-")
	if err != nil || !temporary || !strings.HasPrefix(filepath.Base(dir), "component-") {
		t.Fatalf(`WorkDir("") = %q, %v, %v; want a temporary component-* directory`, dir, temporary, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
}
