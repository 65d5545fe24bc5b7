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
package admission

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

var testClasses = map[string]*workerclassv1.WorkerClass{
	"deleting": {ObjectMeta: metav1.ObjectMeta{Name: "deleting", DeletionTimestamp: &metav1.Time{Time: time.Unix(1, 0)}, Finalizers: []string{workerclassv1.WorkerClassInUseFinalizer}},
		Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}},
	"talos":  {ObjectMeta: metav1.ObjectMeta{Name: "talos"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}},
	"kairos": {ObjectMeta: metav1.ObjectMeta{Name: "kairos"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}},
	"talos-example-r1": {ObjectMeta: metav1.ObjectMeta{Name: "talos-example-r1"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		Talos:     &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}},
	}},
	"talos-proxmox": {ObjectMeta: metav1.ObjectMeta{Name: "talos-proxmox"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		Proxmox:   &workerclassv1.ProxmoxTemplateSource{TemplateTags: []string{"talos", "v1.13.6"}},
	}},
	// A hoster's Talos baseline: its own factory, schematic and mirrors,
	// which Cozystack's schema defaults in a pool must not override.
	"talos-hoster-r1": {ObjectMeta: metav1.ObjectMeta{Name: "talos-hoster-r1"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		Talos: &workerclassv1.TalosBaseline{
			TalosScalars:    workerclassv1.TalosScalars{ImageFactoryURL: ptr("https://factory.hoster.example"), SchematicID: ptr(strings.Repeat("b", 64))},
			RegistryMirrors: map[string]workerclassv1.RegistryMirror{"docker.io": {Endpoints: []string{"https://mirror.hoster.example"}}},
		},
	}},
	"kairos-example-v1-35-6-r1": {ObjectMeta: metav1.ObjectMeta{Name: "kairos-example-v1-35-6-r1"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapKairos,
		Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6",
			Reference: "registry.example.com/workers/kairos-worker@sha256:" + strings.Repeat("1", 64)},
	}},
}

func ptr(s string) *string { return &s }

func testPlatform(defaultClass string) *workerclassv1.WorkerPlatformSpec {
	return &workerclassv1.WorkerPlatformSpec{
		DefaultClass:       defaultClass,
		KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.34", Patch: "v1.34.9"}, {Minor: "v1.35", Patch: "v1.35.6"}},
		TalosFactory:       workerclassv1.TalosFactoryDefaults{Version: "v1.13.6", SchematicID: strings.Repeat("a", 64)},
		KairosImages:       []workerclassv1.KairosImage{{Minor: "v1.35", Reference: "ghcr.io/cozystack/kairos@sha256:" + strings.Repeat("2", 64)}},
	}
}

// lookups counts the getter calls of one request.
type lookups struct {
	classes  []string
	platform int
	fail     error
	noPlat   bool
	defClass string
}

