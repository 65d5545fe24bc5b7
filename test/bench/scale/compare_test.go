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
// the contract-floor providers on made-up runs of 100 machines: ratios of
// time, writes, CPU and RSS, and the per-provider targets.
func TestFloorProvidersComparison(t *testing.T) {
	g := NewWithT(t)
	write := func(component, resource string, count int) requests.RequestCount {
		return requests.RequestCount{RequestKey: requests.RequestKey{Component: component, Cluster: "management", Verb: "create", Resource: resource}, Count: count}
	}
	ours := &Report{
		Machines: 100, AllRunning: 40 * time.Second,
		Requests: []requests.RequestCount{write(requests.ComponentBootstrap, "secrets", 300), write(requests.ComponentInfra, "virtualmachines", 400)},
		Resources: []ProcessUsage{
			{Name: "kairos-bootstrap provider process", Component: string(components.KairosBootstrap), CPUSeconds: 1.0, PeakRSSMiB: 60},
			{Name: "infrastructure provider process", Component: string(components.Infrastructure), CPUSeconds: 2.0, PeakRSSMiB: 120},
		},
	}
	floorRun := &Report{
		Machines: 100, AllRunning: 20 * time.Second, FloorProviders: true,
		Requests: []requests.RequestCount{write(requests.ComponentBootstrap, "secrets", 200), write(requests.ComponentInfra, "virtualmachines", 200)},
		Resources: []ProcessUsage{
			{Name: "floor-bootstrap provider process", Component: floor.BootstrapName, CPUSeconds: 0.5, PeakRSSMiB: 40},
			{Name: "floor-infrastructure provider process", Component: floor.InfrastructureName, CPUSeconds: 0.5, PeakRSSMiB: 40},
		},
	}
	c := &Comparison{Machines: 100, Ours: ours, FloorProviders: floorRun}

	ratios := map[string]float64{}
	for _, r := range c.FloorRatios() {
		ratios[r.Name] = r.Ratio
	}
	g.Expect(ratios).To(Equal(map[string]float64{
		"all Machines Running":                                   2,
		"bootstrap provider: writes per machine":                 1.5,
		"bootstrap provider: CPU ms per machine (scale-up)":      2,
		"bootstrap provider: peak RSS MiB":                       1.5,
		"infrastructure provider: writes per machine":            2,
		"infrastructure provider: CPU ms per machine (scale-up)": 4,
		"infrastructure provider: peak RSS MiB":                  3,
	}))

	met := map[string]bool{}
	for _, target := range c.Targets() {
		met[target.Name] = target.Met
	}
	// Bootstrap: 3.0 writes against the floor's 2.0, 10 ms per machine,
	// 60 MiB; infrastructure: 4.0 against 2.0, 20 ms, 120 MiB.
	g.Expect(met).To(HaveKeyWithValue("bootstrap provider writes per machine at most 1 above the contract floor's", true))
	g.Expect(met).To(HaveKeyWithValue("infrastructure provider writes per machine at most 1 above the contract floor's", false))
	g.Expect(met).To(HaveKeyWithValue("CPU of the kairos-bootstrap provider under 15 ms per machine", true))
	g.Expect(met).To(HaveKeyWithValue("CPU of the infrastructure provider under 15 ms per machine", false))
	g.Expect(met).To(HaveKeyWithValue("peak RSS of the kairos-bootstrap provider under 100 MiB", true))
	g.Expect(met).To(HaveKeyWithValue("peak RSS of the infrastructure provider under 100 MiB", false))

	md := c.Markdown()
	g.Expect(md).To(ContainSubstring("## N = 100, boot delay 0s: Kairos (ours), contract floor\n"))
	g.Expect(md).To(ContainSubstring("| bootstrap provider: writes per machine | 3.0 | 2.0 | 1.50 |"))
	g.Expect(md).To(ContainSubstring("### contract-floor providers: N = 100"))
	g.Expect(md).NotTo(ContainSubstring("Ratios, ours / peer"))

	// Against the peer: its bootstrap provider is Cluster API's, its
	// infrastructure provider ours.
	c.Peer = &Report{
		Machines: 100, AllRunning: 50 * time.Second, Bootstrap: harness.BootstrapKubeadm,
		Requests: []requests.RequestCount{write(requests.ComponentBootstrap, "secrets", 400), write(requests.ComponentInfra, "virtualmachines", 400)},
		Resources: []ProcessUsage{
			{Name: "kubeadm-bootstrap provider process", Component: string(components.KubeadmBootstrap), CPUSeconds: 2.0, PeakRSSMiB: 80},
			{Name: "infrastructure provider process", Component: string(components.Infrastructure), CPUSeconds: 2.0, PeakRSSMiB: 100},
		},
	}
	ratios = map[string]float64{}
	for _, r := range c.PeerRatios() {
		ratios[r.Name] = r.Ratio
	}
	g.Expect(ratios).To(Equal(map[string]float64{
		"all Machines Running":                                   0.8,
		"bootstrap provider: writes per machine":                 0.75,
		"bootstrap provider: CPU ms per machine (scale-up)":      0.5,
		"bootstrap provider: peak RSS MiB":                       0.75,
		"infrastructure provider: writes per machine":            1,
		"infrastructure provider: CPU ms per machine (scale-up)": 1,
		"infrastructure provider: peak RSS MiB":                  1.2,
	}))
	g.Expect(c.Markdown()).To(ContainSubstring("| bootstrap provider: CPU ms per machine (scale-up) (ours 10.0, peer 20.0) | 0.50 |"))
}
