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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// auditLine is one audit event as the apiserver writes it at the Metadata
// level, for user (a provider's name, or a full user name with a colon).
func auditLine(user, verb, uri, group, resource, subresource string, code int, decision string) string {
	if !strings.Contains(user, ":") {
		user = providerUserPrefix + "1:" + user
	}
	objectRef := ""
	if resource != "" {
		objectRef = fmt.Sprintf(`,"objectRef":{"resource":%q,"apiGroup":%q,"subresource":%q,"namespace":"ns","name":"n"}`, resource, group, subresource)
	}
	annotations := ""
	if decision != "" {
		annotations = fmt.Sprintf(`,"annotations":{"authorization.k8s.io/decision":%q}`, decision)
	}
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"x","stage":"ResponseComplete","requestURI":%q,"verb":%q,"user":{"username":%q,"groups":["system:serviceaccounts","system:authenticated"]}%s,"responseStatus":{"metadata":{},"code":%d}%s}`,
		uri, verb, user, objectRef, code, annotations)
}

func TestReadAuditLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want map[components.Name][]request
	}{{
		name: "an allowed request counts",
		line: auditLine("infrastructure", "create", "/api/v1/namespaces/ns/secrets", "", "secrets", "", 201, "allow"),
		want: map[components.Name][]request{components.Infrastructure: {{Resource: "secrets", Name: "n", Verb: "create"}}},
	}, {
		name: "a subresource joins its resource",
		line: auditLine("kairos-bootstrap", "patch", "/apis/bootstrap.cozystack.io/v1alpha1/namespaces/ns/kairosconfigs/n/status", "bootstrap.cozystack.io", "kairosconfigs", "status", 200, "allow"),
		want: map[components.Name][]request{components.KairosBootstrap: {{APIGroup: "bootstrap.cozystack.io", Resource: "kairosconfigs/status", Name: "n", Verb: "patch"}}},
	}, {
		name: "a request that failed after authorization counts",
		line: auditLine("infrastructure", "get", "/api/v1/namespaces/ns/secrets/n", "", "secrets", "", 404, "allow"),
		want: map[components.Name][]request{components.Infrastructure: {{Resource: "secrets", Name: "n", Verb: "get"}}},
	}, {
		name: "a forbidden request does not",
		line: auditLine("infrastructure", "delete", "/api/v1/namespaces/ns/secrets/n", "", "secrets", "", 403, "forbid"),
		want: map[components.Name][]request{},
	}, {
		name: "without the decision, a 403 is a refusal",
		line: auditLine("infrastructure", "delete", "/api/v1/namespaces/ns/secrets/n", "", "secrets", "", 403, ""),
		want: map[components.Name][]request{},
	}, {
		name: "a 403 of admission after an allowed authorization counts",
		line: auditLine("infrastructure", "create", "/api/v1/namespaces/ns/secrets", "", "secrets", "", 403, "allow"),
		want: map[components.Name][]request{components.Infrastructure: {{Resource: "secrets", Name: "n", Verb: "create"}}},
	}, {
		name: "another user is not ours",
		line: auditLine("system:serviceaccount:kubevirt:kubevirt-handler", "patch", "/api/v1/nodes/n", "", "nodes", "", 200, "allow"),
		want: map[components.Name][]request{},
	}, {
		name: "a watch-list stream stands for the list it replaces",
		line: auditLine("kairos-bootstrap", "watch", "/api/v1/secrets?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true", "", "secrets", "", 200, "allow"),
		want: map[components.Name][]request{components.KairosBootstrap: {{Resource: "secrets", Name: "n", Verb: "watch"}, {Resource: "secrets", Name: "n", Verb: "list"}}},
	}, {
		name: "a plain watch is a watch",
		line: auditLine("kairos-bootstrap", "watch", "/api/v1/secrets?resourceVersion=5&watch=true", "", "secrets", "", 200, "allow"),
		want: map[components.Name][]request{components.KairosBootstrap: {{Resource: "secrets", Name: "n", Verb: "watch"}}},
	}, {
		name: "a non-resource request is its path",
		line: auditLine("kairos-bootstrap", "get", "/apis?timeout=32s", "", "", "", 200, "allow"),
		want: map[components.Name][]request{components.KairosBootstrap: {{NonResourceURL: "/apis", Verb: "get"}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, events, err := readAuditLog(strings.NewReader(tc.line + "\n"))
			g.Expect(err).NotTo(HaveOccurred())
			want := map[components.Name]map[request]bool{}
			for name, reqs := range tc.want {
				want[name] = map[request]bool{}
				for _, r := range reqs {
					want[name][r] = true
				}
			}
			g.Expect(got).To(Equal(want))
			if strings.Contains(tc.line, "kubevirt-handler") {
				g.Expect(events).To(BeZero())
			} else {
				g.Expect(events).To(Equal(1))
			}
		})
	}
}

func TestReadAuditLogRefusesAnUnreadableLine(t *testing.T) {
	_, _, err := readAuditLog(strings.NewReader(auditLine("infrastructure", "get", "/api", "", "", "", 200, "allow") + "\n{\"kind\":"))
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("after 1 events")))
}

func TestGrantCovers(t *testing.T) {
	secrets := request{Resource: "secrets", Name: "a", Verb: "get"}
	status := request{APIGroup: "x.io", Resource: "things/status", Name: "a", Verb: "patch"}
	for _, tc := range []struct {
		name  string
		grant Grant
		req   request
		want  bool
	}{
		{"exact", Grant{Resource: "secrets", Verb: "get"}, secrets, true},
		{"another verb", Grant{Resource: "secrets", Verb: "list"}, secrets, false},
		{"another group", Grant{APIGroup: "x.io", Resource: "secrets", Verb: "get"}, secrets, false},
		{"any verb", Grant{Resource: "secrets", Verb: "*"}, secrets, true},
		{"any group", Grant{APIGroup: "*", Resource: "secrets", Verb: "get"}, secrets, true},
		{"any resource", Grant{APIGroup: "x.io", Resource: "*", Verb: "patch"}, status, true},
		{"the resource, not its subresource", Grant{APIGroup: "x.io", Resource: "things", Verb: "patch"}, status, false},
		{"any resource's subresource", Grant{APIGroup: "x.io", Resource: "*/status", Verb: "patch"}, status, true},
		{"any resource's other subresource", Grant{APIGroup: "x.io", Resource: "*/scale", Verb: "patch"}, status, false},
		{"a subresource wildcard, not the resource", Grant{Resource: "*/status", Verb: "get"}, secrets, false},
		{"its name", Grant{Resource: "secrets", ResourceName: "a", Verb: "get"}, secrets, true},
		{"another name", Grant{Resource: "secrets", ResourceName: "b", Verb: "get"}, secrets, false},
		{"a URL", Grant{NonResourceURL: "/healthz", Verb: "get"}, request{NonResourceURL: "/healthz", Verb: "get"}, true},
		{"a URL prefix", Grant{NonResourceURL: "/apis/*", Verb: "get"}, request{NonResourceURL: "/apis/x.io", Verb: "get"}, true},
		{"a URL, not a resource", Grant{NonResourceURL: "*", Verb: "get"}, secrets, false},
		{"a resource, not a URL", Grant{APIGroup: "*", Resource: "*", Verb: "get"}, request{NonResourceURL: "/api", Verb: "get"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.grant.covers(tc.req)).To(Equal(tc.want))
		})
	}
}

func TestGrantsExpandRules(t *testing.T) {
	role := &rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"x.io"}, Resources: []string{"things", "things/status"}, Verbs: []string{"patch", "get"}},
		{APIGroups: []string{"x.io"}, Resources: []string{"things"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"b", "a"}, Verbs: []string{"get"}},
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
	}}
	var got []string
	for _, g := range grants(role) {
		got = append(got, g.String())
	}
	NewWithT(t).Expect(got).To(Equal([]string{
		"get configmaps named a",
		"get configmaps named b",
		"get things.x.io",
		"patch things.x.io",
		"get things/status.x.io",
		"patch things/status.x.io",
		"get /metrics",
	}))
}

func TestCheck(t *testing.T) {
	const roleFile, otherFile = "config/p/rbac/role.yaml", "config/q/rbac/role.yaml"
	role := &rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update", "list", "watch"}},
		{APIGroups: []string{"x.io"}, Resources: []string{"*"}, Verbs: []string{"get"}},
		{APIGroups: []string{"y.io"}, Resources: []string{"*"}, Verbs: []string{"get"}},
	}}
	log := strings.Join([]string{
		auditLine("infrastructure", "create", "/api/v1/namespaces/ns/secrets", "", "secrets", "", 201, "allow"),
		auditLine("infrastructure", "watch", "/api/v1/secrets?sendInitialEvents=true&watch=true", "", "secrets", "", 200, "allow"),
		auditLine("infrastructure", "get", "/apis/x.io/v1/namespaces/ns/things/n", "x.io", "things", "", 200, "allow"),
		auditLine("infrastructure", "get", "/apis/x.io/v1/namespaces/ns/things/n", "x.io", "others", "", 200, "allow"),
		// Refused: proves nothing the role grants.
		auditLine("infrastructure", "update", "/api/v1/namespaces/ns/secrets/n", "", "secrets", "", 403, "forbid"),
	}, "\n")
	bound := map[components.Name]map[string]*rbacv1.ClusterRole{components.Infrastructure: {roleFile: role}}
	for _, tc := range []struct {
		name     string
		entries  []Unexercised
		report   []string
		problems []string
	}{{
		name: "unjustified",
		report: []string{
			"RBAC use: 5 audited requests of our providers against the ClusterRoles they ran with",
			"config/p/rbac/role.yaml (infrastructure): 4 of 7 grants used",
			"  UNUSED             get secrets",
			"  UNUSED             update secrets",
			"  used (wildcard)    get *.x.io      allowed get others.x.io, get things.x.io",
			"  UNUSED (wildcard)  get *.y.io",
		},
		problems: []string{
			"config/p/rbac/role.yaml grants get secrets to infrastructure, which no scenario used and no justification covers",
			"config/p/rbac/role.yaml grants update secrets to infrastructure, which no scenario used and no justification covers",
			"config/p/rbac/role.yaml grants get *.y.io to infrastructure, which no scenario used and no justification covers",
		},
	}, {
		name: "justified, stale and occasional",
		entries: []Unexercised{
			{Role: roleFile, Resources: []string{"secrets"}, Verbs: []string{"get", "update"}, Reason: "An error\n  path."},
			{Role: roleFile, APIGroup: "y.io", Resources: []string{"*"}, Verbs: []string{"get"}, Reason: "Other providers."},
			{Role: roleFile, Resources: []string{"secrets"}, Verbs: []string{"create"}, Reason: "Never."},
			{Role: roleFile, Resources: []string{"secrets"}, Verbs: []string{"watch"}, Reason: "A race.", Occasional: true},
			{Role: roleFile, Resources: []string{"configmaps"}, Verbs: []string{"get"}, Reason: "Gone."},
			{Role: otherFile, Resources: []string{"secrets"}, Verbs: []string{"get"}, Reason: "Not bound."},
		},
		report: []string{
			"RBAC use: 5 audited requests of our providers against the ClusterRoles they ran with",
			"config/p/rbac/role.yaml (infrastructure): 4 of 7 grants used",
			"  USED, justified                create secrets  stale justification",
			"  unused, justified              get secrets     An error path.",
			"  unused, justified              update secrets  An error path.",
			"  used, justified as occasional  watch secrets   A race.",
			"  used (wildcard)                get *.x.io      allowed get others.x.io, get things.x.io",
			"  unused, justified (wildcard)   get *.y.io      Other providers.",
		},
		problems: []string{
			"the justification of create secrets in config/p/rbac/role.yaml is stale: infrastructure used it (create secrets)",
			"the justification of get configmaps in config/p/rbac/role.yaml is stale: the role does not grant it",
			"the justification of get secrets names config/q/rbac/role.yaml, which no provider ran with",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			usage, err := roleUsage(strings.NewReader(log), bound)
			g.Expect(err).NotTo(HaveOccurred())
			report, problems := usage.Check(tc.entries)
			g.Expect(strings.Split(strings.TrimSuffix(report, "\n"), "\n")).To(Equal(tc.report))
			g.Expect(problems).To(Equal(tc.problems))
		})
	}
}

func TestBriefShortensLongReasons(t *testing.T) {
	g := NewWithT(t)
	g.Expect(brief("A race.")).To(Equal("A race."))
	long := "kubevirtmachine_controller.go: bootstrapData reads the bootstrap data Secret uncached"
	g.Expect(brief(long)).To(Equal("kubevirtmachine_controller.go: bootstrapData reads the boots…"))
}

func TestAuditArgs(t *testing.T) {
	g := NewWithT(t)
	args, err := auditArgs("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(BeNil())

	path := filepath.Join(t.TempDir(), "audit", "audit.log")
	args, err = auditArgs(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(HaveKeyWithValue("audit-log-path", path))
	g.Expect(args).To(HaveKeyWithValue("audit-log-mode", "blocking"))
	g.Expect(args).To(HaveKeyWithValue("audit-log-maxsize", "0"))
	data, err := os.ReadFile(args["audit-policy-file"])
	g.Expect(err).NotTo(HaveOccurred())
	policy := &auditv1.Policy{}
	g.Expect(sigsyaml.UnmarshalStrict(data, policy)).To(Succeed())
	g.Expect(policy.Kind).To(Equal("Policy"))
	g.Expect(policy.OmitStages).To(ConsistOf(auditv1.StageRequestReceived))
	g.Expect(policy.Rules).To(HaveLen(2))
	g.Expect(policy.Rules[0].UserGroups).To(ConsistOf(serviceAccountsGroup))
	g.Expect(policy.Rules[0].Level).To(Equal(auditv1.LevelMetadata))
	g.Expect(policy.Rules[1].Level).To(Equal(auditv1.LevelNone))
}

func TestReadUnexercised(t *testing.T) {
	for _, tc := range []struct {
		name, file, err string
	}{
		{"complete", "- {role: r, apiGroup: '', resources: [secrets], verbs: [get], reason: why}\n", ""},
		{"no reason", "- {role: r, apiGroup: '', resources: [secrets], verbs: [get], reason: ' '}\n", "needs a role, resources, verbs and a reason"},
		{"no verbs", "- {role: r, apiGroup: '', resources: [secrets], reason: why}\n", "needs a role, resources, verbs and a reason"},
		{"an unknown field", "- {role: r, resource: secrets, verbs: [get], reason: why}\n", "unknown field"},
		{"empty", "[]\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(t.TempDir(), "unexercised.yaml")
			g.Expect(os.WriteFile(path, []byte(tc.file), 0o600)).To(Succeed())
			_, err := ReadUnexercised(path)
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			}
		})
	}
}
