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

package requests

import (
	"context"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

func logrContext(l logr.Logger) context.Context { return logr.NewContext(context.Background(), l) }

func TestClassify(t *testing.T) {
	for name, tc := range map[string]struct {
		method, url string
		want        RequestKey
	}{
		"get of a namespaced object":      {"GET", "https://h/api/v1/namespaces/{namespace}/secrets/{name}", RequestKey{Verb: "get", Resource: "secrets"}},
		"list of a namespaced collection": {"GET", "https://h/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/machines", RequestKey{Verb: "list", Resource: "machines"}},
		"list across namespaces":          {"GET", "https://h/apis/cluster.x-k8s.io/v1beta2/machines", RequestKey{Verb: "list", Resource: "machines"}},
		"watch":                           {"GET", "https://h/apis/cluster.x-k8s.io/v1beta2/machines?watch={value}", RequestKey{Verb: "watch", Resource: "machines"}},
		"get of a cluster-scoped object":  {"GET", "https://h/api/v1/nodes/{name}", RequestKey{Verb: "get", Resource: "nodes"}},
		"status patch":                    {"PATCH", "https://h/apis/bootstrap.cozystack.io/v1alpha1/namespaces/{namespace}/kairosconfigs/{name}/status", RequestKey{Verb: "patch", Resource: "kairosconfigs/status"}},
		"cluster-scoped status update":    {"PUT", "https://h/api/v1/nodes/{name}/status", RequestKey{Verb: "update", Resource: "nodes/status"}},
		"create":                          {"POST", "https://h/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines", RequestKey{Verb: "create", Resource: "virtualmachines"}},
		"delete":                          {"DELETE", "https://h/api/v1/namespaces/{namespace}/secrets/{name}", RequestKey{Verb: "delete", Resource: "secrets"}},
		"delete of a collection":          {"DELETE", "https://h/api/v1/namespaces/{namespace}/secrets", RequestKey{Verb: "deletecollection", Resource: "secrets"}},
		"a path outside the API groups":   {"GET", "https://h/version", RequestKey{Verb: "get", Resource: "/version"}},
	} {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			NewWithT(t).Expect(classify(tc.method, *u)).To(Equal(tc.want))
		})
	}
}

func TestRequestsAreAttributedByTheLoggerInTheContext(t *testing.T) {
	g := NewWithT(t)
	r := NewRecorder(Options{ManagementHost: "https://127.0.0.1:6443"})
	u, _ := url.Parse("https://127.0.0.1:6443/api/v1/namespaces/{namespace}/secrets")
	workload, _ := url.Parse("https://127.0.0.1:7443/api/v1/nodes/{name}/status")
	reconcile := logrContext(r.Logger().WithName("bootstrap").WithName("kairosconfig").WithValues("controller", "kairosconfig"))
	r.observe(reconcile, "POST", *u)
	r.observe(context.Background(), "POST", *u)
	r.observe(context.Background(), "PUT", *workload)
	r.observe(r.DriverContext(context.Background()), "GET", *u)
	g.Expect(r.State().Requests).To(ConsistOf(
		RequestCount{RequestKey{Component: "bootstrap", Cluster: "management", Verb: "create", Resource: "secrets"}, 1},
		RequestCount{RequestKey{Component: ComponentUnknown, Cluster: "management", Verb: "create", Resource: "secrets"}, 1},
		RequestCount{RequestKey{Component: ComponentSim, Cluster: "workload", Verb: "update", Resource: "nodes/status"}, 1},
		RequestCount{RequestKey{Component: ComponentDriver, Cluster: "management", Verb: "list", Resource: "secrets"}, 1},
	))
	g.Expect(r.State().LastWriteOf("bootstrap")).NotTo(BeZero())
	g.Expect(r.State().LastWriteOf(ComponentInfra)).To(BeZero())
}

// TestAComponentProcessOwnsItsUnattributedRequests: in a component's own
// process, informers and event recorders are the component's too, and the
// driver reads the counts over HTTP.
func TestAComponentProcessOwnsItsUnattributedRequests(t *testing.T) {
	g := NewWithT(t)
	r := NewRecorder(Options{ManagementHost: "127.0.0.1:6443", Component: ComponentInfra})
	watch, _ := url.Parse("https://127.0.0.1:6443/apis/kubevirt.io/v1/virtualmachines?watch={value}")
	create, _ := url.Parse("https://127.0.0.1:6443/api/v1/namespaces/{namespace}/events")
	r.observe(context.Background(), "GET", *watch)
	r.observe(context.Background(), "POST", *create)
	r.observeWait(context.Background(), "POST", *create, 80*time.Millisecond)
	r.Logger().WithName(ComponentInfra).Error(nil, "A reconcile failed")

	server := httptest.NewServer(r.Handler())
	defer server.Close()
	remote := Remote{URL: server.URL}
	state, err := remote.State(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(state.Requests).To(ConsistOf(
		RequestCount{RequestKey{Component: ComponentInfra, Cluster: "management", Verb: "watch", Resource: "virtualmachines"}, 1},
		RequestCount{RequestKey{Component: ComponentInfra, Cluster: "management", Verb: "create", Resource: "events"}, 1},
	))
	g.Expect(state.Throttling.Requests).To(Equal(1))
	g.Expect(state.LogErrors).To(Equal(map[string]int{ComponentInfra: 1}))
	g.Expect(state.LastWriteOf(ComponentInfra)).NotTo(BeZero())

	g.Expect(remote.Reset(context.Background())).To(Succeed())
	state, err = remote.State(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(state.Requests).To(BeEmpty())
}

func TestMergeAddsCountsAndKeepsTheLatestWrite(t *testing.T) {
	g := NewWithT(t)
	key := RequestKey{Component: ComponentBootstrap, Cluster: "management", Verb: "patch", Resource: "kairosconfigs"}
	early, late := time.Unix(100, 0), time.Unix(200, 0)
	merged := Merge(
		State{Requests: []RequestCount{{key, 2}}, Throttling: Throttling{Requests: 1, MaxWait: time.Second, TotalWait: time.Second, By: []RequestCount{{key, 1}}}, LastWrite: map[string]time.Time{ComponentBootstrap: late}},
		State{Requests: []RequestCount{{key, 3}}, Throttling: Throttling{MaxWait: 2 * time.Second, TotalWait: 2 * time.Second}, LastWrite: map[string]time.Time{ComponentBootstrap: early}, LogErrors: map[string]int{ComponentCAPI: 1}},
	)
	g.Expect(merged.Requests).To(Equal([]RequestCount{{key, 5}}))
	g.Expect(merged.Throttling).To(Equal(Throttling{Requests: 1, MaxWait: 2 * time.Second, TotalWait: 3 * time.Second, By: []RequestCount{{key, 1}}}))
	g.Expect(merged.LastWriteOf(ComponentBootstrap, ComponentCAPI)).To(Equal(late))
	g.Expect(merged.LogErrors).To(Equal(map[string]int{ComponentCAPI: 1}))
}
