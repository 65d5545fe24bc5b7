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
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/capacity"
	infraadmission "github.com/cozystack/cluster-api-workers/infrastructure/webhooks/admission"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// docsTestMarker marks a block of the docs that a test runs or reads as
// written: the HTML comment on the line before its ```sh (or ```yaml)
// fence names it.
var docsTestMarker = regexp.MustCompile(`^(\s*)<!-- docs-test: (\S+) -->\s*$`)

// docBlock is a marked block of a Markdown file: its fence's language
// and its text.
type docBlock struct{ file, name, lang, script string }

// markedBlocks extracts the marked blocks of a Markdown file, in order,
// without the indentation of a list item.
func markedBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, file)) //nolint:gosec // A document of the repository.
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		m := docsTestMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, name := m[1], m[2]
		if i+1 >= len(lines) || (lines[i+1] != indent+"```sh" && lines[i+1] != indent+"```yaml") {
			t.Fatalf("%s:%d: the docs-test marker %s is not followed by a ```sh or ```yaml fence at its indentation", file, i+1, name)
		}
		lang := strings.TrimPrefix(lines[i+1], indent+"```")
		var script []string
		closed := false
		for i += 2; i < len(lines); i++ {
			if lines[i] == indent+"```" {
				closed = true
				break
			}
			script = append(script, strings.TrimPrefix(lines[i], indent))
		}
		if !closed {
			t.Fatalf("%s: the block %s is not closed", file, name)
		}
		blocks = append(blocks, docBlock{file: file, name: name, lang: lang, script: strings.Join(script, "\n")})
	}
	return blocks
}

// docRecipes are the marked blocks TestDocsRecipes runs, in this order;
// removing a marker fails the test.
var docRecipes = []struct{ file, name string }{
	{"docs/packaging.md", "release"},
	{"docs/packaging.md", "local-repository"},
	{"docs/packaging.md", "quick-start-cluster"},
	{"docs/packaging.md", "quick-start-pool"},
	{"docs/packaging.md", "hoster-class"},
	{"docs/packaging.md", "topology"},
	{"README.md", "readme-quick-start"},
	{"docs/infrastructure.md", "autoscaler-tenant-role"},
	{"docs/infrastructure.md", "gpu-pool-autoscaler-labels"},
}

