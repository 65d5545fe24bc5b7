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
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/cluster-api-workers/test/bench/floor"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// verbs in table order.
var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// pipelineWriters are the controllers of the pipeline: Cluster API, both
// providers and the event recorders outside any reconcile; the simulators
// (standing in for KubeVirt, CDI and the kubelets) and the driver are not.
var pipelineWriters = []string{requests.ComponentCAPI, requests.ComponentBootstrap, requests.ComponentInfra, requests.ComponentUnknown}

// PerMachine sums the requests of the components by verb, divided by the
// machine count.
func (r *Report) PerMachine(components ...string) map[string]float64 {
	out := map[string]float64{}
	for _, c := range r.Requests {
		if slices.Contains(components, c.Component) {
			out[c.Verb] += float64(c.Count) / float64(r.Machines)
		}
	}
	return out
}

// WritesPerMachine sums the components' writes divided by the machine
// count.
func (r *Report) WritesPerMachine(components ...string) float64 {
	var n int
	for _, c := range r.Requests {
		if c.IsWrite() && slices.Contains(components, c.Component) {
			n += c.Count
		}
	}
	return float64(n) / float64(r.Machines)
}

// AfterLastCreated is the time from the last Machine's creation to all
// Running: what the pipeline adds once Cluster API created every Machine.
func (r *Report) AfterLastCreated() time.Duration {
	return max(0, r.AllRunning-r.AllCreated)
}

// FloorMultiple is the time until all Machines ran as a multiple of the
// floor.
func (r *Report) FloorMultiple() float64 {
	if r.Floor.Duration == 0 {
		return 0
	}
	return float64(r.AllRunning) / float64(r.Floor.Duration)
}

// Usage returns the provider process of a component; false when the
// providers ran in the benchmark process.
func (r *Report) Usage(name components.Name) (ProcessUsage, bool) {
	for _, u := range r.Resources {
		if u.Component == string(name) {
			return u, true
		}
	}
	return ProcessUsage{}, false
}

// providerNames are the run's bootstrap and infrastructure provider
// processes.
func (r *Report) providerNames() (bootstrap, infrastructure components.Name) {
	switch {
	case r.FloorProviders:
		return components.Name(floor.BootstrapName), components.Name(floor.InfrastructureName)
	case r.Bootstrap == harness.BootstrapKubeadm:
		return components.KubeadmBootstrap, components.Infrastructure
	default:
		return components.KairosBootstrap, components.Infrastructure
	}
}

// Column is the run's short name in the comparison's tables.
func (r *Report) Column() string {
	switch {
	case r.FloorProviders:
		return "contract floor"
	case r.Bootstrap == harness.BootstrapKubeadm:
		return "kubeadm peer"
	default:
		return "Kairos (ours)"
	}
}

// CPUMillisPerMachine is a provider process's CPU over the scale-up in
// milliseconds per machine; 0 when it did not run as a process.
func (r *Report) CPUMillisPerMachine(name components.Name) float64 {
	u, ok := r.Usage(name)
	if !ok || r.Machines == 0 {
		return 0
	}
	return u.CPUSeconds * 1000 / float64(r.Machines)
}

