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
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// Comparison is one side-by-side run: the Kairos pool (ours), the floor of
// our pipeline's objects, the same pool reconciled by the contract-floor
// providers (test/bench/floor), and the same pool bootstrapped by Cluster
// API's kubeadm provider (the peer), at the same N, each in a fresh harness
// with the providers as processes.
type Comparison struct {
	Machines  int           `json:"machines"`
	BootDelay time.Duration `json:"bootDelay"`
	Ours      *Report       `json:"ours"`
	// FloorProviders is the contract-floor providers' run; nil until
	// measured, or when skipped.
	FloorProviders *Report `json:"floorProviders,omitempty"`
	Peer           *Report `json:"peer"`
	// Floor is the bare apiserver's time for our pipeline's objects; both
	// reports carry it too.
	Floor FloorReport `json:"floor"`
	// Upstream is Cluster API's creation of the Machines alone; nil until
	// measured, or when skipped.
	Upstream *UpstreamReport `json:"upstream,omitempty"`
}

// RunSideBySide runs ours, then the floor of our pipeline's objects, then
// the contract-floor providers, then the peer, then Cluster API alone, and
// hands the comparison to done after each stage (so a run cut short still
// leaves what it measured). A stage's report is nil until it finished.
// cfg.Bootstrap and cfg.Processes are ignored: every run has its providers
// as processes.
func RunSideBySide(ctx context.Context, cfg Config, done func(*Comparison)) (*Comparison, error) {
	if done == nil {
		done = func(*Comparison) {}
	}
	c := &Comparison{Machines: cfg.Machines, BootDelay: cfg.BootDelay}
	cfg.Processes = true
	cfg.Bootstrap = harness.BootstrapKairos
	ours, objs, err := run(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ours (Kairos): %w", err)
	}
	c.Ours = ours
	done(c)
	if !cfg.SkipFloor {
		cfg.defaults()
		cfg.progressf("measuring the floor of %d objects", len(objs))
		if c.Floor, err = measureFloor(ctx, objs, cfg.FloorWorkers); err != nil {
			return c, err
		}
		c.Ours.Floor = c.Floor
		done(c)
	}
	// The other runs' idle windows are not a target.
	if cfg.PeerIdleWindow >= 0 {
		cfg.IdleWindow = cfg.PeerIdleWindow
	}
	if !cfg.SkipFloorProviders {
		floorCfg := cfg
		floorCfg.floorProviders = true
		floorProviders, _, err := run(ctx, floorCfg)
		if err != nil {
			return c, fmt.Errorf("the contract-floor providers: %w", err)
		}
		c.FloorProviders = floorProviders
		c.FloorProviders.Floor = c.Floor
		done(c)
	}
	if !cfg.SkipPeer {
		cfg.Bootstrap = harness.BootstrapKubeadm
		peer, _, err := run(ctx, cfg)
		if err != nil {
			return c, fmt.Errorf("the peer (kubeadm): %w", err)
		}
		c.Peer = peer
		c.Peer.Floor = c.Floor
		done(c)
	}
	if !cfg.SkipUpstream {
		cfg.progressf("measuring Cluster API alone: %d Machines created with the providers stopped", cfg.Machines)
		if c.Upstream, err = runUpstream(ctx, cfg); err != nil {
			return c, fmt.Errorf("cluster API alone: %w", err)
		}
		done(c)
	}
	return c, nil
}

// Ratio is ours divided by the peer's; 0 when the peer's is zero.
func Ratio(ours, peer float64) float64 {
	if peer == 0 {
		return 0
	}
	return ours / peer
}

// BootstrapReadyRatios are ours/peer of creation → bootstrap data ready,
// p50 and p95.
func (c *Comparison) BootstrapReadyRatios() (p50, p95 float64) {
	return Ratio(float64(c.Ours.BootstrapReady.P50), float64(c.Peer.BootstrapReady.P50)),
		Ratio(float64(c.Ours.BootstrapReady.P95), float64(c.Peer.BootstrapReady.P95))
}

