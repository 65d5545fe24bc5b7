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

package inlinekubeconfig_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/internal/inlinekubeconfig"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// Verdicts in the corpus.
const (
	refused  = "Refused"
	admitted = "Admitted"
)

// policyPath is the admission policy that refuses kubeconfig Secrets
// naming a file, a command or a plugin.
const policyPath = "config/bootstrap/policy/kubeconfig-secrets.yaml"

// entry is one kubeconfig Secret value of testdata/corpus.yaml.
type entry struct {
	Name        string `json:"name"`
	Check       string `json:"check"`
	Policy      string `json:"policy"`
	Value       string `json:"value"`
	ValueBase64 string `json:"valueBase64"`
}

func (e entry) data(tb testing.TB) []byte {
	tb.Helper()
	if e.ValueBase64 == "" {
		return []byte(e.Value)
	}
	data, err := base64.StdEncoding.DecodeString(e.ValueBase64)
	if err != nil {
		tb.Fatalf("%s: valueBase64: %v", e.Name, err)
	}
	return data
}

func corpus(tb testing.TB) []entry {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var entries []entry
	if err := yaml.UnmarshalStrict(raw, &entries); err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		for _, v := range []string{e.Check, e.Policy} {
			if v != refused && v != admitted {
				tb.Fatalf("%s: verdict %q is neither %s nor %s", e.Name, v, refused, admitted)
			}
		}
	}
	return entries
}

// namesAField says whether client-go would parse data as a kubeconfig and
// act on a field Check refuses: what the policy must refuse too.
func namesAField(data []byte) bool {
	if len(data) > inlinekubeconfig.MaxSize {
		return true
	}
	if _, err := clientcmd.Load(data); err != nil {
		return false
	}
	return inlinekubeconfig.Check(data) != nil
}

func TestCheckOnTheCorpus(t *testing.T) {
	for _, e := range corpus(t) {
		t.Run(e.Name, func(t *testing.T) {
			g := NewWithT(t)
			err := inlinekubeconfig.Check(e.data(t))
			if e.Check == admitted {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			for _, line := range strings.Split(string(e.data(t)), "\n") {
				if _, value, ok := strings.Cut(line, ": "); ok && len(value) > 8 {
					g.Expect(err.Error()).NotTo(ContainSubstring(value), "the error carries a value")
				}
			}
			if namesAField(e.data(t)) {
				g.Expect(e.Policy).To(Equal(refused), "whatever Check refuses for a field, the policy refuses")
			}
		})
	}
}

func TestCheckNamesEachFieldAtFault(t *testing.T) {
	g := NewWithT(t)
	err := inlinekubeconfig.Check([]byte(`
clusters:
- name: b
  cluster: {server: "https://b", certificate-authority: /ca}
- name: a
  cluster: {server: "https://a", certificate-authority-data: Q0E=}
users:
- name: u
  user:
    client-certificate: /c
    client-key: /k
    tokenFile: /t
    exec: {command: /bin/true, apiVersion: client.authentication.k8s.io/v1}
    auth-provider: {name: oidc}
`))
	g.Expect(err).To(HaveOccurred())
	msg := err.Error()
	for _, path := range []string{
		"clusters[b].cluster.certificate-authority", "users[u].user.client-certificate", "users[u].user.client-key",
		"users[u].user.tokenFile", "users[u].user.exec", "users[u].user.auth-provider",
	} {
		g.Expect(msg).To(ContainSubstring(path + ": Forbidden"))
	}
	g.Expect(msg).NotTo(ContainSubstring("clusters[a]"))
	g.Expect(msg).NotTo(ContainSubstring("/bin/true"))

	g.Expect(inlinekubeconfig.Check(nil)).To(Succeed(), "an empty kubeconfig names nothing (and connects nowhere)")
	g.Expect(inlinekubeconfig.Check([]byte("users: ["))).To(MatchError(ContainSubstring("value: Invalid value")))
	tooLong := inlinekubeconfig.Check([]byte(strings.Repeat("#", inlinekubeconfig.MaxSize+1)))
	g.Expect(tooLong).To(MatchError(ContainSubstring("value: Too long")))
}

func TestSecretReaderRefusesAndEmptiesAKubeconfigNamingAFile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	bad := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "demo-kubeconfig"},
		Data:       map[string][]byte{"value": []byte("users: [{name: u, user: {tokenFile: /t}}]")},
	}
	good := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "ok-kubeconfig"},
		Data:       map[string][]byte{"value": []byte("users: [{name: u, user: {token: t}}]")},
	}
	r := inlinekubeconfig.SecretReader{Reader: fake.NewClientBuilder().WithObjects(bad, good).Build()}

	got := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKeyFromObject(bad), got)
	g.Expect(errors.Is(err, inlinekubeconfig.ErrRefused)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("Secret tenant/demo-kubeconfig: users[u].user.tokenFile: Forbidden")))
	g.Expect(got.Data).To(BeNil(), "nothing of a refused Secret is returned")

	g.Expect(r.Get(ctx, client.ObjectKeyFromObject(good), got)).To(Succeed())
	g.Expect(got.Data).To(HaveKey("value"))

	// A kubeconfig the cache dropped for its size is refused as too long,
	// not as an empty kubeconfig.
	dropped, err := watchview.CachedSecret(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "huge-kubeconfig"},
		Data:       map[string][]byte{"value": make([]byte, inlinekubeconfig.MaxSize+1)},
	}, func(*corev1.Secret) []watchview.KeptKey {
		return []watchview.KeptKey{{Name: "value", MaxSize: inlinekubeconfig.MaxSize}}
	})
	g.Expect(err).NotTo(HaveOccurred())
	r = inlinekubeconfig.SecretReader{Reader: fake.NewClientBuilder().WithObjects(dropped.(*corev1.Secret)).Build()}
	err = r.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "huge-kubeconfig"}, got)
	g.Expect(errors.Is(err, inlinekubeconfig.ErrRefused)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("Secret tenant/huge-kubeconfig: value: Too long: may not be more than 65536 bytes")))

	g.Expect(r.List(ctx, &corev1.SecretList{})).To(HaveOccurred(), "a list would bypass the check")
	g.Expect(r.Get(ctx, client.ObjectKeyFromObject(good), &corev1.ConfigMap{})).To(HaveOccurred())
}