// Markdown renders the report as the tables docs/benchmarks.md uses.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s: N = %d, boot delay %s\n\n", r.Provider(), r.Machines, r.BootDelay)
	fmt.Fprintf(&b, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| all Machines Running (scale-up to last NodeHealthy) | %s |\n", round(r.AllRunning))
	fmt.Fprintf(&b, "| all Machines created (scale-up to the last creation, Cluster API's MachineSet) / then to all Running | %s / %s |\n", round(r.AllCreated), round(r.AfterLastCreated()))
	fmt.Fprintf(&b, "| creation → NodeHealthy p50 / p95 / p99 / max | %s |\n", r.NodeHealthy)
	fmt.Fprintf(&b, "| creation → bootstrap data ready p50 / p95 / p99 / max | %s |\n", r.BootstrapReady)
	if r.Floor.Duration > 0 {
		fmt.Fprintf(&b, "| floor: bare apiserver accepts %d objects (%d clients) | %s |\n", r.Floor.Total, r.Floor.Workers, round(r.Floor.Duration))
		fmt.Fprintf(&b, "| all Running as a multiple of the floor | %.1fx |\n", r.FloorMultiple())
	}
	fmt.Fprintf(&b, "| client-side throttling (requests waiting > 50ms; max wait) | %d; %s |\n", r.Throttling.Requests, round(r.Throttling.MaxWait))
	if r.NotSettled {
		fmt.Fprintf(&b, "| settled: last controller write after all Running | not settled: controllers still wrote %s after all Running |\n", round(r.Settled))
	} else {
		fmt.Fprintf(&b, "| settled: last controller write after all Running | %s |\n", round(r.Settled))
	}
	if r.Idle.Window > 0 {
		fmt.Fprintf(&b, "| idle window: objects changed / controller writes | %d of %d / %d (window %s) |\n", len(r.Idle.Changed), r.Idle.Objects, sumCounts(r.Idle.Writes), r.Idle.Window)
	} else {
		fmt.Fprintf(&b, "| idle window | not measured |\n")
	}
	fmt.Fprintf(&b, "| errors logged by component | %s |\n", formatMap(r.LogErrors))
	b.WriteString("\nRequests per machine by verb (scale-up until settled):\n\n")
	fmt.Fprintf(&b, "| component | %s | writes |\n|---|%s---|\n", strings.Join(verbs, " | "), strings.Repeat("---|", len(verbs)))
	bootstrapRow, infraRow := "Kairos bootstrap", "KubeVirt infrastructure"
	switch {
	case r.FloorProviders:
		bootstrapRow, infraRow = "contract-floor bootstrap", "contract-floor infrastructure"
	case r.Bootstrap == harness.BootstrapKubeadm:
		bootstrapRow = "kubeadm bootstrap (Cluster API)"
	}
	rows := []struct {
		name       string
		components []string
	}{
		{bootstrapRow, []string{requests.ComponentBootstrap}},
		{infraRow, []string{requests.ComponentInfra}},
		{"Cluster API core", []string{requests.ComponentCAPI}},
		{"simulators (KubeVirt, CDI, kubelets incl. heartbeats)", []string{requests.ComponentSim}},
		{"unattributed (event recorders, webhooks, informers of the benchmark process)", []string{requests.ComponentUnknown}},
	}
	for _, row := range rows {
		per := r.PerMachine(row.components...)
		fmt.Fprintf(&b, "| %s |", row.name)
		for _, v := range verbs {
			fmt.Fprintf(&b, " %.1f |", per[v])
		}
		fmt.Fprintf(&b, " %.1f |\n", r.WritesPerMachine(row.components...))
	}
	b.WriteString("\nRequests of the providers by resource (total):\n\n| component | cluster | resource | verb | count |\n|---|---|---|---|---|\n")
	for _, c := range r.Requests {
		if slices.Contains(requests.OurComponents, c.Component) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", c.Component, c.Cluster, c.Resource, c.Verb, c.Count)
		}
	}
	if len(r.Throttling.By) > 0 {
		b.WriteString("\nThrottled requests (waited > 50ms for the client's rate limiter):\n\n| component | cluster | resource | verb | count |\n|---|---|---|---|---|\n")
		for _, c := range r.Throttling.By {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", c.Component, c.Cluster, c.Resource, c.Verb, c.Count)
		}
	}
	if len(r.Idle.Changed) > 0 || len(r.Idle.Writes) > 0 {
		b.WriteString("\nChanged while idle:\n\n")
		for _, c := range r.Idle.Changed {
			fmt.Fprintf(&b, "- %s\n", c)
		}
		for _, c := range r.Idle.Writes {
			fmt.Fprintf(&b, "- write: %s %s %s %s ×%d\n", c.Component, c.Cluster, c.Verb, c.Resource, c.Count)
		}
	}
	b.WriteString("\nCPU over the scale-up and peak RSS (to the end of the idle window):\n\n| process | CPU s | peak RSS MiB |\n|---|---|---|\n")
	for _, u := range r.Resources {
		fmt.Fprintf(&b, "| %s (pid %d) | %.1f | %.0f |\n", u.Name, u.PID, u.CPUSeconds, u.PeakRSSMiB)
	}
	return b.String()
}

// String renders p50 / p95 / p99 / max.
func (p Percentiles) String() string {
	return fmt.Sprintf("%s / %s / %s / %s", round(p.P50), round(p.P95), round(p.P99), round(p.Max))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}

func sumCounts(cs []requests.RequestCount) int {
	var n int
	for _, c := range cs {
		n += c.Count
	}
	return n
}

func formatMap(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