// TestDocsRecipes runs the install and quick-start shell blocks of
// docs/packaging.md and the README as written, in one bash (set -euo
// pipefail), with the pinned clusterctl and kubectl first on PATH, a HOME
// of their own (the local repository and clusterctl.yaml go there) and a
// management apiserver with every CRD and our webhooks as kubectl's
// cluster: building a release into out/ (which it removes afterwards unless
// it was there before), laying out the local clusterctl repository, and
// generating and applying the default flavor, a Kairos pool, the hoster's
// WorkerClass and a topology cluster from that repository. A recipe that
// rots (a file it forgets to copy, a namespace it does not create) fails
// here. clusterctl init is not run (it needs Kamaji's provider from the
// network); TestClusterctl runs init against the same kind of apiserver.
func TestDocsRecipes(t *testing.T) {
	ctx := t.Context()
	g := NewWithT(t)
	// Two scripts: the install recipes, then, once clusterctl init has
	// installed the providers from the local repository the first wrote,
	// the quick start.
	var install, quickStart strings.Builder
	install.WriteString("set -euo pipefail\n")
	quickStart.WriteString("set -euo pipefail\n")
	script := &install
	found := map[string]docBlock{}
	for _, file := range []string{"docs/packaging.md", "README.md", "docs/infrastructure.md"} {
		for _, b := range markedBlocks(t, file) {
			if file == "docs/packaging.md" && (operatorBlocks[b.name] != "" || cozystackBlocks[b.name] != "") {
				continue // TestClusterAPIOperator and TestCozystackPackageWithOperator run them
			}
			found[file+"#"+b.name] = b
		}
	}
	for _, r := range docRecipes {
		b, ok := found[r.file+"#"+r.name]
		g.Expect(ok).To(BeTrue(), "%s has the shell block marked <!-- docs-test: %s -->", r.file, r.name)
		g.Expect(b.lang).To(Equal("sh"), "%s %s", r.file, r.name)
		fmt.Fprintf(script, "echo '### %s: %s' >&2\n%s\n", r.file, r.name, b.script)
		if r.name == "local-repository" {
			script = &quickStart
		}
	}
	g.Expect(found).To(HaveLen(len(docRecipes)), "every marked block runs")
	if t.Failed() {
		return
	}

	releaseDir := release(t, "pod")
	env := startManagementCluster(ctx, t, releaseDir)
	c, _ := warningClient(t, env)

	// The project's cache and Go's, found before HOME changes.
	cache, err := envtest.CacheDir()
	g.Expect(err).NotTo(HaveOccurred())
	goEnv := strings.Fields(run(t, nil, repoRoot, "go", "env", "GOCACHE", "GOMODCACHE", "GOPATH"))
	g.Expect(goEnv).To(HaveLen(3))

	bin := t.TempDir()
	for _, name := range []string{"clusterctl", "kubectl"} {
		g.Expect(os.Symlink(tool(t, name), filepath.Join(bin, name))).To(Succeed())
	}
	home := t.TempDir()
	// The recipes write out/v0.1.0 in the checkout: remove what was not
	// there before.
	for _, dir := range []string{filepath.Join(repoRoot, "out"), filepath.Join(repoRoot, "out", "v0.1.0")} {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			break
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	kubeconfig := writeKubeconfig(t, env.Config)
	environ := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=",
		"KUBECONFIG=" + kubeconfig,
		"CLUSTERCTL_DISABLE_VERSIONCHECK=true",
		envtest.CacheEnv + "=" + cache,
		"GOCACHE=" + goEnv[0], "GOMODCACHE=" + goEnv[1], "GOPATH=" + goEnv[2],
	}
	runScript := func(script string) {
		t.Helper()
		file := filepath.Join(t.TempDir(), "recipes.sh")
		g.Expect(os.WriteFile(file, []byte(script), 0o600)).To(Succeed())
		stdout, err := commandIn(runCtx, environ, repoRoot, "bash", file)
		g.Expect(err).NotTo(HaveOccurred(), "the docs' recipes, as written:\n%s\noutput:\n%s", script, stdout)
	}
	runScript(install.String())
	if t.Failed() {
		return
	}

	// What the docs' init does, without Kamaji's provider (not reachable
	// offline) and with Cluster API's core provider from its module, named
	// in a copy of the clusterctl.yaml the recipe wrote.
	written, err := os.ReadFile(filepath.Join(home, ".config", "cluster-api", "clusterctl.yaml")) //nolint:gosec // What the recipe wrote in the test's home.
	g.Expect(err).NotTo(HaveOccurred(), "the recipe writes clusterctl's configuration")
	capi, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	g.Expect(err).NotTo(HaveOccurred())
	coreDir := filepath.Join(t.TempDir(), "cluster-api", clusterAPIVersion)
	g.Expect(os.MkdirAll(coreDir, 0o750)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(coreDir, "core-components.yaml"), []byte(coreComponents(t, capi)), 0o600)).To(Succeed())
	metadata, err := os.ReadFile(filepath.Join(capi, "metadata.yaml")) //nolint:gosec // Cluster API's module.
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(coreDir, "metadata.yaml"), metadata, 0o600)).To(Succeed()) //nolint:gosec // Into the test's own directory.
	withCore := filepath.Join(t.TempDir(), "clusterctl.yaml")
	config := fmt.Appendf(written, "- name: cluster-api\n  type: CoreProvider\n  url: %s\n", fileURL(filepath.Join(coreDir, "core-components.yaml")))
	g.Expect(os.WriteFile(withCore, config, 0o600)).To(Succeed()) //nolint:gosec // Into the test's own directory.
	// init installs the providers' webhook configurations, which name
	// Services no manager backs here: put back the in-process ones.
	restore := keepWebhookConfigurations(ctx, t, c)
	_, err = commandIn(runCtx, environ, repoRoot, filepath.Join(bin, "clusterctl"), "init", "--config", withCore,
		"--core", "cluster-api:"+clusterAPIVersion, "--bootstrap", "kairos-kubeadm", "--infrastructure", "kubevirt-workers", "--control-plane", "-")
	g.Expect(err).NotTo(HaveOccurred(), "clusterctl init from the recipe's local repository")
	restore()

	runScript(quickStart.String())

	// What the recipes applied is there.
	for _, want := range []struct {
		gvk       schema.GroupVersionKind
		namespace string
		name      string
	}{
		{schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}, "tenant-demo", "demo"},
		{schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}, "tenant-demo", "demo-kairos"},
		{schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}, "tenant-demo", "demo-topology"},
		{schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterClass"}, "tenant-demo", "kairos-workers"},
		{schema.GroupVersionKind{Group: "cozystack.io", Version: "v1alpha1", Kind: "WorkerClass"}, "", "kairos-v1-35-6-r1"},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}, "tenant-demo", "kubevirt-workers-cluster-autoscaler-tenant-role"},
	} {
		o := &unstructured.Unstructured{}
		o.SetGroupVersionKind(want.gvk)
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: want.namespace, Name: want.name}, o)).To(Succeed(), "%s %s/%s", want.gvk.Kind, want.namespace, want.name)
	}
	// The GPU pool recipe's annotations are the ones cluster-autoscaler
	// v1.36.1 reads a template node's labels from
	// (cloudprovider/clusterapi/clusterapi_unstructured.go: Labels).
	md := &unstructured.Unstructured{}
	md.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"})
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "tenant-demo", Name: "demo-kairos"}, md)).To(Succeed())
	g.Expect(md.GetAnnotations()).To(HaveKeyWithValue("capacity.cluster-autoscaler.kubernetes.io/labels", capacity.GPULabel+"=GA102GL_A10"))
	g.Expect(md.GetAnnotations()).To(HaveKeyWithValue(clusterv1.AutoscalerMinSizeAnnotation, "0"))
}

