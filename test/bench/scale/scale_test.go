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

package scale

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// ourKinds are the objects our providers (and the simulated KubeVirt behind
// the infrastructure provider) write.
var ourKinds = []string{
	"KairosConfig", "KairosConfigTemplate", "KubeVirtCluster", "KubeVirtMachine", "KubeVirtMachineTemplate",
	"VirtualMachine", "VirtualMachineInstance", "DataVolume", "PersistentVolumeClaim", "Secret", "ConfigMap",
	"WorkerClass", "WorkerPlatform",
}

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

func TestPercentilesNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	g := NewWithT(t)
	g.Expect(percentilesOf(ds)).To(Equal(Percentiles{Count: 100, P50: 50 * time.Second, P95: 95 * time.Second, P99: 99 * time.Second, Max: 100 * time.Second}))
	g.Expect(percentilesOf([]time.Duration{3 * time.Second})).To(Equal(Percentiles{Count: 1, P50: 3 * time.Second, P95: 3 * time.Second, P99: 3 * time.Second, Max: 3 * time.Second}))
	g.Expect(percentilesOf(nil)).To(Equal(Percentiles{}))
}

func TestRequestsAreAttributedByTheLoggerInTheContext(t *testing.T) {
	g := NewWithT(t)
	r := NewRecorder("https://127.0.0.1:6443")
	u, _ := url.Parse("https://127.0.0.1:6443/api/v1/namespaces/{namespace}/secrets")
	workload, _ := url.Parse("https://127.0.0.1:7443/api/v1/nodes/{name}/status")
	reconcile := logrContext(r.Logger().WithName("bootstrap").WithName("kairosconfig").WithValues("controller", "kairosconfig"))
	r.observe(reconcile, "POST", *u)
	r.observe(context.Background(), "POST", *u)
	r.observe(context.Background(), "PUT", *workload)
	r.observe(r.DriverContext(context.Background()), "GET", *u)
	g.Expect(r.Snapshot()).To(ConsistOf(
		RequestCount{RequestKey{Component: "bootstrap", Cluster: "management", Verb: "create", Resource: "secrets"}, 1},
		RequestCount{RequestKey{Component: ComponentUnknown, Cluster: "management", Verb: "create", Resource: "secrets"}, 1},
		RequestCount{RequestKey{Component: componentSim, Cluster: "workload", Verb: "update", Resource: "nodes/status"}, 1},
		RequestCount{RequestKey{Component: ComponentDriver, Cluster: "management", Verb: "list", Resource: "secrets"}, 1},
	))
	g.Expect(r.LastWrite("bootstrap")).NotTo(BeZero())
	g.Expect(r.LastWrite(componentInfra)).To(BeZero())
}

// TestScaleToTen is the benchmark's correctness guard, not a timing and not
// the targets (those are what `make bench-scale` reports, see
// docs/benchmarks.md; client-side throttling is one): ten Kairos machines
// join, the pipeline's writes are attributed to the providers that make
// them, and nothing is written while the pool is idle. The floor needs a
// second apiserver and is left to `make bench-scale`.
func TestScaleToTen(t *testing.T) {
	g := NewWithT(t)
	report, err := Run(context.Background(), Config{
		Machines:   10,
		Timeout:    3 * time.Minute,
		Quiet:      2 * time.Second,
		IdleWindow: 3 * time.Second,
		SkipFloor:  true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(report.NodeHealthy.Count).To(Equal(10))
	g.Expect(report.BootstrapReady.Count).To(Equal(10))
	g.Expect(report.NodeHealthy.P50).To(BeNumerically(">", report.BootstrapReady.P50))
	g.Expect(report.Throttling.Requests).To(Equal(sumCounts(report.Throttling.By)))
	// Each machine's VirtualMachine is created once, by the infrastructure
	// provider, and its bootstrap token once, by the bootstrap provider.
	g.Expect(report.Requests).To(ContainElement(RequestCount{RequestKey{Component: componentInfra, Cluster: "management", Verb: "create", Resource: "virtualmachines"}, 10}))
	g.Expect(report.Requests).To(ContainElement(RequestCount{RequestKey{Component: componentBootstrap, Cluster: "workload", Verb: "create", Resource: "secrets"}, 10}))
	g.Expect(report.WritesPerMachine(OurComponents...)).To(BeNumerically(">", 0))
	g.Expect(report.Idle.Objects).To(BeNumerically(">", 10))
	// Cluster API's own late writes (it may still patch Machines a few
	// seconds after they run) are reported, not asserted: this guards our
	// providers.
	for _, c := range report.Idle.Changed {
		kind := strings.SplitN(c, " ", 2)[0]
		g.Expect(ourKinds).NotTo(ContainElement(kind), "changed while idle: %s", c)
	}
	for _, c := range report.Idle.Writes {
		g.Expect(OurComponents).NotTo(ContainElement(c.Component), "written while idle: %+v", c)
	}
	g.Expect(report.Markdown()).To(ContainSubstring("### N = 10"))
}