func (l *lookups) class(name string) (*workerclassv1.WorkerClass, error) {
	l.classes = append(l.classes, name)
	if l.fail != nil {
		return nil, l.fail
	}
	if c, ok := testClasses[name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, fmt.Errorf("workerclass %q: %w", name, ErrNotFound)
}

func (l *lookups) getPlatform() (*workerclassv1.WorkerPlatformSpec, error) {
	l.platform++
	if l.fail != nil {
		return nil, l.fail
	}
	if l.noPlat {
		return nil, ErrNotFound
	}
	def := l.defClass
	if def == "" {
		def = "talos"
	}
	return testPlatform(def), nil
}

func pool(class string, settings workerclassv1.PoolSettings) *Pool {
	return &Pool{ClassName: class, Settings: settings}
}

var v135 = workerclassv1.PoolSettings{Version: "v1.35"}

// The seed's table "KubernetesNodes application API", row by row.
func TestPoolAPITable(t *testing.T) {
	cases := []struct {
		name         string
		op           Operation
		old, new     *Pool
		lookups      lookups
		wantClass    string
		wantDefault  bool
		wantRestored bool
		wantErr      string
		// wantNoLookup asserts that no class or platform was read.
		wantNoLookup bool
	}{
		{name: "CREATE with class omitted writes the current platform default", op: Create,
			new: pool("", v135), wantClass: "talos", wantDefault: true},
		{name: "CREATE with class omitted writes a changed platform default", op: Create,
			new: pool("", v135), lookups: lookups{defClass: "kairos"}, wantClass: "kairos", wantDefault: true},
		{name: "CREATE with class omitted validates the written default", op: Create,
			new:     pool("", workerclassv1.PoolSettings{Version: "v1.35", SSHKeys: []string{"ssh-ed25519 x"}}),
			wantErr: "spec.sshKeys: Forbidden: Talos has no SSH server"},
		{name: "CREATE with class omitted and no platform configuration is refused", op: Create,
			new: pool("", v135), lookups: lookups{noPlat: true}, wantErr: "spec.workerClassName: Required value"},
		{name: "CREATE with a default naming a missing class is refused", op: Create,
			new: pool("", v135), lookups: lookups{defClass: "gone"}, wantErr: `spec.workerClassName: Not found: "gone"`},
		{name: "CREATE with an explicit class preserves it", op: Create,
			new: pool("kairos-example-v1-35-6-r1", v135), wantClass: "kairos-example-v1-35-6-r1"},
		{name: "CREATE with an explicit class validates it", op: Create,
			new: pool("kairos-example-v1-35-6-r1", workerclassv1.PoolSettings{Version: "v1.34"}), wantErr: "the pool must select minor v1.35"},
		{name: "CREATE with a missing class is refused", op: Create,
			new: pool("nope", v135), wantErr: `spec.workerClassName: Not found: "nope"`},
		{name: "UPDATE of a classless pool with class omitted stays legacy without lookups", op: Update,
			old: pool("", workerclassv1.PoolSettings{}), new: pool("", workerclassv1.PoolSettings{Version: "v1.35", SSHKeys: []string{"anything"}}),
			wantClass: "", wantNoLookup: true},
		{name: "UPDATE of a classless pool is legacy even when lookups fail", op: Update,
			old: pool("", workerclassv1.PoolSettings{}), new: pool("", workerclassv1.PoolSettings{}), lookups: lookups{fail: errors.New("apiserver down")},
			wantClass: "", wantNoLookup: true},
		{name: "UPDATE of a classified pool with class omitted restores the stored class", op: Update,
			old: pool("kairos", v135), new: pool("", v135), wantClass: "kairos", wantRestored: true},
		{name: "UPDATE of a classified pool restores the class on a full replace with new settings", op: Update,
			old: pool("talos-example-r1", v135), new: pool("", workerclassv1.PoolSettings{Version: "v1.34"}),
			wantClass: "talos-example-r1", wantRestored: true},
		{name: "UPDATE of a classified pool: empty is not a request to become legacy, the restored class is validated", op: Update,
			old: pool("kairos", v135), new: pool("", workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("v1.13.5")}}),
			wantErr: "spec.talos: Forbidden"},
		{name: "UPDATE selecting another class of the same family passes the checks", op: Update,
			old: pool("talos", v135), new: pool("talos-example-r1", v135), wantClass: "talos-example-r1"},
		{name: "UPDATE selecting another class fails the image/override checks", op: Update,
			old: pool("kairos", workerclassv1.PoolSettings{Version: "v1.34"}), new: pool("kairos-example-v1-35-6-r1", workerclassv1.PoolSettings{Version: "v1.34"}),
			wantErr: "the pool must select minor v1.35"},
		{name: "UPDATE switching Talos to Kairos in place is refused", op: Update,
			old: pool("talos", v135), new: pool("kairos", v135), wantErr: "switching a running pool from class talos (bootstrap family talos) to class kairos (bootstrap family kairos) in place is refused"},
		{name: "UPDATE switching Kairos to Talos in place is refused", op: Update,
			old: pool("kairos", v135), new: pool("talos", v135), wantErr: "switching a running pool from class kairos (bootstrap family kairos) to class talos (bootstrap family talos) in place is refused"},
		{name: "UPDATE moving a legacy (Talos) pool to a Kairos class is refused", op: Update,
			old: pool("", v135), new: pool("kairos", v135), wantErr: "from no class (bootstrap family talos) to class kairos (bootstrap family kairos)"},
		{name: "UPDATE moving a legacy pool to a Talos class passes the checks", op: Update,
			old: pool("", v135), new: pool("talos-example-r1", v135), wantClass: "talos-example-r1"},
		{name: "UPDATE of a classified pool with unchanged settings does not resolve", op: Update,
			old: pool("kairos", workerclassv1.PoolSettings{Version: "v1.33"}), new: pool("kairos", workerclassv1.PoolSettings{Version: "v1.33"}),
			wantClass: "kairos", wantNoLookup: true},
		{name: "UPDATE with changed overrides is validated", op: Update,
			old: pool("kairos", v135), new: pool("kairos", workerclassv1.PoolSettings{Version: "v1.35", KernelModules: []workerclassv1.KernelModule{{Name: "x"}}}),
			wantErr: "spec.kernelModules: Forbidden"},
		{name: "CREATE selecting a class being deleted is refused", op: Create,
			new: pool("deleting", v135), wantErr: "class deleting is being deleted"},
		{name: "UPDATE switching to a class being deleted is refused", op: Update,
			old: pool("talos", v135), new: pool("deleting", v135), wantErr: "class deleting is being deleted"},
		{name: "UPDATE keeping a class being deleted is allowed", op: Update,
			old: pool("deleting", v135), new: pool("", workerclassv1.PoolSettings{Version: "v1.34"}), wantClass: "deleting", wantRestored: true},
		{name: "a lookup failure is an internal error, not a denial of the pool", op: Create,
			new: pool("talos", v135), lookups: lookups{fail: errors.New("connection refused")}, wantErr: "Internal error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.lookups
			d, errs := Admit(Request{Operation: tc.op, Old: tc.old, New: *tc.new, Classes: l.class, Platform: l.getPlatform})
			if tc.wantNoLookup && (len(l.classes) > 0 || l.platform > 0) {
				t.Errorf("looked up classes %v and the platform %d times", l.classes, l.platform)
			}
			if tc.wantErr != "" {
				if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
					t.Fatalf("errors %v, want %q", errs.ToAggregate(), tc.wantErr)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("unexpected: %v", errs.ToAggregate())
			}
			if d.ClassName != tc.wantClass || d.Defaulted != tc.wantDefault || d.Restored != tc.wantRestored {
				t.Errorf("decision %+v, want class %q defaulted %v restored %v", d, tc.wantClass, tc.wantDefault, tc.wantRestored)
			}
			if d.Legacy() != (tc.wantClass == "") {
				t.Errorf("legacy = %v", d.Legacy())
			}
		})
	}
}

