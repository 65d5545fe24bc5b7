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
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// The audit log is the other half of rbac.go: our providers run bound to
// exactly the ClusterRoles they ship, so a verb missing from a role fails
// a scenario; the management apiserver's audit log records every request
// they made (informers' lists and watches included), so a verb a role
// grants that no scenario used shows up too.

// serviceAccountsGroup is the group our providers' users carry
// (providerConfig), as service accounts do. The audit policy records only
// requests of that group: ours, and the few of the node-side stand-in,
// whose user is virt-handler's service account. The other components,
// most of the apiserver's traffic, are not recorded.
const serviceAccountsGroup = "system:serviceaccounts"

// decisionAnnotation is the authorizer's verdict the apiserver adds to
// every audit event ("allow" or "forbid").
const decisionAnnotation = "authorization.k8s.io/decision"

// auditArgs are the management apiserver's flags that write the audit log
// of our providers' requests to path, with the policy next to it; none
// when path is empty. The log is written as each request completes
// (blocking mode) to one file that is never rotated, so it is whole once
// the apiserver stopped.
func auditArgs(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	policy := auditv1.Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Policy"},
		OmitStages: []auditv1.Stage{auditv1.StageRequestReceived},
		Rules: []auditv1.PolicyRule{
			{Level: auditv1.LevelMetadata, UserGroups: []string{serviceAccountsGroup}},
			{Level: auditv1.LevelNone},
		},
	}
	data, err := sigsyaml.Marshal(policy)
	if err != nil {
		return nil, err
	}
	policyPath := path + ".policy.yaml"
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.WriteFile(policyPath, data, 0o600); err != nil {
		return nil, err
	}
	return map[string]string{
		"audit-policy-file": policyPath,
		"audit-log-path":    path,
		"audit-log-format":  "json",
		"audit-log-mode":    "blocking",
		"audit-log-maxsize": "0",
	}, nil
}

// Grant is one verb a ClusterRole rule allows on one resource (or
// non-resource URL). A field holding "*" is a wildcard.
type Grant struct {
	APIGroup string
	// Resource is the resource, with its subresource after a slash.
	Resource       string
	ResourceName   string
	NonResourceURL string
	Verb           string
}

// Wildcard reports whether the grant covers more than one verb, group,
// resource or URL.
func (g Grant) Wildcard() bool {
	return g.Verb == rbacv1.VerbAll || g.APIGroup == rbacv1.APIGroupAll ||
		g.Resource == rbacv1.ResourceAll || strings.HasPrefix(g.Resource, "*/") ||
		strings.HasSuffix(g.NonResourceURL, "*")
}

// String is the grant as kubectl names it: verb, then resource.group or
// the URL.
func (g Grant) String() string {
	if g.NonResourceURL != "" {
		return g.Verb + " " + g.NonResourceURL
	}
	s := g.Verb + " " + g.Resource
	if g.APIGroup != "" {
		s += "." + g.APIGroup
	}
	if g.ResourceName != "" {
		s += " named " + g.ResourceName
	}
	return s
}

// covers reports whether the grant allows the request, as RBAC decides
// (k8s.io/kubernetes pkg/apis/rbac/v1 evaluation helpers).
func (g Grant) covers(r request) bool {
	if g.Verb != rbacv1.VerbAll && g.Verb != r.Verb {
		return false
	}
	if g.NonResourceURL != "" || r.NonResourceURL != "" {
		if g.NonResourceURL == "" || r.NonResourceURL == "" {
			return false
		}
		if prefix, ok := strings.CutSuffix(g.NonResourceURL, "*"); ok {
			return strings.HasPrefix(r.NonResourceURL, prefix)
		}
		return g.NonResourceURL == r.NonResourceURL
	}
	if g.APIGroup != rbacv1.APIGroupAll && g.APIGroup != r.APIGroup {
		return false
	}
	if g.ResourceName != "" && g.ResourceName != r.Name {
		return false
	}
	if g.Resource == rbacv1.ResourceAll || g.Resource == r.Resource {
		return true
	}
	sub, ok := strings.CutPrefix(g.Resource, "*/")
	_, requested, hasSub := strings.Cut(r.Resource, "/")
	return ok && hasSub && sub == requested
}

