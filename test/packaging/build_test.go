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
	"cmp"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/cozystack/cluster-api-workers/test/envtest"
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

// localDeps returns the directories, relative to the module's root, of
// this module's packages that a main package imports.
func localDeps(t *testing.T, mainPkg string) []string {
	t.Helper()
	out := run(t, nil, repoRoot, "go", "list", "-deps", "-f", "{{.ImportPath}}", mainPkg)
	var dirs []string
	for _, pkg := range strings.Fields(out) {
		if rel, ok := strings.CutPrefix(pkg, modulePath+"/"); ok {
			dirs = append(dirs, rel)
		}
	}
	return dirs
}

// tiltfile is what Cluster API's Tiltfile (in the sigs.k8s.io/cluster-api
// module go.mod pins) does with a provider's context, go_main and
// live_reload_deps, read from its text: the test fails, naming the line it
// looked for, when a Cluster API upgrade changes how the Tiltfile uses
// them.
type tiltfile struct {
	// defaultGoMain is the go_main of a provider that sets none.
	defaultGoMain string
	// binary is where `go build` writes the manager, relative to the
	// directory it runs in, which is the provider's context.
	binary string
	// imageContext is the docker build context of the provider's image,
	// relative to its context.
	imageContext string
}

func readTiltfile(t *testing.T) tiltfile {
	t.Helper()
	capi, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(capi, "Tiltfile")) //nolint:gosec // Cluster API's Tiltfile in the module cache.
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	find := func(what, pattern string) []string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("Cluster API's Tiltfile no longer says how %s (looked for %s): read it again and update this test and tilt-provider.json", what, pattern)
		}
		return m
	}
	// A provider repository's context is relative to the repository.
	find("a provider's context is resolved", `provider_config\["context"\] = repo \+ "/" \+ provider_config\["context"\]`)
	// go build runs in the context, so go_main is relative to it.
	find("the build runs", `cmd = "cd \{context\};\{build_cmd\}"`)
	// Each live reload dependency is prefixed with the context.
	find("live_reload_deps are resolved", `live_reload_deps\.append\(context \+ "/" \+ d\)`)
	defaultGoMain := find("go_main defaults", `provider_config\["go_main"\] = "([^"]+)"`)[1]
	out := find("the binary is written", `-o (\S+)/\{binary_name\} \{go_main\}`)[1]
	name := find("the binary is named", `binary_name = "([^"]+)"`)[1]
	imageContext := find("the image is built", `docker_build\([^)]*?context = context \+ "/([^"]+)"`)[1]
	return tiltfile{defaultGoMain: defaultGoMain, binary: path.Join(out, name), imageContext: path.Clean(imageContext)}
}

