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
	"errors"
	"fmt"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/cluster-api-workers/test/harness"
)

// UpstreamReport is how long Cluster API alone takes to create the pool's
// Machines: the same harness and pool as ours, with both provider
// processes stopped (SIGSTOP) once the template is resolved, so nothing
// but Cluster API and the apiserver (with every webhook) works while its
// MachineSet creates each Machine with its bootstrap config and
// infrastructure machine. No provider can make a pool run sooner than
// this.
type UpstreamReport struct {
	Machines int `json:"machines"`
	// AllCreated is the time from the scale-up to the last Machine's
	// creation.
	AllCreated time.Duration `json:"allCreated"`
}

// Multiple is AllCreated as a multiple of the floor; 0 without a floor.
func (u *UpstreamReport) Multiple(floor FloorReport) float64 {
	if u == nil || floor.Duration == 0 {
		return 0
	}
	return float64(u.AllCreated) / float64(floor.Duration)
}

// runUpstream measures UpstreamReport for cfg.Machines Kairos machines.
func runUpstream(ctx context.Context, cfg Config) (*UpstreamReport, error) {
	cfg.defaults()
	cfg.Processes = true
	cfg.Bootstrap = harness.BootstrapKairos
	cfg.upstreamOnly = true
	report, _, err := run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &UpstreamReport{Machines: cfg.Machines, AllCreated: report.AllCreated}, nil
}

// stopProviders stops the harness's provider processes until the returned
// function continues them.
func stopProviders(h *harness.Harness) (resume func(), err error) {
	var stopped []int
	resume = func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	processes := h.Processes()
	if len(processes) == 0 {
		return resume, errors.New("the providers do not run as processes")
	}
	for _, p := range processes {
		if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
			resume()
			return func() {}, fmt.Errorf("stopping the %s provider process %d: %w", p.Name, p.PID, err)
		}
		stopped = append(stopped, p.PID)
	}
	return resume, nil
}

// waitCreated waits until the watch saw n Machines.
func (mw *machineWatcher) waitCreated(ctx context.Context, cfg Config, start time.Time) error {
	n := cfg.Machines
	var seen int
	lastReport := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		mw.mu.Lock()
		defer mw.mu.Unlock()
		seen = len(mw.machines)
		if time.Since(lastReport) >= 30*time.Second {
			lastReport = time.Now()
			cfg.progressf("%s into the scale-up: %d Machines exist", round(time.Since(start)), seen)
		}
		return seen >= n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d Machines to be created (%d are): %w", n, seen, err)
	}
	return nil
}