// WritesRatios are ours/peer of API writes per machine: the bootstrap
// provider alone, and the whole pipeline (Cluster API, both providers,
// event recorders).
func (c *Comparison) WritesRatios() (bootstrap, pipeline float64) {
	return Ratio(c.Ours.WritesPerMachine(requests.ComponentBootstrap), c.Peer.WritesPerMachine(requests.ComponentBootstrap)),
		Ratio(c.Ours.WritesPerMachine(pipelineWriters...), c.Peer.WritesPerMachine(pipelineWriters...))
}

// Target is one of the targets, assessed.
type Target struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Met    bool   `json:"met"`
}

// The bounds on each of our provider processes, and on our writes
// per machine above the contract-floor providers'.
const (
	rssLimitMiB             = 100
	cpuLimitMsPerMachine    = 15
	writesAboveFloorAllowed = 1
)

// Targets assesses the targets on this run. They are stated for
// 1000 machines; at fewer they are reported for this N.
func (c *Comparison) Targets() []Target {
	var out []Target
	o, f, p := c.Ours, c.FloorProviders, c.Peer
	if c.Floor.Duration > 0 {
		out = append(out, Target{
			Name:   "all Running within 2x the floor",
			Result: fmt.Sprintf("%s = %.1fx the floor (%s)%s", round(o.AllRunning), o.FloorMultiple(), round(c.Floor.Duration), c.upstreamNote()),
			Met:    o.FloorMultiple() <= 2,
		})
	}
	for _, name := range []components.Name{components.KairosBootstrap, components.Infrastructure} {
		u, ok := o.Usage(name)
		if !ok {
			continue
		}
		cpu := o.CPUMillisPerMachine(name)
		out = append(out, Target{
			Name:   fmt.Sprintf("CPU of the %s provider under %d ms per machine", name, cpuLimitMsPerMachine),
			Result: fmt.Sprintf("%.1f ms (%.1f s for %d machines)", cpu, u.CPUSeconds, o.Machines),
			Met:    cpu < cpuLimitMsPerMachine,
		}, Target{
			Name:   fmt.Sprintf("peak RSS of the %s provider under %d MiB", name, rssLimitMiB),
			Result: fmt.Sprintf("%.0f MiB", u.PeakRSSMiB),
			Met:    u.PeakRSSMiB < rssLimitMiB,
		})
	}
	if f != nil {
		for _, role := range []struct{ label, component string }{
			{"bootstrap", requests.ComponentBootstrap},
			{"infrastructure", requests.ComponentInfra},
		} {
			ow, fw := o.WritesPerMachine(role.component), f.WritesPerMachine(role.component)
			out = append(out, Target{
				Name:   fmt.Sprintf("%s provider writes per machine at most %d above the contract floor's", role.label, writesAboveFloorAllowed),
				Result: fmt.Sprintf("%.1f vs %.1f", ow, fw),
				Met:    ow <= fw+writesAboveFloorAllowed,
			})
		}
	}
	if p != nil {
		ob, pb := o.WritesPerMachine(requests.ComponentBootstrap), p.WritesPerMachine(requests.ComponentBootstrap)
		out = append(out, Target{
			Name:   "bootstrap provider writes per machine ≤ the peer's",
			Result: fmt.Sprintf("%.1f vs %.1f", ob, pb),
			Met:    ob <= pb,
		})
		op, pp := o.WritesPerMachine(pipelineWriters...), p.WritesPerMachine(pipelineWriters...)
		out = append(out, Target{
			Name:   "pipeline writes per machine ≤ the peer's",
			Result: fmt.Sprintf("%.1f vs %.1f", op, pp),
			Met:    op <= pp,
		})
	}
	if o.Idle.Window > 0 {
		out = append(out, Target{
			Name:   "no writes while idle",
			Result: fmt.Sprintf("%d of %d objects changed, %d controller writes in %s", len(o.Idle.Changed), o.Idle.Objects, sumCounts(o.Idle.Writes), o.Idle.Window),
			Met:    len(o.Idle.Changed) == 0 && len(o.Idle.Writes) == 0,
		})
	}
	out = append(out, Target{
		Name:   "zero client-side throttling",
		Result: fmt.Sprintf("%d requests waited > 50ms (max %s)", o.Throttling.Requests, round(o.Throttling.MaxWait)),
		Met:    o.Throttling.Requests == 0,
	})
	return out
}

