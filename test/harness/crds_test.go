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

package harness

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestKubeadmCRDPathFollowsTheCacheOverride checks that the labelled
// kubeadm CRDs are written under KUBEVIRT_WORKERS_CACHE when it names a
// cache, not under the user cache.
func TestKubeadmCRDPathFollowsTheCacheOverride(t *testing.T) {
	g := NewWithT(t)
	cache := t.TempDir()
	userCache := t.TempDir()
	t.Setenv("KUBEVIRT_WORKERS_CACHE", cache)
	t.Setenv("XDG_CACHE_HOME", userCache)
	dir, err := KubeadmCRDPath()
	g.Expect(err).NotTo(HaveOccurred())
	rel, err := filepath.Rel(cache, dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.IsLocal(rel)).To(BeTrue(), "%s is in the overriding cache %s", dir, cache)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files).NotTo(BeEmpty(), "the CRDs are written there")
	g.Expect(filepath.Join(userCache, "kubevirt-workers")).NotTo(BeADirectory(), "nothing is written to the user cache")
}