// tiltMainPackage is the import path and package name of what Tilt builds
// for a provider: go_main, relative to its context.
func tiltMainPackage(t *testing.T, p tiltProvider, tf tiltfile) string {
	t.Helper()
	goMain := cmp.Or(p.Config.GoMain, tf.defaultGoMain)
	dir := filepath.Join(repoRoot, p.Config.Context)
	if strings.HasSuffix(goMain, ".go") {
		// A file: go build compiles that file alone, so it must be its
		// package's only file.
		files := run(t, nil, filepath.Join(dir, filepath.Dir(goMain)), "go", "list", "-f", `{{join .GoFiles " "}}`, ".")
		if strings.TrimSpace(files) != filepath.Base(goMain) {
			t.Fatalf("go_main %s is one file of a package of several (%s): go build would compile it alone", goMain, strings.TrimSpace(files))
		}
		goMain = filepath.Dir(goMain)
	}
	out := strings.Fields(run(t, nil, dir, "go", "list", "-f", "{{.Name}} {{.ImportPath}}", goMain))
	if len(out) != 2 || out[0] != "main" {
		t.Fatalf("go_main %s in %s is not a main package: %v", goMain, dir, out)
	}
	return out[1]
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// TestTiltProviders checks tilt-provider.json against Cluster API's
// Tiltfile and against what it describes: each provider builds its own
// main package to a binary and an image context of its own (two providers
// sharing them overwrite each other's manager), every directory the
// manager imports from triggers a rebuild but the build's own output does
// not, and the kustomization's manager runs exactly the image Tilt builds.
func TestTiltProviders(t *testing.T) {
	tilt := tiltProviders(t)
	tf := readTiltfile(t)
	NewWithT(t).Expect(tilt).To(HaveLen(len(providers)))
	binaries := map[string]string{}
	imageContexts := map[string]string{}
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tilt).To(HaveKey(p.name), "tilt-provider.json names the provider like clusterctl does")
			c := tilt[p.name].Config
			g.Expect(c.Label).NotTo(BeEmpty())
			g.Expect(c.Image).To(Equal(p.image))
			context := filepath.Join(repoRoot, c.Context)
			g.Expect(within(context, repoRoot)).To(BeTrue(), "the context is inside the repository")
			g.Expect(context).To(BeADirectory())

			g.Expect(tiltMainPackage(t, tilt[p.name], tf)).To(Equal(modulePath+"/"+p.dir), "Tilt builds the provider's main package")
			binary := filepath.Join(context, tf.binary)
			imageContext := filepath.Join(context, tf.imageContext)
			g.Expect(within(binary, imageContext)).To(BeTrue(), "the image is built from the folder the binary is written to")
			binaries[p.name], imageContexts[p.name] = binary, imageContext

			deps := make([]string, 0, len(c.LiveReloadDeps))
			for _, d := range c.LiveReloadDeps {
				dep := filepath.Join(context, d)
				g.Expect(dep).To(BeAnExistingFile(), "live_reload_deps %s exists", d)
				g.Expect(within(imageContext, dep)).To(BeFalse(), "live_reload_deps %s holds Tilt's own output, which would rebuild the manager forever", d)
				deps = append(deps, dep)
			}
			g.Expect(deps).To(ContainElements(filepath.Join(repoRoot, "go.mod"), filepath.Join(repoRoot, "go.sum")))
			// Every file the manager is compiled from (its module's Go and
			// embedded files).
			files := run(t, nil, repoRoot, "go", "list", "-deps", "-f",
				`{{if .Module}}{{if eq .Module.Path "`+modulePath+`"}}{{range .GoFiles}}{{$.Dir}}/{{.}} {{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}} {{end}}{{end}}{{end}}`, "./"+p.dir)
			for _, file := range strings.Fields(files) {
				g.Expect(slices.ContainsFunc(deps, func(dep string) bool { return within(file, dep) })).To(BeTrue(),
					"a change in %s, which the manager is built from, triggers a rebuild", file)
			}

			// Cluster API's tilt-prepare applies path.Join(context,
			// kustomize_folder) (it is in Cluster API's hack/tools module,
			// not in the module go.mod pins).
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
	t.Run("each provider builds apart", func(t *testing.T) {
		g := NewWithT(t)
		for a := range imageContexts {
			for b := range imageContexts {
				if a < b {
					g.Expect(binaries[a]).NotTo(Equal(binaries[b]), "%s and %s write one binary", a, b)
					g.Expect(within(imageContexts[a], imageContexts[b]) || within(imageContexts[b], imageContexts[a])).To(BeFalse(),
						"%s and %s build their images from one folder (%s, %s)", a, b, imageContexts[a], imageContexts[b])
				}
			}
		}
	})
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
			g.Expect(df).To(MatchRegexp(`go build .* \./%s\n`, regexp.QuoteMeta(p.dir)), "the package Tilt builds")
			g.Expect(tiltMainPackage(t, tilt[p.name], readTiltfile(t))).To(Equal(modulePath+"/"+p.dir), "Tilt builds the same package")

			var copied []string
			for _, m := range dockerCopy.FindAllStringSubmatch(df, -1) {
				copied = append(copied, strings.TrimSuffix(m[1], "/"))
			}
			deps := localDeps(t, "./"+p.dir)
			for _, dep := range deps {
				g.Expect(slices.ContainsFunc(copied, func(c string) bool { return within(dep, c) })).To(BeTrue(),
					"the manager imports %s, which no COPY holds", dep)
			}
			for _, c := range copied {
				g.Expect(slices.ContainsFunc(deps, func(dep string) bool { return within(dep, c) })).To(BeTrue(),
					"COPY %s/ holds no package the manager imports", c)
			}

			// Every package the manager imports builds without cgo, so the
			// binary needs no libc (go list reports a package that cannot).
			broken := run(t, []string{"CGO_ENABLED=0", "GOOS=linux"}, repoRoot, "go", "list", "-e", "-deps",
				"-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}", "./"+p.dir)
			g.Expect(strings.TrimSpace(broken)).To(BeEmpty(), "the manager builds as a static binary")
		})
	}
}