// RunRatio is one measure of ours divided by another run's (the
// contract-floor providers' or the peer's) in the same side-by-side run.
type RunRatio struct {
	Name  string  `json:"name"`
	Ours  string  `json:"ours"`
	Other string  `json:"other"`
	Ratio float64 `json:"ratio"`
}

// FloorRatios are our time to all Running, and our providers' writes per
// machine, CPU and peak RSS, each against the contract-floor providers';
// nil without their run.
func (c *Comparison) FloorRatios() []RunRatio { return ratiosAgainst(c.Ours, c.FloorProviders) }

// PeerRatios are the same measures against the kubeadm peer's (whose
// infrastructure provider is ours); nil without its run.
func (c *Comparison) PeerRatios() []RunRatio { return ratiosAgainst(c.Ours, c.Peer) }

func ratiosAgainst(o, f *Report) []RunRatio {
	if o == nil || f == nil {
		return nil
	}
	out := []RunRatio{{
		Name: "all Machines Running", Ours: round(o.AllRunning).String(), Other: round(f.AllRunning).String(),
		Ratio: Ratio(float64(o.AllRunning), float64(f.AllRunning)),
	}}
	ob, oi := o.providerNames()
	fb, fi := f.providerNames()
	for _, role := range []struct {
		label, component string
		ours, other      components.Name
	}{
		{"bootstrap provider", requests.ComponentBootstrap, ob, fb},
		{"infrastructure provider", requests.ComponentInfra, oi, fi},
	} {
		ow, fw := o.WritesPerMachine(role.component), f.WritesPerMachine(role.component)
		ou, _ := o.Usage(role.ours)
		fu, _ := f.Usage(role.other)
		out = append(out,
			RunRatio{Name: role.label + ": writes per machine", Ours: fmt.Sprintf("%.1f", ow), Other: fmt.Sprintf("%.1f", fw), Ratio: Ratio(ow, fw)},
			RunRatio{
				Name: role.label + ": CPU ms per machine (scale-up)",
				Ours: fmt.Sprintf("%.1f", o.CPUMillisPerMachine(role.ours)), Other: fmt.Sprintf("%.1f", f.CPUMillisPerMachine(role.other)),
				Ratio: Ratio(ou.CPUSeconds, fu.CPUSeconds),
			},
			RunRatio{Name: role.label + ": peak RSS MiB", Ours: fmt.Sprintf("%.0f", ou.PeakRSSMiB), Other: fmt.Sprintf("%.0f", fu.PeakRSSMiB), Ratio: Ratio(ou.PeakRSSMiB, fu.PeakRSSMiB)},
		)
	}
	return out
}

