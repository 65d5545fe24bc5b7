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

package envtest

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

var cacheRootLine = regexp.MustCompile(`(?m)^\s*CACHE_ROOT=.*$`)

// TestCacheDirIsTheScripts checks that CacheDir and every script's
// CACHE_ROOT name the same directory, with the override, with
// XDG_CACHE_HOME and with neither; that every script which mentions the
// user cache computes it that way; and that no Go file computes the cache
// directory other than through CacheDir.
func TestCacheDirIsTheScripts(t *testing.T) {
	g := NewWithT(t)
	root := RepoRoot()
	var scripts []string
	g.Expect(filepath.WalkDir(filepath.Join(root, "hack"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sh") {
			return err
		}
		data, err := os.ReadFile(path) //nolint:gosec // A script of the repository.
		if err != nil {
			return err
		}
		if strings.Contains(string(data), ".cache") || strings.Contains(string(data), CacheEnv) {
			lines := cacheRootLine.FindAllString(string(data), -1)
			g.Expect(lines).To(HaveLen(1), "%s computes its cache directory once, as CACHE_ROOT", path)
			scripts = append(scripts, path)
		}
		return nil
	})).To(Succeed())
	g.Expect(scripts).NotTo(BeEmpty())

	home := t.TempDir()
	for _, tc := range []struct{ name, override, xdg string }{
		{name: "override", override: filepath.Join(home, "elsewhere"), xdg: filepath.Join(home, "xdg")},
		{name: "XDG_CACHE_HOME", xdg: filepath.Join(home, "xdg")},
		{name: "HOME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			t.Setenv("HOME", home)
			t.Setenv(CacheEnv, tc.override)
			t.Setenv("XDG_CACHE_HOME", tc.xdg)
			want, err := CacheDir()
			g.Expect(err).NotTo(HaveOccurred())
			if tc.override != "" {
				g.Expect(want).To(Equal(tc.override))
			}
			for _, script := range scripts {
				data, err := os.ReadFile(script) //nolint:gosec // A script of the repository.
				g.Expect(err).NotTo(HaveOccurred())
				line := strings.TrimSpace(cacheRootLine.FindString(string(data)))
				out, err := exec.CommandContext(t.Context(), "bash", "-c", line+`; printf %s "${CACHE_ROOT}"`).Output() //nolint:gosec // A line of the repository's scripts.
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(out)).To(Equal(want), "%s: %s", filepath.Base(script), line)
			}
		})
	}

	// Go computes it in one place.
	g.Expect(filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "out" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "cache.go") || strings.HasSuffix(path, "cache_test.go") {
			return nil
		}
		data, err := os.ReadFile(path) //nolint:gosec // A file of the repository.
		if err != nil {
			return err
		}
		g.Expect(string(data)).NotTo(ContainSubstring("os.UserCacheDir("), "%s finds the cache with envtest.CacheDir, which follows %s", path, CacheEnv)
		return nil
	})).To(Succeed())
}