// request is what one audit event says a user did.
type request struct {
	APIGroup, Resource, Name, Verb string
	NonResourceURL                 string
}

func (r request) String() string {
	return Grant{APIGroup: r.APIGroup, Resource: r.Resource, NonResourceURL: r.NonResourceURL, Verb: r.Verb}.String()
}

// grants lists every verb on every resource the role's rules allow, each
// once.
func grants(role *rbacv1.ClusterRole) []Grant {
	seen := map[Grant]bool{}
	var out []Grant
	add := func(g Grant) {
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	for _, rule := range role.Rules {
		for _, verb := range rule.Verbs {
			for _, u := range rule.NonResourceURLs {
				add(Grant{NonResourceURL: u, Verb: verb})
			}
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					if len(rule.ResourceNames) == 0 {
						add(Grant{APIGroup: group, Resource: resource, Verb: verb})
					}
					for _, name := range rule.ResourceNames {
						add(Grant{APIGroup: group, Resource: resource, ResourceName: name, Verb: verb})
					}
				}
			}
		}
	}
	sortGrants(out)
	return out
}

func sortGrants(gs []Grant) {
	sort.Slice(gs, func(i, j int) bool {
		a, b := gs[i], gs[j]
		for _, c := range [][2]string{{a.NonResourceURL, b.NonResourceURL}, {a.APIGroup, b.APIGroup}, {a.Resource, b.Resource}, {a.ResourceName, b.ResourceName}, {a.Verb, b.Verb}} {
			if c[0] != c[1] {
				return c[0] < c[1]
			}
		}
		return false
	})
}

// readAuditLog returns, by provider, the requests the authorizer allowed
// them, and how many events of our providers the log holds. Denied
// requests are left out: they prove nothing a role grants (and the log
// scan fails on them).
func readAuditLog(r io.Reader) (map[components.Name]map[request]bool, int, error) {
	allowed := map[components.Name]map[request]bool{}
	events := 0
	dec := json.NewDecoder(r)
	for {
		ev := &auditv1.Event{}
		if err := dec.Decode(ev); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, 0, fmt.Errorf("reading the audit log after %d events: %w", events, err)
		}
		rest, ok := strings.CutPrefix(ev.User.Username, providerUserPrefix)
		if !ok {
			continue
		}
		_, name, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		events++
		if decision, ok := ev.Annotations[decisionAnnotation]; ok {
			if decision != "allow" {
				continue
			}
		} else if ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 {
			continue
		}
		u, err := url.Parse(ev.RequestURI)
		if err != nil {
			return nil, 0, fmt.Errorf("reading the audit log: event %s: %w", ev.AuditID, err)
		}
		req := request{Verb: ev.Verb}
		if o := ev.ObjectRef; o != nil {
			req.APIGroup, req.Resource, req.Name = o.APIGroup, o.Resource, o.Name
			if o.Subresource != "" {
				req.Resource += "/" + o.Subresource
			}
		} else {
			req.NonResourceURL = u.Path
		}
		component := components.Name(name)
		if allowed[component] == nil {
			allowed[component] = map[request]bool{}
		}
		allowed[component][req] = true
		// client-go's informers (WatchListClient, on by default since
		// 1.35) open with a watch that streams the initial objects in
		// place of a LIST, and fall back to the LIST when the apiserver
		// does not serve such streams (older ones, or the WatchList gate
		// off) or the stream fails: the watch stands for a list the role
		// must still grant.
		if ev.Verb == "watch" && u.Query().Get("sendInitialEvents") == "true" {
			req.Verb = "list"
			allowed[component][req] = true
		}
	}
	return allowed, events, nil
}

