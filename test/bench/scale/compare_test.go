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
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cozystack/cluster-api-workers/test/bench/floor"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// TestFloorProvidersComparison checks the arithmetic of the comparison with
// the contract-floor providers and the peer on made-up runs of 100
// machines: ratios of time, writes, CPU and RSS, and the scale targets.
func TestFloorProvidersComparison(t *testing.T) {
	g := NewWithT(t)
	write := func(component, resource string, count int) requests.RequestCount {
		return requests.RequestCount{RequestKey: requests.RequestKey{Component: component, Cluster: "management", Verb: "create", Resource: resource}, Count: count}
	}
	ours := &Report{
		Machines: 100, AllRunning: 40 * time.Second,
		BootstrapReady: Percentiles{P50: 4 * time.Second, P95: 6 * time.Second},
		Requests:       []requests.RequestCount{write(requests.ComponentBootstrap, "secrets", 300), write(requests.ComponentInfra, "virtualmachines", 1300)},
		Resources: []ProcessUsage{
			{Name: "kairos-bootstrap provider process", Component: string(components.KairosBootstrap), CPUSeconds: 1.0, PeakRSSMiB: 60},
			{Name: "infrastructure provider process", Component: string(components.Infrastructure), CPUSeconds: 2.0, PeakRSSMiB: 120},
		},
	}
	floorRun := &Report{
		Machines: 100, AllRunning: 20 * time.Second, FloorProviders: true,
		BootstrapReady: Percentiles{P50: 2 * time.Second, P95: 5 * time.Second},
		Requests:       []requests.RequestCount{write(requests.ComponentBootstrap, "secrets", 200), write(requests.ComponentInfra, "virtualmachines", 200)},
		Resources: []ProcessUsage{
			{Name: "floor-bootstrap provider process", Component: floor.BootstrapName, CPUSeconds: 0.5, PeakRSSMiB: 40},
			{Name: "floor-infrastructure provider process", Component: floor.InfrastructureName, CPUSeconds: 0.5, PeakRSSMiB: 40},
		},
	}
	c := &Comparison{Machines: 100, Ours: ours, FloorProviders: floorRun}

	g.Expect(byName(c.FloorRatios())).To(Equal(map[string]float64{
		"all Machines Running":                                   2,
		"creation → bootstrap data ready p50":                    2,
		"creation → bootstrap data ready p95":                    1.2,
		"pipeline writes per machine":                            4,
		"bootstrap provider: writes per machine":                 1.5,
		"bootstrap provider: CPU ms per machine (scale-up)":      2,
		"bootstrap provider: peak RSS MiB":                       1.5,
		"infrastructure provider: writes per machine":            6.5,
		"infrastructure provider: CPU ms per machine (scale-up)": 4,
		"infrastructure provider: peak RSS MiB":                  3,
	}))

	met := func() map[string]bool {
		out := map[string]bool{}
		for _, target := range c.Targets() {
			out[target.Name] = target.Met
		}
		return out
	}
	// Bootstrap: 3.0 writes (budget 11), 10 ms per machine against 5,
	// 60 MiB against 40; infrastructure: 13.0 writes (budget 12), 20 ms
	// against 5, 120 MiB against 40.
	g.Expect(met()).To(Equal(map[string]bool{
		"creation → bootstrap data ready p50 within 1.3x the contract floor's":       false,
		"creation → bootstrap data ready p95 within 1.3x the contract floor's":       true,
		"all Machines Running within 1.25x the contract floor's":                     false,
		"bootstrap provider's CPU per machine within 1.3x the contract floor's":      false,
		"bootstrap provider's peak RSS within 1.2x the contract floor's":             false,
		"infrastructure provider's CPU per machine within 1.3x the contract floor's": false,
		"infrastructure provider's peak RSS within 1.2x the contract floor's":        false,
		"bootstrap provider's writes per machine within its budget of 11":            true,
		"infrastructure provider's writes per machine within its budget of 12":       false,
		"zero client-side throttling":                                                true,
	}))

	md := c.Markdown()
	g.Expect(md).To(ContainSubstring("## N = 100, boot delay 0s: Kairos (ours), contract floor\n"))
	g.Expect(md).To(ContainSubstring("| bootstrap provider: writes per machine | 3.0 | 2.0 | 1.50 |"))
	g.Expect(md).To(ContainSubstring("| creation → bootstrap data ready p50 within 1.3x the contract floor's | 4s against 2s = 2.00x | no |"))
	g.Expect(md).To(ContainSubstring("### contract-floor providers: N = 100"))
	g.Expect(md).NotTo(ContainSubstring("Ours against the kubeadm peer"))

	// While idle, Cluster API's late writes and the simulators' are not
	// held against our providers; a write of theirs or a change to one of
	// our objects is.
	idleTarget := "our providers write nothing and none of our objects changes while idle"
	ours.Idle = IdleReport{Window: time.Second, Objects: 3, Changed: []string{"Machine ns/m"}, Writes: []requests.RequestCount{write(requests.ComponentCAPI, "machines", 1)}}
	g.Expect(met()).To(HaveKeyWithValue(idleTarget, true))
	ours.Idle.Changed = append(ours.Idle.Changed, "KubeVirtMachine ns/m")
	g.Expect(ours.Idle.OursChanged()).To(Equal([]string{"KubeVirtMachine ns/m"}))
	g.Expect(met()).To(HaveKeyWithValue(idleTarget, false))
	ours.Idle.Changed = nil
	ours.Idle.Writes = append(ours.Idle.Writes, write(requests.ComponentInfra, "kubevirtmachines", 1))
	g.Expect(ours.Idle.OursWrites()).To(Equal([]requests.RequestCount{write(requests.ComponentInfra, "kubevirtmachines", 1)}))
	g.Expect(met()).To(HaveKeyWithValue(idleTarget, false))
	ours.Idle = IdleReport{}

	// A stray repeat on a few machines stays within the budget; a write
	// every machine makes does not.
	g.Expect(WithinWritesBudget(requests.ComponentBootstrap, 11.001)).To(BeTrue())
	g.Expect(WithinWritesBudget(requests.ComponentBootstrap, 12)).To(BeFalse())

	// Against the peer: its bootstrap provider is Cluster API's, its
	// infrastructure provider ours.
	c.Peer = &Report{
		Machines: 100, AllRunning: 50 * time.Second, Bootstrap: harness.BootstrapKubeadm,
		BootstrapReady: Percentiles{P50: 5 * time.Second, P95: 6 * time.Second},
		Requests:       []requests.RequestCount{write(requests.ComponentBootstrap, "secrets", 400), write(requests.ComponentInfra, "virtualmachines", 1200)},
		Resources: []ProcessUsage{
			{Name: "kubeadm-bootstrap provider process", Component: string(components.KubeadmBootstrap), CPUSeconds: 2.0, PeakRSSMiB: 80},
			{Name: "infrastructure provider process", Component: string(components.Infrastructure), CPUSeconds: 2.0, PeakRSSMiB: 100},
		},
	}
	g.Expect(byName(c.PeerRatios())).To(Equal(map[string]float64{
		"all Machines Running":                                   0.8,
		"creation → bootstrap data ready p50":                    0.8,
		"creation → bootstrap data ready p95":                    1,
		"pipeline writes per machine":                            1,
		"bootstrap provider: writes per machine":                 0.75,
		"bootstrap provider: CPU ms per machine (scale-up)":      0.5,
		"bootstrap provider: peak RSS MiB":                       0.75,
		"infrastructure provider: writes per machine":            13.0 / 12,
		"infrastructure provider: CPU ms per machine (scale-up)": 1,
		"infrastructure provider: peak RSS MiB":                  1.2,
	}))
	// Below the peer: the p50 and the bootstrap provider's RSS; the p95
	// is equal, which is not below.
	g.Expect(met()).To(And(
		HaveKeyWithValue("creation → bootstrap data ready p50 below the peer's", true),
		HaveKeyWithValue("creation → bootstrap data ready p95 below the peer's", false),
		HaveKeyWithValue("bootstrap provider's peak RSS below the peer's", true),
	))
	g.Expect(c.Markdown()).To(ContainSubstring("| bootstrap provider: CPU ms per machine (scale-up) | 10.0 | 20.0 | 0.50 |"))
}

// byName is each ratio by its measure's name.
func byName(ratios []RunRatio) map[string]float64 {
	out := map[string]float64{}
	for _, r := range ratios {
		out[r.Name] = r.Ratio
	}
	return out
}