// keepWebhookConfigurations records the apiserver's webhook configurations
// and returns a function that puts them back as they were, deleting any
// made since.
func keepWebhookConfigurations(ctx context.Context, t *testing.T, c client.Client) func() {
	t.Helper()
	g := NewWithT(t)
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	g.Expect(c.List(ctx, validating)).To(Succeed())
	g.Expect(c.List(ctx, mutating)).To(Succeed())
	return func() {
		t.Helper()
		keptValidating := map[string]admissionregistrationv1.ValidatingWebhookConfiguration{}
		for _, w := range validating.Items {
			keptValidating[w.Name] = w
		}
		keptMutating := map[string]admissionregistrationv1.MutatingWebhookConfiguration{}
		for _, w := range mutating.Items {
			keptMutating[w.Name] = w
		}
		now := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		g.Expect(c.List(ctx, now)).To(Succeed())
		for i := range now.Items {
			w := &now.Items[i]
			if kept, ok := keptValidating[w.Name]; ok {
				w.Webhooks = kept.Webhooks
				g.Expect(c.Update(ctx, w)).To(Succeed())
				continue
			}
			g.Expect(c.Delete(ctx, w)).To(Succeed())
		}
		nowMutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
		g.Expect(c.List(ctx, nowMutating)).To(Succeed())
		for i := range nowMutating.Items {
			w := &nowMutating.Items[i]
			if kept, ok := keptMutating[w.Name]; ok {
				w.Webhooks = kept.Webhooks
				g.Expect(c.Update(ctx, w)).To(Succeed())
				continue
			}
			g.Expect(c.Delete(ctx, w)).To(Succeed())
		}
	}
}