// RoleUsage is what our providers did with the ClusterRoles they ran with.
type RoleUsage struct {
	// Events is how many audit events of our providers the log held.
	Events int
	// Roles are the role files bound to each provider, by provider and
	// file.
	Roles []RoleUse
}

// RoleUse is one role file bound to one provider.
type RoleUse struct {
	Component components.Name
	File      string
	Grants    []GrantUse
}

// GrantUse is one grant and the requests it allowed.
type GrantUse struct {
	Grant
	// Used are the distinct requests the grant covers that the provider
	// made, as "verb resource.group"; empty when the grant was never used.
	Used []string
}

// RoleUsage compares the ClusterRoles our providers ran with (rbac.go)
// with the requests the management apiserver allowed them, from the audit
// log Options.AuditLog names. Call it after Stop: clusters released in the
// background make requests until then, and the log is whole only once the
// apiserver stopped.
func (h *Harness) RoleUsage() (*RoleUsage, error) {
	if h.opts.AuditLog == "" {
		return nil, errors.New("the harness kept no audit log (Options.AuditLog)")
	}
	bound := map[components.Name]map[string]*rbacv1.ClusterRole{}
	for _, name := range h.componentNames() {
		for _, file := range providerRoles(name, h.opts.WorkerClasses) {
			role, err := readClusterRole(filepath.Join(envtest.RepoRoot(), file))
			if err != nil {
				return nil, err
			}
			if bound[name] == nil {
				bound[name] = map[string]*rbacv1.ClusterRole{}
			}
			bound[name][file] = role
		}
	}
	f, err := os.Open(h.opts.AuditLog)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return roleUsage(f, bound)
}

// roleUsage matches the audit log with the roles bound to each provider
// (by file). A request counts for every grant that covers it: the roles
// of one provider are bound to one user, so which of them the authorizer
// used is not recorded.
func roleUsage(auditLog io.Reader, bound map[components.Name]map[string]*rbacv1.ClusterRole) (*RoleUsage, error) {
	allowed, events, err := readAuditLog(auditLog)
	if err != nil {
		return nil, err
	}
	usage := &RoleUsage{Events: events}
	for name, roles := range bound {
		requests := make([]request, 0, len(allowed[name]))
		for r := range allowed[name] {
			requests = append(requests, r)
		}
		for file, role := range roles {
			use := RoleUse{Component: name, File: file}
			for _, g := range grants(role) {
				gu := GrantUse{Grant: g}
				for _, r := range requests {
					if g.covers(r) {
						gu.Used = append(gu.Used, r.String())
					}
				}
				sort.Strings(gu.Used)
				use.Grants = append(use.Grants, gu)
			}
			usage.Roles = append(usage.Roles, use)
		}
	}
	sort.Slice(usage.Roles, func(i, j int) bool {
		if usage.Roles[i].Component != usage.Roles[j].Component {
			return usage.Roles[i].Component < usage.Roles[j].Component
		}
		return usage.Roles[i].File < usage.Roles[j].File
	})
	return usage, nil
}

// Unexercised is an entry of a justification file: verbs a role grants on
// resources of one API group that no scenario uses, and why the role keeps
// them.
type Unexercised struct {
	// Role is the role file, relative to the repository.
	Role string `json:"role"`
	// APIGroup is "" for the core group.
	APIGroup string `json:"apiGroup"`
	// Resources are resources, a subresource after a slash.
	Resources []string `json:"resources"`
	Verbs     []string `json:"verbs"`
	// Reason names the code that makes the requests and why no scenario
	// reaches it.
	Reason string `json:"reason"`
	// Occasional marks a path the scenarios reach on some runs only (a
	// race with the cache, a timer): a use is reported, not stale.
	Occasional bool `json:"occasional,omitempty"`
}

