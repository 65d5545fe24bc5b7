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

// Package packaging tests what users install: the kustomize bases and
// availability components of both providers, the release manifests
// hack/release-manifests.sh writes, the cluster templates, the Tilt and
// Docker build descriptions, and a real clusterctl (built at the pinned
// Cluster API version) generating providers and clusters from a local
// repository and installing both providers into an envtest management
// cluster.
package packaging

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// provider describes one of the two providers as clusterctl sees it.
type provider struct {
	// name is the clusterctl provider name.
	name string
	// kind is the clusterctl provider type flag: bootstrap or infrastructure.
	kind string
	// label is the value of cluster.x-k8s.io/provider on every object.
	label string
	// components is the components file name in a release.
	components string
	// image is the manager image name (without tag) of the default
	// kustomization, which Tilt builds and releases replace.
	image string
	// dir is the provider's directory under config/.
	dir string
}

var providers = []provider{
	{
		name:       "kairos-kubeadm",
		kind:       "bootstrap",
		label:      "bootstrap-kairos-kubeadm",
		components: "bootstrap-components.yaml",
		image:      "ghcr.io/cozystack/kairos-bootstrap-controller",
		dir:        "bootstrap",
	},
	{
		name:       "kubevirt-workers",
		kind:       "infrastructure",
		label:      "infrastructure-kubevirt-workers",
		components: "infrastructure-components.yaml",
		image:      "ghcr.io/cozystack/kubevirt-workers-controller",
		dir:        "infrastructure",
	},
}

const providerLabel = "cluster.x-k8s.io/provider"

var repoRoot = envtest.RepoRoot()

// tool returns the path of a pinned tool that hack/tool.sh installs (and
// builds on first use); $<NAME>_BIN overrides it.
func tool(tb testing.TB, name string) string {
	tb.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if p, ok := tools[name]; ok {
		return p
	}
	p, err := envtest.HackTool(name)
	if err != nil {
		tb.Fatalf("installing %s: %v", name, err)
	}
	tools[name] = p
	return p
}

var (
	toolsMu sync.Mutex
	tools   = map[string]string{}
)

// command runs a program and returns its standard output; the error carries
// its standard error. env is added to the test's environment.
func command(env []string, dir, name string, args ...string) (string, error) {
	return commandIn(context.Background(), env, dir, name, args...)
}

// commandContext is command in the current directory, stopped when ctx is
// done.
func commandContext(ctx context.Context, env []string, name string, args ...string) (string, error) {
	return commandIn(ctx, env, "", name, args...)
}

func commandIn(ctx context.Context, env []string, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // The tests' own commands (go, bash, kustomize, clusterctl).
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// commandWithStderr runs a program and returns its standard output, writing
// its standard error to stderr.
func commandWithStderr(ctx context.Context, stderr io.Writer, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // The tests' own commands (go, bash, kustomize, clusterctl).
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	err := cmd.Run()
	return stdout.String(), err
}

// run is command for steps that must succeed.
func run(tb testing.TB, env []string, dir, name string, args ...string) string {
	tb.Helper()
	out, err := command(env, dir, name, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func decode(tb testing.TB, data []byte) []*unstructured.Unstructured {
	tb.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			tb.Fatalf("decoding YAML: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func readObjects(tb testing.TB, path string) []*unstructured.Unstructured {
	tb.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // A manifest in the repository or in a release the test built.
	if err != nil {
		tb.Fatal(err)
	}
	return decode(tb, data)
}

// releases caches hack/release-manifests.sh output per availability level:
// each test that needs a level renders it once.
var releases = struct {
	sync.Mutex
	dirs map[string]string
	base string
}{dirs: map[string]string{}}

// release runs hack/release-manifests.sh (make release-manifests) for an
// availability level ("" for the script's default) and returns its output
// folder. The folder lives until the test binary exits.
func release(tb testing.TB, level string) string {
	tb.Helper()
	releases.Lock()
	defer releases.Unlock()
	if dir, ok := releases.dirs[level]; ok {
		return dir
	}
	if releases.base == "" {
		base, err := os.MkdirTemp("", "packaging-release-")
		if err != nil {
			tb.Fatal(err)
		}
		releases.base = base
	}
	dir := filepath.Join(releases.base, cmp.Or(level, "default"))
	run(tb, []string{"RELEASE_DIR=" + dir, "AVAILABILITY=" + level, "KUSTOMIZE_BIN=" + tool(tb, "kustomize")},
		repoRoot, "bash", filepath.Join(repoRoot, "hack", "release-manifests.sh"))
	releases.dirs[level] = dir
	return dir
}

// TestMain removes the rendered releases after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if releases.base != "" {
		_ = os.RemoveAll(releases.base)
	}
	os.Exit(code)
}

// byKind returns the objects of a kind.
func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// clusterScoped are the cluster-scoped kinds the components contain.
var clusterScoped = map[string]bool{
	"Namespace":                        true,
	"CustomResourceDefinition":         true,
	"ClusterRole":                      true,
	"ClusterRoleBinding":               true,
	"ValidatingWebhookConfiguration":   true,
	"MutatingWebhookConfiguration":     true,
	"ValidatingAdmissionPolicy":        true,
	"ValidatingAdmissionPolicyBinding": true,
	"WorkerClass":                      true,
	"WorkerPlatform":                   true,
}

// namespacedByClusterctl are cluster-scoped kinds missing from clusterctl's
// list of cluster-scoped kinds: `clusterctl generate provider` sets the
// provider namespace on them.
var namespacedByClusterctl = map[string]bool{
	"ValidatingAdmissionPolicy":        true,
	"ValidatingAdmissionPolicyBinding": true,
}