// policyChecks is the admission policy's checks in Go: its size limit and
// the RE2 expressions its validations match against the base64 text of
// the value (CEL's matches is RE2, as Go's regexp is), so that the fuzz
// target can hold the policy against Check without an apiserver.
// TestKubeconfigSecretPolicy holds the corpus against the policy itself.
type policyChecks struct {
	maxSize  int
	patterns []*regexp.Regexp
}

func (p policyChecks) refuses(data []byte) bool {
	if len(data) > p.maxSize {
		return true
	}
	text := base64.StdEncoding.EncodeToString(data)
	for _, re := range p.patterns {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

var rawPattern = regexp.MustCompile(`^!variables\.value\.matches\(r'([^']*)'\)$`)

func readPolicy(tb testing.TB) (*admissionregistrationv1.ValidatingAdmissionPolicy, policyChecks) {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), policyPath))
	if err != nil {
		tb.Fatal(err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096).Decode(policy); err != nil {
		tb.Fatal(err)
	}
	checks := policyChecks{}
	for _, v := range policy.Spec.Variables {
		if v.Name == "withinSize" {
			if _, err := fmt.Sscanf(v.Expression[strings.LastIndex(v.Expression, "<="):], "<= %d", &checks.maxSize); err != nil {
				tb.Fatalf("withinSize: %v", err)
			}
		}
	}
	for _, v := range policy.Spec.Validations {
		if m := rawPattern.FindStringSubmatch(strings.TrimSpace(v.Expression)); m != nil {
			checks.patterns = append(checks.patterns, regexp.MustCompile(m[1]))
		}
	}
	return policy, checks
}