// TestUpgradeNotesLayout checks the layouts docs/upgrading.md shows for
// the worker class selection against the current API: the old one is
// refused, naming its field, and the new one is accepted by the API and
// our webhook, so the notes cannot drift from the types.
func TestUpgradeNotesLayout(t *testing.T) {
	g := NewWithT(t)
	blocks := map[string]docBlock{}
	for _, b := range markedBlocks(t, "docs/upgrading.md") {
		blocks[b.name] = b
	}
	g.Expect(blocks).To(HaveKey("old-layout"))
	g.Expect(blocks).To(HaveKey("new-layout"))
	typed := func(name string) (*infrav1.KubeVirtMachineTemplate, error) {
		objs := decode(t, []byte(blocks[name].script))
		g.Expect(objs).To(HaveLen(1), name)
		template := &infrav1.KubeVirtMachineTemplate{}
		return template, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objs[0].Object, template, true)
	}
	_, err := typed("old-layout")
	g.Expect(err).To(MatchError(ContainSubstring("workerClassName")), "the old layout has a field the API no longer has")
	template, err := typed("new-layout")
	g.Expect(err).NotTo(HaveOccurred(), "the new layout is the API's")
	g.Expect(template.Spec.Template.Spec.WorkerClass).NotTo(BeNil())
	webhook := &infraadmission.KubeVirtMachineTemplate{}
	g.Expect(webhook.Default(t.Context(), template)).To(Succeed())
	_, err = webhook.ValidateCreate(t.Context(), template)
	g.Expect(err).NotTo(HaveOccurred(), "our webhook accepts the new layout")
}

// TestLicense checks the LICENSE file the source headers name: the
// Apache License 2.0, the text Cluster API's module ships.
func TestLicense(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	g.Expect(err).NotTo(HaveOccurred(), "a LICENSE at the repository root")
	capi, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	g.Expect(err).NotTo(HaveOccurred())
	apache, err := os.ReadFile(filepath.Join(capi, "LICENSE")) //nolint:gosec // Cluster API's module.
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal(string(apache)), "the full Apache License 2.0")
	header, err := os.ReadFile(filepath.Join(repoRoot, "hack", "boilerplate.go.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(header)).To(ContainSubstring("Licensed under the Apache License, Version 2.0"), "the file headers name the same license")
}

// roleName is a role named in the docs: a backticked name ending in -role or
// metrics-reader.
var roleName = regexp.MustCompile("`([a-z0-9-]*(?:-role|metrics-reader))`")

// TestDocsNameRolesAsReleased checks that every role the docs name is a
// Role or ClusterRole of the release under that name, prefix included, so
// that a hoster binding it finds it.
func TestDocsNameRolesAsReleased(t *testing.T) {
	g := NewWithT(t)
	dir := release(t, "pod")
	released := map[string]bool{}
	for _, file := range []string{"bootstrap-components.yaml", "infrastructure-components.yaml", "infrastructure-cluster-role.yaml", "cluster-autoscaler-tenant-role.yaml"} {
		for _, o := range readObjects(t, filepath.Join(dir, file)) {
			if o.GetKind() == "Role" || o.GetKind() == "ClusterRole" {
				released[o.GetName()] = true
			}
		}
	}
	g.Expect(released).NotTo(BeEmpty())
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	g.Expect(err).NotTo(HaveOccurred())
	named := 0
	for _, doc := range append(docs, filepath.Join(repoRoot, "README.md")) {
		data, err := os.ReadFile(doc) //nolint:gosec // A document of the repository.
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range roleName.FindAllStringSubmatch(string(data), -1) {
			named++
			if !released[m[1]] {
				t.Errorf("%s names the role %s, which the release does not have (its roles: %v)", filepath.Base(doc), m[1], slices.Sorted(maps.Keys(released)))
			}
		}
	}
	g.Expect(named).To(BeNumerically(">", 0))
}

// TestReadmeAndFlavorTableNameEveryFlavor checks that the README's quick
// start and docs/packaging.md's flavor table name every flavor in
// templates/.
func TestReadmeAndFlavorTableNameEveryFlavor(t *testing.T) {
	g := NewWithT(t)
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	g.Expect(err).NotTo(HaveOccurred())
	packaging, err := os.ReadFile(filepath.Join(repoRoot, "docs", "packaging.md"))
	g.Expect(err).NotTo(HaveOccurred())
	for flavor := range templateFiles(t, filepath.Join(repoRoot, "templates")) {
		if flavor == "" {
			continue
		}
		g.Expect(string(readme)).To(ContainSubstring("`"+flavor+"`"), "the README names the %s flavor", flavor)
		g.Expect(string(packaging)).To(MatchRegexp("(?m)^\\| `"+regexp.QuoteMeta(flavor)+"` \\|"), "docs/packaging.md's flavor table has a row for %s", flavor)
	}
}