// ReadUnexercised reads a justification file: a YAML list of Unexercised.
// Every entry needs a role, resources, verbs and a reason.
func ReadUnexercised(path string) ([]Unexercised, error) {
	data, err := os.ReadFile(path) //nolint:gosec // A file of the repository or one the harness wrote.
	if err != nil {
		return nil, err
	}
	var entries []Unexercised
	if err := sigsyaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	for i, e := range entries {
		if e.Role == "" || len(e.Resources) == 0 || len(e.Verbs) == 0 || strings.TrimSpace(e.Reason) == "" {
			return nil, fmt.Errorf("%s: entry %d (%s %v) needs a role, resources, verbs and a reason", path, i+1, e.APIGroup, e.Resources)
		}
	}
	return entries, nil
}

// Check reports, for each role file, the grants no request used, whether
// a justification covers them, and the wildcard grants with what they
// allowed; then the justifications that are stale (they name a grant that
// was used, or one the role does not have). The report is sorted, so two
// runs that made the same requests print the same. Problems are the
// unjustified unused grants and the stale justifications.
func (u *RoleUsage) Check(justified []Unexercised) (report string, problems []string) {
	type key struct {
		file string
		g    Grant
	}
	reasons := map[key]Unexercised{}
	for _, e := range justified {
		e.Reason = strings.Join(strings.Fields(e.Reason), " ")
		for _, resource := range e.Resources {
			for _, verb := range e.Verbs {
				reasons[key{e.Role, Grant{APIGroup: e.APIGroup, Resource: resource, Verb: verb}}] = e
			}
		}
	}
	granted := map[key]bool{}

	var b bytes.Buffer
	fmt.Fprintf(&b, "RBAC use: %d audited requests of our providers against the ClusterRoles they ran with\n", u.Events)
	for _, role := range u.Roles {
		used := 0
		for _, g := range role.Grants {
			if len(g.Used) > 0 {
				used++
			}
		}
		fmt.Fprintf(&b, "%s (%s): %d of %d grants used\n", role.File, role.Component, used, len(role.Grants))
		var table bytes.Buffer
		w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
		for _, g := range role.Grants {
			k := key{role.File, g.Grant}
			granted[k] = true
			entry, ok := reasons[k]
			status, note := "", ""
			switch {
			case len(g.Used) == 0 && ok:
				status, note = "unused, justified", brief(entry.Reason)
			case len(g.Used) == 0:
				status = "UNUSED"
				problems = append(problems, fmt.Sprintf("%s grants %s to %s, which no scenario used and no justification covers", role.File, g.Grant, role.Component))
			case ok && entry.Occasional:
				status, note = "used, justified as occasional", brief(entry.Reason)
			case ok:
				status, note = "USED, justified", "stale justification"
				problems = append(problems, fmt.Sprintf("the justification of %s in %s is stale: %s used it (%s)", g.Grant, role.File, role.Component, strings.Join(g.Used, ", ")))
			case g.Wildcard():
				status = "used"
			}
			if g.Wildcard() {
				status += " (wildcard)"
				if len(g.Used) > 0 && note == "" {
					note = "allowed " + strings.Join(g.Used, ", ")
				}
			}
			if status != "" {
				fmt.Fprintf(w, "  %s\t%s\t%s\n", status, g.Grant, note)
			}
		}
		_ = w.Flush()
		for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
			if line != "" {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
			}
		}
	}
	bound := map[string]bool{}
	for _, role := range u.Roles {
		bound[role.File] = true
	}
	var stale []string
	for k := range reasons {
		switch {
		case !bound[k.file]:
			stale = append(stale, fmt.Sprintf("the justification of %s names %s, which no provider ran with", k.g, k.file))
		case !granted[k]:
			stale = append(stale, fmt.Sprintf("the justification of %s in %s is stale: the role does not grant it", k.g, k.file))
		}
	}
	sort.Strings(stale)
	problems = append(problems, stale...)
	return b.String(), problems
}

// brief shortens a justification's reason for the report, whose lines
// would otherwise run to hundreds of characters; the file has it whole.
func brief(reason string) string {
	const limit = 60
	if r := []rune(reason); len(r) > limit {
		return strings.TrimRight(string(r[:limit]), " ") + "…"
	}
	return reason
}