// The pool's sshKeys rules, through admission with the class's family.
func TestPoolSSHKeys(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	sshPub, _ := ssh.NewPublicKey(pub)
	public := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	private := string(pem.EncodeToMemory(block))
	cases := []struct {
		name, class string
		keys        []string
		want        string
	}{
		{"Kairos: zero keys", "kairos", []string{}, ""},
		{"Kairos: one valid public key", "kairos", []string{public}, ""},
		{"Kairos: more than one key is rejected", "kairos", []string{public, public}, "Too many"},
		{"Talos: an empty list is allowed", "talos", []string{}, ""},
		{"Talos: a nonempty list is rejected", "talos", []string{public}, "Talos has no SSH server"},
		{"a private key is rejected without echoing it", "kairos", []string{private}, "looks like a private key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l lookups
			_, errs := Admit(Request{Operation: Create, New: Pool{ClassName: tc.class, Settings: workerclassv1.PoolSettings{Version: "v1.35", SSHKeys: tc.keys}},
				Classes: l.class, Platform: l.getPlatform})
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected: %v", errs.ToAggregate())
				}
				return
			}
			msg := errs.ToAggregate().Error()
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("%q lacks %q", msg, tc.want)
			}
			if strings.Contains(msg, "BEGIN") || strings.Contains(msg, "AAAA") {
				t.Fatalf("the message echoes key material: %s", msg)
			}
		})
	}
}

func TestPoolFromObject(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{
		"cluster": "example", ClassNameField: "kairos", "version": "v1.35", "minReplicas": int64(2),
		"sshKeys": []any{}, "registryMirrors": map[string]any{}, "kernelModules": []any{map[string]any{"name": "nvme_tcp"}},
		"talos": map[string]any{"version": ""},
	}}
	p, errs := PoolFromObject(obj)
	if len(errs) > 0 || len(p.shape) > 0 {
		t.Fatal(errs.ToAggregate(), p.shape)
	}
	s := p.Settings
	if p.ClassName != "kairos" || s.Version != "v1.35" || s.SSHKeys == nil || len(s.SSHKeys) != 0 ||
		s.RegistryMirrors == nil || len(s.RegistryMirrors) != 0 || len(s.KernelModules) != 1 ||
		s.Talos == nil || s.Talos.Version == nil || *s.Talos.Version != "" || s.OSImage != nil {
		t.Errorf("presence lost: %+v", p)
	}
	if p, errs := PoolFromObject(map[string]any{"spec": map[string]any{"cluster": "x"}}); len(errs) > 0 || p.ClassName != "" || p.Settings.SSHKeys != nil {
		t.Errorf("absent fields must stay nil: %+v %v", p, errs)
	}
	for name, bad := range map[string]map[string]any{
		"non-string class": {"spec": map[string]any{ClassNameField: int64(3)}},
		"non-object spec":  {"spec": "x"},
	} {
		if _, errs := PoolFromObject(bad); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
	// A settings field of the wrong type is recorded, not fatal: a legacy
	// pool is not ours to judge, and Admit refuses it where it validates.
	p, errs = PoolFromObject(map[string]any{"spec": map[string]any{"sshKeys": "ssh-ed25519 AAAA", "version": "v1.35"}})
	if len(errs) > 0 || p.Settings.SSHKeys != nil || p.Settings.Version != "v1.35" {
		t.Errorf("wrong type: %+v %v", p, errs)
	}
	if got := p.shapeErrors(nil).ToAggregate(); got == nil || got.Error() != "spec.sshKeys: Invalid value: must be a list, not a string" {
		t.Errorf("wrong type recorded as %v", got)
	}
}
