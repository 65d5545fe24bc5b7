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

package cloudconfig

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// The real consumers of a rendering: kubeadm (built from k8s.io/kubernetes
// v1.36.3 by hack/tools-bins.sh) and yip (the stage runner of Kairos,
// built from github.com/mudler/yip).

func kubeadm(t *testing.T) string {
	t.Helper()
	bin, err := envtest.KubeadmBinary()
	if err != nil {
		t.Fatalf("kubeadm is needed to validate JoinConfigurations: %v", err)
	}
	return bin
}

func yip(t *testing.T) string {
	t.Helper()
	bin, err := envtest.YipBinary()
	if err != nil {
		t.Fatalf("yip is needed to parse the rendered cloud-config: %v", err)
	}
	return bin
}

// consumerCases are the golden cases plus every join timeout set.
func consumerCases() map[string]Input {
	cases := goldenCases()
	timeouts := goldenCases()["labels-and-taints"]
	timeouts.Timeouts = Timeouts{Discovery: 90e9, TLSBootstrap: 60e9, KubeletHealthCheck: 120e9, KubernetesAPICall: 30e9}
	cases["all-timeouts"] = timeouts
	return cases
}

// TestKubeadmValidatesRenderedJoinConfigurations runs `kubeadm config
// validate` on the JoinConfiguration each rendering carries, whichever
// join mode carries it.
func TestKubeadmValidatesRenderedJoinConfigurations(t *testing.T) {
	bin := kubeadm(t)
	for name, in := range consumerCases() {
		t.Run(name, func(t *testing.T) {
			out, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			p, err := parse(out)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := p.joinConfiguration()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "join.yaml")
			if err := os.WriteFile(path, doc, 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := exec.CommandContext(t.Context(), bin, "config", "validate", "--config", path).CombinedOutput() //nolint:gosec // kubeadm from the test cache, on the test's file.
			if err != nil {
				t.Fatalf("kubeadm config validate rejected the rendered JoinConfiguration: %v\n%s\n%s", err, res, doc)
			}
		})
	}
}

// TestKubeadmRejectsABrokenJoinConfiguration shows the validation has
// teeth: kubeadm fails a malformed token and, decoding strictly, any key
// that is not part of the v1beta4 schema.
func TestKubeadmRejectsABrokenJoinConfiguration(t *testing.T) {
	doc, err := JoinConfiguration(minimalInput())
	if err != nil {
		t.Fatal(err)
	}
	for name, broken := range map[string]string{
		"malformed token": strings.Replace(string(doc), testToken, "abc", 1),
		"unknown key":     strings.Replace(string(doc), `"token":`, `"injected": true, "token":`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if broken == string(doc) {
				t.Fatal("the mutation did not apply")
			}
			path := filepath.Join(t.TempDir(), "join.yaml")
			if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
				t.Fatal(err)
			}
			if res, err := exec.CommandContext(t.Context(), kubeadm(t), "config", "validate", "--config", path).CombinedOutput(); err == nil { //nolint:gosec // kubeadm from the test cache, on the test's file.
				t.Fatalf("kubeadm accepted it:\n%s\n%s", res, broken)
			}
		})
	}
}

var yipOp = regexp.MustCompile(`<([^>]*)>`)

// yipPlan runs `yip --analyze` for one stage and returns the names of the
// steps it would run from file, in order.
func yipPlan(t *testing.T, bin, file, stage string) []string {
	t.Helper()
	res, err := exec.CommandContext(t.Context(), bin, "--analyze", "--stage", stage, file).CombinedOutput() //nolint:gosec // yip from the test cache, on the test's file.
	if err != nil {
		t.Fatalf("yip --analyze -s %s: %v\n%s", stage, err, res)
	}
	var names []string
	for _, m := range yipOp.FindAllStringSubmatch(string(res), -1) {
		if name, ok := strings.CutPrefix(m[1], file+"."); ok {
			names = append(names, name)
		}
	}
	return names
}

