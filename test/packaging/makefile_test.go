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
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestMakeSandboxSaysWhatItDoesBeforeCompiling runs `make sandbox` with a
// go that only records its call: the first run compiles for minutes before
// the sandbox prints anything, so make says what is happening before it
// calls go.
func TestMakeSandboxSaysWhatItDoesBeforeCompiling(t *testing.T) {
	g := NewWithT(t)
	bin := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\necho \"GO-CALLED $*\"\n"), 0o700)).To(Succeed()) //nolint:gosec // An executable stub in the test's own directory.
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-s", "sandbox", "SANDBOX_FLAGS=--once")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	g.Expect(lines).To(HaveLen(2), "a line of its own, then go: %s", out)
	g.Expect(lines[0]).To(ContainSubstring("compiling ./cmd/sandbox"), "the first line says what the wait is")
	g.Expect(lines[1]).To(Equal("GO-CALLED run ./cmd/sandbox --once"), "then the sandbox runs with SANDBOX_FLAGS")
}

// makeVariable is a variable set on a make command line of the docs, before
// or after the target.
var (
	variablesBeforeMake = regexp.MustCompile(`((?:\b[A-Z][A-Z0-9_]+=\S+\s+)+)make\s+[a-z][a-z-]*`)
	variablesAfterMake  = regexp.MustCompile(`\bmake\s+[a-z][a-z-]*((?:\s+[A-Z][A-Z0-9_]+=\S+)+)`)
	variableName        = regexp.MustCompile(`\b([A-Z][A-Z0-9_]+)=`)
)

// TestDocsSetOnlyVariablesTheBuildReads checks every `VAR=... make target`
// and `make target VAR=...` of the Markdown files: the Makefile, a hack
// script or a Go file reads the variable, so a doc naming a variable that
// nothing reads (SANDBOX_ARGS for SANDBOX_FLAGS) fails.
func TestDocsSetOnlyVariablesTheBuildReads(t *testing.T) {
	g := NewWithT(t)
	var sources strings.Builder
	var docs []string
	g.Expect(filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != repoRoot && (strings.HasPrefix(name, ".") || name == "out" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".md"):
			docs = append(docs, path)
		case d.Name() == "Makefile" || strings.HasSuffix(path, ".sh") || strings.HasSuffix(path, ".go"):
			data, err := os.ReadFile(path) //nolint:gosec // A file of the repository.
			if err != nil {
				return err
			}
			sources.Write(data)
		}
		return nil
	})).To(Succeed())
	read := sources.String()
	seen := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc) //nolint:gosec // A document of the repository.
		g.Expect(err).NotTo(HaveOccurred())
		// One line: shell continuations, list indentation and Markdown
		// line wraps apart.
		text := strings.Join(strings.Fields(strings.NewReplacer("\\\n", " ", "`", " ", "|", " ").Replace(string(data))), " ")
		var sets []string
		for _, m := range variablesBeforeMake.FindAllStringSubmatch(text, -1) {
			sets = append(sets, m[1])
		}
		for _, m := range variablesAfterMake.FindAllStringSubmatch(text, -1) {
			sets = append(sets, m[1])
		}
		for _, set := range sets {
			for _, v := range variableName.FindAllStringSubmatch(set, -1) {
				seen++
				name := v[1]
				reads := strings.Contains(read, "$("+name+")") || strings.Contains(read, "${"+name+"}") ||
					strings.Contains(read, "${"+name+":") || strings.Contains(read, `"`+name+`"`)
				g.Expect(reads).To(BeTrue(), "%s sets %s for make, which neither the Makefile, a script nor a Go file reads", filepath.Base(doc), name)
			}
		}
	}
	g.Expect(seen).To(BeNumerically(">", 3), "the docs' make variables are found")
}

// durationSubjects are the durations the docs state once
// (docs/testing.md, "Durations"): a sentence that names one of them may
// give only its figure (or a bound it runs under).
var durationSubjects = []struct {
	name    string
	subject *regexp.Regexp
	figures []string
}{
	// test-qemu, not test-qemu-kairos: another target, whose figures are
	// its own.
	{"make test-qemu", regexp.MustCompile(`test-qemu(?:$|[^-\w])`), []string{"14m39s", "45 minutes", "45m"}},
	{"CI", regexp.MustCompile(`\.ci/run|\bCI\b`), []string{"47m07s", "80-minute", "80 minutes", "30m41s", "61m22s", "2-3 minutes"}},
	{"the first build", regexp.MustCompile(`(?i)\bfirst build\b|\bfirst run builds\b|make tools-bins`), []string{"9 minutes"}},
}

var duration = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:\s*(?:to|-)\s*\d+(?:\.\d+)?)?[\s-]*(?:minutes?|min)\b|\b\d+m\d+s\b`)

// TestDurationsAreStatedOnce checks that the README, the docs, the Makefile
// and the sandbox give one figure for the first build, `make test-qemu`
// and CI, the one docs/testing.md's Durations table dates, so that they
// cannot be stated several different ways again.
func TestDurationsAreStatedOnce(t *testing.T) {
	g := NewWithT(t)
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	g.Expect(err).NotTo(HaveOccurred())
	sandbox, err := filepath.Glob(filepath.Join(repoRoot, "cmd", "sandbox", "*.go"))
	g.Expect(err).NotTo(HaveOccurred())
	files = append(append(files, filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "Makefile")), sandbox...)
	stated := map[string]bool{}
	for _, file := range files {
		data, err := os.ReadFile(file) //nolint:gosec // A file of the repository.
		g.Expect(err).NotTo(HaveOccurred())
		for _, sentence := range sentences(string(data)) {
			found := duration.FindAllString(sentence, -1)
			if len(found) == 0 {
				continue
			}
			var allowed []string
			for _, s := range durationSubjects {
				if s.subject.MatchString(sentence) {
					allowed = append(allowed, s.figures...)
					stated[s.name] = true
				}
			}
			if allowed == nil {
				continue
			}
			for _, d := range found {
				ok := false
				for _, a := range allowed {
					ok = ok || strings.Join(strings.Fields(d), " ") == a
				}
				if !ok {
					t.Errorf("%s gives %q in %q; the figure is docs/testing.md's (Durations)", filepath.Base(file), d, sentence)
				}
			}
		}
	}
	for _, s := range durationSubjects {
		g.Expect(stated).To(HaveKey(s.name), "the docs state how long %s takes", s.name)
	}
}

// sentences splits a text into what a figure belongs to: a table row, or a
// sentence of a paragraph or list item (its lines joined).
func sentences(text string) []string {
	var out []string
	for _, paragraph := range strings.Split(text, "\n\n") {
		var prose []string
		for _, line := range strings.Split(paragraph, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "|") {
				out = append(out, line)
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(line), "- ") {
				// A list item starts a sentence.
				out = append(out, strings.Split(strings.Join(prose, " "), ". ")...)
				prose = nil
			}
			prose = append(prose, strings.TrimSpace(line))
		}
		out = append(out, strings.Split(strings.Join(prose, " "), ". ")...)
	}
	return out
}