// TestPolicyIsGenerated: the policy checks the size Check allows, and its
// other validations are PolicyRules, in order.
func TestPolicyIsGenerated(t *testing.T) {
	g := NewWithT(t)
	policy, checks := readPolicy(t)
	g.Expect(checks.maxSize).To(Equal(inlinekubeconfig.MaxSize))
	validations := policy.Spec.Validations
	g.Expect(validations).NotTo(BeEmpty())
	g.Expect(validations[0].Expression).To(Equal("variables.withinSize"))
	rules := inlinekubeconfig.PolicyRules()
	g.Expect(validations[1:]).To(HaveLen(len(rules)))
	for i, r := range rules {
		v := validations[i+1]
		g.Expect(strings.TrimSpace(v.Expression)).To(Equal(r.Expression()), "validation %d; the rule's expression is:\n%s", i+1, r.Expression())
		g.Expect(v.Message).To(Equal(r.Message))
		g.Expect(string(*v.Reason)).To(Equal(r.Reason))
	}
}

// TestPolicyRulesMatchExactlyWhatTheyLookFor: a rule's expression matches
// the base64 text of a value exactly when the value contains one of the
// rule's byte patterns, at every offset and around any bytes.
func TestPolicyRulesMatchExactlyWhatTheyLookFor(t *testing.T) {
	for _, r := range inlinekubeconfig.PolicyRules() {
		re := regexp.MustCompile(r.Regexp())
		for _, p := range r.Patterns {
			for _, filler := range []string{"", "a", "ab", "abc", "abcd", "\n\n\n\n\n"} {
				for _, b := range concreteBytes(p) {
					for _, suffix := range []string{"", "x", "xy", "xyz"} {
						data := filler + b + suffix
						if !re.MatchString(base64.StdEncoding.EncodeToString([]byte(data))) {
							t.Errorf("%s: %q is not matched", r.Message, data)
						}
					}
				}
			}
		}
	}
}

// concreteBytes are a few strings matching p: each position's lowest and
// highest byte.
func concreteBytes(p []inlinekubeconfig.ByteSet) []string {
	var low, high []byte
	for _, set := range p {
		first, last := -1, -1
		for b := range 256 {
			if set[b] {
				if first < 0 {
					first = b
				}
				last = b
			}
		}
		low, high = append(low, byte(first)), append(high, byte(last))
	}
	return []string{string(low), string(high)}
}

// FuzzPolicyRulesAreExact: for any value, a rule's expression matches its
// base64 text exactly when the value contains one of the rule's patterns.
func FuzzPolicyRulesAreExact(f *testing.F) {
	for _, e := range corpus(f) {
		f.Add(e.data(f))
	}
	rules := inlinekubeconfig.PolicyRules()
	res := make([]*regexp.Regexp, len(rules))
	for i, r := range rules {
		res[i] = regexp.MustCompile(r.Regexp())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		text := base64.StdEncoding.EncodeToString(data)
		for i, r := range rules {
			if got, want := res[i].MatchString(text), containsAny(data, r.Patterns); got != want {
				t.Errorf("%s: matches %v, contains %v: %q", r.Message, got, want, data)
			}
		}
	})
}

func containsAny(data []byte, patterns [][]inlinekubeconfig.ByteSet) bool {
	for _, p := range patterns {
		for start := 0; start+len(p) <= len(data); start++ {
			match := true
			for i, set := range p {
				if !set[data[start+i]] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}

// TestPolicyChecksOnTheCorpus: the policy's checks, in Go, decide each
// corpus entry as the corpus says (the apiserver's decisions are
// TestKubeconfigSecretPolicy's).
func TestPolicyChecksOnTheCorpus(t *testing.T) {
	_, checks := readPolicy(t)
	for _, e := range corpus(t) {
		verdict := admitted
		if checks.refuses(e.data(t)) {
			verdict = refused
		}
		if verdict != e.Policy {
			t.Errorf("%s: the policy's checks say %s, the corpus %s", e.Name, verdict, e.Policy)
		}
	}
}

// FuzzPolicyRefusesWhatCheckRefuses: no value that client-go parses into a
// kubeconfig naming a file, a command or a plugin passes the policy.
func FuzzPolicyRefusesWhatCheckRefuses(f *testing.F) {
	_, checks := readPolicy(f)
	for _, e := range corpus(f) {
		f.Add(e.data(f))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if namesAField(data) && !checks.refuses(data) {
			t.Errorf("the policy admits a kubeconfig Check refuses: %q", data)
		}
	})
}