// TestYipPlansTheRenderedStages has yip load each rendering and plan every
// stage: it must find exactly the rendered steps, in order. yip logs no
// error for a document it cannot read but plans nothing from it, so an
// unreadable rendering fails here.
func TestYipPlansTheRenderedStages(t *testing.T) {
	bin := yip(t)
	for name, in := range consumerCases() {
		t.Run(name, func(t *testing.T) {
			out, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "userdata.yaml")
			if err := os.WriteFile(file, out, 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := parse(out)
			if err != nil {
				t.Fatal(err)
			}
			want := p.stageNames()
			stages := make([]string, 0, len(want))
			for s := range want {
				stages = append(stages, s)
			}
			sort.Strings(stages)
			for _, stage := range stages {
				got := yipPlan(t, bin, file, stage)
				// yip's cloud-init converter adds its own unnamed steps
				// (numbered) for cloud-init keys; only named steps are ours.
				var named []string
				for _, n := range got {
					if !regexp.MustCompile(`^[0-9]+$`).MatchString(n) {
						named = append(named, n)
					}
				}
				if fmt.Sprint(named) != fmt.Sprint(want[stage]) {
					t.Errorf("yip plans %v for stage %s, want %v", named, stage, want[stage])
				}
			}
		})
	}
}

func TestYipPlansNothingFromBrokenYAML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(file, []byte("#cloud-config\nstages: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := yipPlan(t, yip(t), file, "network"); len(got) != 0 {
		t.Fatalf("yip planned %v from a broken document; the plan check would prove nothing", got)
	}
}

// TestYipWritesExtraFilesUnchanged runs the rendered extra-files step for
// real with yip, into a temporary directory, and compares what lands on
// disk with the input: template delimiters, binary data, modes.
func TestYipWritesExtraFilesUnchanged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("writing files owned by root with yip needs root (the test and CI machines run as root)")
	}
	dir := t.TempDir()
	in := minimalInput()
	in.Files = []File{
		{Path: filepath.Join(dir, "template.conf"), Permissions: 0o644, Content: []byte("url = \"{{ .Values.url }}\"\n{{{{ raw }}}}\n}} {{- trim -}}\n")},
		{Path: filepath.Join(dir, "secret", "token"), Permissions: 0o600, Content: []byte("s3cr3t-{{\n")},
		{Path: filepath.Join(dir, "blob.bin"), Permissions: 0o640, Content: []byte{0, 1, 2, 0xfe, 0xff, '{', '{', '\n'}},
		{Path: filepath.Join(dir, "tabs.tsv"), Content: []byte("\na\tb\n")},
		{Path: filepath.Join(dir, "empty")},
	}
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	// Run only the rendered files step, under a stage of its own, so yip
	// changes nothing but the temporary directory.
	var doc struct {
		Stages map[string][]yaml.Node `yaml:"stages"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	stages := doc.Stages
	if stages == nil {
		t.Fatal(err)
	}
	var step *yaml.Node
	for i := range stages["initramfs"] {
		var named struct{ Name string }
		if err := stages["initramfs"][i].Decode(&named); err != nil {
			t.Fatal(err)
		}
		if named.Name == StageWriteFiles {
			step = &stages["initramfs"][i]
		}
	}
	if step == nil {
		t.Fatalf("no %q step in:\n%s", StageWriteFiles, out)
	}
	only, err := yaml.Marshal(map[string]any{"stages": map[string][]*yaml.Node{"roundtrip": {step}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "files.yaml")
	if err := os.WriteFile(file, only, 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := exec.CommandContext(t.Context(), yip(t), "--stage", "roundtrip", file).CombinedOutput(); err != nil { //nolint:gosec // yip from the test cache, on the test's file.
		t.Fatalf("yip: %v\n%s", err, res)
	}
	for _, f := range in.Files {
		got, err := os.ReadFile(f.Path)
		if err != nil {
			t.Errorf("yip did not write %s: %v", f.Path, err)
			continue
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("%s = %q, want %q", f.Path, got, f.Content)
		}
		want := f.Permissions
		if want == 0 {
			want = defaultFilePermissions
		}
		info, err := os.Stat(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(info.Mode().Perm()) != want {
			t.Errorf("%s mode = %o, want %o", f.Path, info.Mode().Perm(), want)
		}
	}
}

// TestYipReadsTheClusterProviderBlockAsData checks that yip, which runs
// the stages, leaves the cluster block alone (it is the Kairos provider's
// input) and still plans the stages around it.
func TestYipReadsTheClusterProviderBlockAsData(t *testing.T) {
	in := goldenCases()["fixed-custom-image"]
	if in.Mode != bootstrapv1.JoinModeClusterProvider {
		t.Fatal("the fixed-custom-image case must use the cluster provider")
	}
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "userdata.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := yipPlan(t, yip(t), file, "network"); len(got) != 0 && fmt.Sprint(got) != "[0]" {
		t.Errorf("yip plans %v in the network stage of a cluster-provider rendering; the provider alone joins", got)
	}
}
