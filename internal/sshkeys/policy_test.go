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

package sshkeys_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// The admission policies that keep anything but a public key line out of
// sshKeys: the pools' (with the WorkerClass API) and
// KairosConfig(Template)'s (the bootstrap provider's).
var (
	poolPolicyPath   = envtest.WorkerClassPrivateKeyPolicyPath
	kairosPolicyPath = "config/bootstrap/policy/private-keys.yaml"
)

// TestPrivateKeyPolicies feeds the shared corpus to both admission policies
// on a real kube-apiserver, as an sshKeys item of a pool, a KairosConfig
// and a KairosConfigTemplate, and holds each verdict, and the Go check's
// (PublicKeyProblem), to the corpus's one verdict. An UPDATE that leaves a
// stored value as it is (a finalizer's removal, another field) passes; one
// that brings a new private key does not. The policies' checks are one
// expression, PolicyExpression's (TestPolicyIsGenerated).
func TestPrivateKeyPolicies(t *testing.T) {
	SetDefaultEventuallyTimeout(time.Minute)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(refusedKeysExpression(t, poolPolicyPath)).To(Equal(sshkeys.PolicyExpression()), "the pools' policy")
	g.Expect(refusedKeysExpression(t, kairosPolicyPath)).To(Equal(sshkeys.PolicyExpression()), "the KairosConfig policy")

	scheme := envtest.DefaultScheme()
	g.Expect(bootstrapv1.AddToScheme(scheme)).To(Succeed())
	env, err := envtest.Start(ctx, envtest.Options{Scheme: scheme, CRDPaths: []string{envtest.PoolCRDPath}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	_, stored := sshkeystest.KeyPair()

	// Values stored before the policies exist, as by an earlier release
	// whose policy missed them.
	kinds := map[string]func(name string, keys []string) client.Object{
		"pool": func(name string, keys []string) client.Object {
			return envtest.NewPool(ns.Name, name, map[string]any{"cluster": "c", "sshKeys": toAny(keys)})
		},
		"KairosConfig": func(name string, keys []string) client.Object {
			return &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
				Spec: bootstrapv1.KairosConfigSpec{SSHKeys: keys}}
		},
		"KairosConfigTemplate": func(name string, keys []string) client.Object {
			return &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
				Spec: bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{
					Spec: bootstrapv1.KairosConfigSpec{SSHKeys: keys}}}}
		},
	}
	for kind, obj := range kinds {
		o := obj("stored", []string{stored})
		o.SetFinalizers([]string{"example.com/keep"})
		g.Expect(c.Create(ctx, o)).To(Succeed(), kind)
	}

	g.Expect(env.CreateManifests(ctx, []string{repoPath(poolPolicyPath), repoPath(kairosPolicyPath)})).To(Succeed())
	for kind, obj := range kinds {
		g.Eventually(func() error {
			return c.Create(ctx, obj("probe", []string{stored}), client.DryRunAll)
		}).Should(MatchError(ContainSubstring(sshkeys.PolicyMessage)), "the %s policy is in force", kind)
	}

	entries, err := sshkeystest.Corpus()
	g.Expect(err).NotTo(HaveOccurred())
	admitted := 0
	for _, e := range entries {
		goVerdict := sshkeystest.Admitted
		if sshkeys.PublicKeyProblem(e.Value) != "" {
			goVerdict = sshkeystest.Refused
		}
		g.Expect(goVerdict).To(Equal(e.Verdict), "%s: the Go check", e.Name)
		if e.Verdict == sshkeystest.Admitted {
			admitted++
		}
		for kind, obj := range kinds {
			err := c.Create(ctx, obj("corpus", []string{e.Value}), client.DryRunAll)
			verdict := sshkeystest.Admitted
			if err != nil {
				// The KairosConfig schema refuses an empty key itself.
				if !strings.Contains(err.Error(), "should be at least 1 chars long") {
					g.Expect(err.Error()).To(ContainSubstring("sshKeys: "+sshkeys.PolicyMessage), "%s as a %s", e.Name, kind)
				}
				verdict = sshkeystest.Refused
				for _, word := range strings.FieldsFunc(e.Value, func(r rune) bool { return r == ' ' || r == '\n' }) {
					if len(word) > 16 {
						g.Expect(err.Error()).NotTo(ContainSubstring(word), "%s as a %s: the refusal echoes the value", e.Name, kind)
					}
				}
			}
			g.Expect(verdict).To(Equal(e.Verdict), "%s as a %s: the policy", e.Name, kind)
		}
	}
	t.Logf("%d corpus entries, %d admitted: the Go check and both policies agree on each", len(entries), admitted)

	// A stored value is not checked again: the finalizer goes, another
	// field changes; a new private key beside or instead of it does not
	// pass.
	_, fresh := sshkeystest.KeyPair()
	for kind, obj := range kinds {
		o := obj("stored", nil)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed(), kind)
		replaced := o.DeepCopyObject().(client.Object)
		setKeys(t, replaced, []string{fresh})
		g.Expect(c.Update(ctx, replaced, client.DryRunAll)).To(MatchError(ContainSubstring(sshkeys.PolicyMessage)),
			"%s: a new private key is checked", kind)
		labelled := o.DeepCopyObject().(client.Object)
		labelled.SetLabels(map[string]string{"changed": "true"})
		g.Expect(c.Update(ctx, labelled)).To(Succeed(), "%s: a change that keeps the stored value", kind)
		labelled.SetFinalizers(nil)
		g.Expect(c.Update(ctx, labelled)).To(Succeed(), "%s: the finalizer's removal", kind)
	}
}

// refusedKeysExpression is the refusedKeys variable of the policy in path.
func refusedKeysExpression(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(repoPath(path))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := dec.Decode(policy); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	for _, v := range policy.Spec.Variables {
		if v.Name == "refusedKeys" {
			return v.Expression
		}
	}
	t.Fatalf("%s has no refusedKeys variable", path)
	return ""
}

func toAny(keys []string) []any {
	out := make([]any, 0, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	return out
}

// setKeys sets the sshKeys of a pool, KairosConfig or KairosConfigTemplate.
func setKeys(t *testing.T, o client.Object, keys []string) {
	t.Helper()
	switch o := o.(type) {
	case *unstructured.Unstructured:
		if err := unstructured.SetNestedSlice(o.Object, toAny(keys), "spec", "sshKeys"); err != nil {
			t.Fatal(err)
		}
	case *bootstrapv1.KairosConfig:
		o.Spec.SSHKeys = keys
	case *bootstrapv1.KairosConfigTemplate:
		o.Spec.Template.Spec.SSHKeys = keys
	default:
		t.Fatalf("no sshKeys in %T", o)
	}
}

func repoPath(path string) string { return filepath.Join(envtest.RepoRoot(), path) }
