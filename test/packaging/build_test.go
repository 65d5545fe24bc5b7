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
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
)

const modulePath = "github.com/cozystack/cluster-api-workers"

// releasedKustomization names, per provider directory, the kustomization
// hack/release-manifests.sh renders: the infrastructure release carries the
// WorkerClass API with its feature gate on.
var releasedKustomization = map[string]string{"bootstrap": "default", "infrastructure": "with-workerclass"}

// tiltProvider is one entry of tilt-provider.json, in the format Cluster
// API's Tiltfile reads.
type tiltProvider struct {
	Name   string `json:"name"`
	Config struct {
		Image           string   `json:"image"`
		Context         string   `json:"context"`
		GoMain          string   `json:"go_main"`
		LiveReloadDeps  []string `json:"live_reload_deps"`
		KustomizeFolder string   `json:"kustomize_folder"`
		Label           string   `json:"label"`
	} `json:"config"`
}

func tiltProviders(t *testing.T) map[string]tiltProvider {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "tilt-provider.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list []tiltProvider
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("tilt-provider.json: %v", err)
	}
	out := map[string]tiltProvider{}
	for _, p := range list {
		out[p.Name] = p
	}
	return out
}

// localDeps returns the top-level directories of this module's packages
// that a main package imports.
func localDeps(t *testing.T, mainPkg string) []string {
	t.Helper()
	out := run(t, nil, repoRoot, "go", "list", "-deps", "-f", "{{.ImportPath}}", mainPkg)
	var dirs []string
	for _, pkg := range strings.Fields(out) {
		rel, ok := strings.CutPrefix(pkg, modulePath+"/")
		if !ok {
			continue
		}
		top, _, _ := strings.Cut(rel, "/")
		if !slices.Contains(dirs, top) {
			dirs = append(dirs, top)
		}
	}
	return dirs
}

// TestTiltProviders checks tilt-provider.json against what it describes:
// both providers, the package it builds, the directories whose changes
// rebuild it, and a kustomization whose manager runs exactly the image Tilt
// builds.
func TestTiltProviders(t *testing.T) {
	tilt := tiltProviders(t)
	NewWithT(t).Expect(tilt).To(HaveLen(len(providers)))
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tilt).To(HaveKey(p.name), "tilt-provider.json names the provider like clusterctl does")
			c := tilt[p.name].Config
			g.Expect(c.Label).NotTo(BeEmpty())
			g.Expect(c.Image).To(Equal(p.image))
			context := filepath.Join(repoRoot, c.Context)
			g.Expect(filepath.Join(context, "go.mod")).To(BeAnExistingFile(), "the context is the module root")
			g.Expect(c.GoMain).To(Equal("./" + p.dir))

			deps := localDeps(t, c.GoMain)
			g.Expect(deps).To(ContainElement(p.dir))
			g.Expect(c.LiveReloadDeps).To(ContainElements(append(deps, "go.mod", "go.sum")),
				"every directory the manager imports from triggers a rebuild")

			out, stderr := buildKustomization(t, filepath.Join(context, c.KustomizeFolder))
			g.Expect(stderr).To(BeEmpty())
			objs := decode(t, []byte(out))
			dep := deployment(t, objs)
			g.Expect(imageName(dep.Spec.Template.Spec.Containers[0].Image)).To(Equal(c.Image), "Tilt replaces the image it builds")
			namespaces := byKind(objs, "Namespace")
			g.Expect(namespaces).To(HaveLen(1))
			g.Expect(namespaces[0].GetLabels()).To(HaveKeyWithValue(providerLabel, p.label), "Tilt reads the provider type from the Namespace")

			// The Tilt variant is what the release ships with a writable root
			// filesystem for live updates, nothing else.
			defaultOut, _ := buildKustomization(t, filepath.Join(repoRoot, "config", p.dir, releasedKustomization[p.dir]))
			want := decode(t, []byte(defaultOut))
			g.Expect(objs).To(HaveLen(len(want)))
			for i := range want {
				if want[i].GetKind() == "Deployment" {
					d := &appsv1.Deployment{}
					convert(t, want[i], d)
					d.Spec.Template.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = dep.Spec.Template.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem
					g.Expect(dep).To(Equal(d), "the Tilt manager differs only in its root filesystem")
					continue
				}
				g.Expect(objs[i].Object).To(Equal(want[i].Object), "%s %s is the default's", want[i].GetKind(), want[i].GetName())
			}
		})
	}
}

var (
	dockerFrom = regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)`)
	dockerCopy = regexp.MustCompile(`(?m)^COPY\s+(\S+/)\s+\S+$`)
	dockerUser = regexp.MustCompile(`(?m)^USER\s+(\d+)(?::(\d+))?\s*$`)
)

// TestDockerfiles checks each manager's Dockerfile: it copies every
// directory the manager imports from, builds the package Tilt builds
// without cgo (every imported package builds that way), and runs it on a
// minimal base as a numeric non-root user.
func TestDockerfiles(t *testing.T) {
	tilt := tiltProviders(t)
	for _, p := range providers {
		t.Run(p.dir, func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(filepath.Join(repoRoot, p.dir, "Dockerfile"))
			g.Expect(err).NotTo(HaveOccurred())
			df := string(data)

			froms := dockerFrom.FindAllStringSubmatch(df, -1)
			g.Expect(froms).To(HaveLen(2), "a build stage and a runtime stage")
			g.Expect(froms[len(froms)-1][1]).To(Equal("gcr.io/distroless/static:nonroot"), "a minimal base without a shell or libc")
			user := dockerUser.FindStringSubmatch(df)
			g.Expect(user).NotTo(BeNil(), "USER is numeric, so runAsNonRoot can verify it")
			g.Expect(user[1]).NotTo(Equal("0"))
			g.Expect(df).To(ContainSubstring(`ENTRYPOINT ["/manager"]`), "the command the Deployment runs")
			g.Expect(df).To(ContainSubstring("CGO_ENABLED=0"))
			g.Expect(df).To(MatchRegexp(`go build .* %s\n`, regexp.QuoteMeta(tilt[p.name].Config.GoMain)), "the package Tilt builds")

			var copied []string
			for _, m := range dockerCopy.FindAllStringSubmatch(df, -1) {
				copied = append(copied, strings.TrimSuffix(m[1], "/"))
			}
			g.Expect(copied).To(ConsistOf(localDeps(t, "./"+p.dir)), "the directories the manager imports from, no more")

			// Every package the manager imports builds without cgo, so the
			// binary needs no libc (go list reports a package that cannot).
			broken := run(t, []string{"CGO_ENABLED=0", "GOOS=linux"}, repoRoot, "go", "list", "-e", "-deps",
				"-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}", "./"+p.dir)
			g.Expect(strings.TrimSpace(broken)).To(BeEmpty(), "the manager builds as a static binary")
		})
	}
}