// columns are the runs that finished, in the order they ran: ours, the
// contract-floor providers', the peer's.
func (c *Comparison) columns() []*Report {
	out := []*Report{c.Ours}
	for _, r := range []*Report{c.FloorProviders, c.Peer} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Markdown renders the comparison, the ratios, the targets and every run.
func (c *Comparison) Markdown() string {
	var b strings.Builder
	cols := c.columns()
	labels := make([]string, 0, len(cols))
	for _, r := range cols {
		labels = append(labels, r.Column())
	}
	fmt.Fprintf(&b, "## N = %d, boot delay %s: %s\n\n", c.Machines, c.BootDelay, strings.Join(labels, ", "))
	fmt.Fprintf(&b, "| measure | %s |\n|---|%s\n", strings.Join(labels, " | "), strings.Repeat("---|", len(cols)))
	row := func(measure string, value func(r *Report) string) {
		fmt.Fprintf(&b, "| %s |", measure)
		for _, r := range cols {
			fmt.Fprintf(&b, " %s |", value(r))
		}
		b.WriteString("\n")
	}
	row("all Machines Running", func(r *Report) string { return round(r.AllRunning).String() })
	row("all Machines created (Cluster API's MachineSet) / then to all Running", func(r *Report) string {
		return fmt.Sprintf("%s / %s", round(r.AllCreated), round(r.AfterLastCreated()))
	})
	row("creation → NodeHealthy p50 / p95 / p99 / max", func(r *Report) string { return r.NodeHealthy.String() })
	row("creation → bootstrap data ready p50 / p95 / p99 / max", func(r *Report) string { return r.BootstrapReady.String() })
	if c.Floor.Duration > 0 {
		row(fmt.Sprintf("all Running as a multiple of the floor (%s for %d objects)", round(c.Floor.Duration), c.Floor.Total), func(r *Report) string {
			return fmt.Sprintf("%.1fx", r.FloorMultiple())
		})
	}
	if c.Upstream != nil {
		row("Cluster API alone (providers stopped): all Machines created", func(r *Report) string {
			if r == c.Ours {
				return round(c.Upstream.AllCreated).String()
			}
			return ""
		})
	}
	for _, process := range []struct {
		label string
		name  func(r *Report) components.Name
	}{
		{"bootstrap provider process", func(r *Report) components.Name { n, _ := r.providerNames(); return n }},
		{"infrastructure provider process", func(r *Report) components.Name { _, n := r.providerNames(); return n }},
	} {
		row(process.label+": CPU s (scale-up) / ms per machine / peak RSS MiB", func(r *Report) string {
			u, _ := r.Usage(process.name(r))
			return fmt.Sprintf("%.1f / %.1f / %.0f", u.CPUSeconds, r.CPUMillisPerMachine(process.name(r)), u.PeakRSSMiB)
		})
	}
	row("bootstrap provider requests per machine (all verbs)", func(r *Report) string {
		return fmt.Sprintf("%.1f", sumValues(r.PerMachine(requests.ComponentBootstrap)))
	})
	row("bootstrap provider writes per machine", func(r *Report) string {
		return fmt.Sprintf("%.1f", r.WritesPerMachine(requests.ComponentBootstrap))
	})
	row("infrastructure provider writes per machine", func(r *Report) string {
		return fmt.Sprintf("%.1f", r.WritesPerMachine(requests.ComponentInfra))
	})
	row("pipeline writes per machine (Cluster API, providers, event recorders)", func(r *Report) string {
		return fmt.Sprintf("%.1f", r.WritesPerMachine(pipelineWriters...))
	})
	row("client-side throttling (requests > 50ms)", func(r *Report) string { return fmt.Sprintf("%d", r.Throttling.Requests) })
	row("idle: objects changed / controller writes", func(r *Report) string {
		return fmt.Sprintf("%d of %d / %d", len(r.Idle.Changed), r.Idle.Objects, sumCounts(r.Idle.Writes))
	})
	if ratios := c.FloorRatios(); len(ratios) > 0 {
		b.WriteString("\nOurs against the contract-floor providers:\n\n| measure | ours | contract floor | ours / floor |\n|---|---|---|---|\n")
		for _, r := range ratios {
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f |\n", r.Name, r.Ours, r.Other, r.Ratio)
		}
	}
	if c.Peer != nil {
		p50, p95 := c.BootstrapReadyRatios()
		wb, wp := c.WritesRatios()
		b.WriteString("\nRatios, ours / peer:\n\n| ratio | value |\n|---|---|\n")
		fmt.Fprintf(&b, "| bootstrap data ready p50 | %.2f |\n| bootstrap data ready p95 | %.2f |\n", p50, p95)
		fmt.Fprintf(&b, "| writes per machine, bootstrap provider | %.2f |\n| writes per machine, pipeline | %.2f |\n", wb, wp)
		for _, r := range c.PeerRatios() {
			if strings.Contains(r.Name, "CPU") || strings.Contains(r.Name, "RSS") {
				fmt.Fprintf(&b, "| %s (ours %s, peer %s) | %.2f |\n", r.Name, r.Ours, r.Other, r.Ratio)
			}
		}
	}
	b.WriteString("\nTargets (stated for N = 1000):\n\n| target | this run | met |\n|---|---|---|\n")
	for _, t := range c.Targets() {
		met := "no"
		if t.Met {
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, t.Result, met)
	}
	for _, r := range cols {
		b.WriteString("\n")
		b.WriteString(r.Markdown())
	}
	return b.String()
}

// upstreamNote says, for the floor target, how long Cluster API alone took
// to create the Machines.
func (c *Comparison) upstreamNote() string {
	if c.Upstream == nil {
		return ""
	}
	return fmt.Sprintf("; Cluster API alone created the %d Machines in %s = %.1fx the floor", c.Upstream.Machines, round(c.Upstream.AllCreated), c.Upstream.Multiple(c.Floor))
}

func sumValues(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}
