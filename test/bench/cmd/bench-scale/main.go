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

// Command bench-scale runs one side-by-side scale benchmark
// (test/bench/scale): the Kairos pool, the floor, the same pool with the
// contract-floor providers, then with the kubeadm peer, at the same N, each
// with the providers as processes, then Cluster API alone. It prints the
// comparison as Markdown; -json also writes it as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cozystack/cluster-api-workers/test/bench/scale"
)

func main() {
	var cfg scale.Config
	flag.IntVar(&cfg.Machines, "machines", 10, "N, the replicas the MachineDeployment scales to")
	flag.DurationVar(&cfg.BootDelay, "boot-delay", 0, "simulated VM boot delay; 0 measures the control plane alone")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "how long the scale-up may take")
	flag.DurationVar(&cfg.Quiet, "quiet", 15*time.Second, "how long the controllers must not write before the pool counts as settled")
	flag.DurationVar(&cfg.SettleTimeout, "settle-timeout", 2*time.Minute, "how long the controllers may still write after all Machines run")
	flag.DurationVar(&cfg.IdleWindow, "idle", 2*time.Minute, "how long resourceVersions must stay unchanged after the pool settled")
	flag.DurationVar(&cfg.PeerIdleWindow, "peer-idle", -1, "the peer's idle window; -idle's when negative, none when 0")
	flag.IntVar(&cfg.FloorWorkers, "floor-workers", 10, "parallel clients writing the floor's objects")
	flag.BoolVar(&cfg.SkipUpstream, "skip-upstream", false, "do not measure how long Cluster API alone (providers stopped) takes to create the Machines")
	flag.BoolVar(&cfg.SkipFloorProviders, "skip-floor-providers", false, "do not run the pool with the contract-floor providers (test/bench/floor)")
	flag.BoolVar(&cfg.SkipPeer, "skip-peer", false, "do not run the pool with Cluster API's kubeadm bootstrap provider")
	flag.StringVar(&cfg.ProcessLogDir, "process-logs", "", "keep the provider processes' logs in this directory (kairos/, floor/, kubeadm/)")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file (after each stage)")
	partialOut := flag.String("partial", "", "write the Markdown of the stages done so far to this file after each stage")
	flag.Parse()
	if err := run(cfg, *jsonOut, *partialOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

// run runs the benchmark until it ends or SIGINT or SIGTERM, and prints its
// report.
func run(cfg scale.Config, jsonOut, partialOut string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	cfg.Progress = os.Stderr
	// Each stage's results are written as soon as they exist, so a run cut
	// short (a closing time window, a timeout) keeps them.
	save := func(c *scale.Comparison) {
		if partialOut != "" {
			//nolint:gosec // A report for people to read and share.
			if err := os.WriteFile(partialOut, []byte(c.Markdown()), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "bench-scale:", err)
			}
		}
		if jsonOut != "" {
			raw, err := json.MarshalIndent(c, "", "  ")
			if err == nil {
				err = os.WriteFile(jsonOut, raw, 0o644) //nolint:gosec // A report for people to read and share.
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench-scale:", err)
			}
		}
	}
	report, err := scale.RunSideBySide(ctx, cfg, save)
	if err != nil {
		return err
	}
	fmt.Print(report.Markdown())
	return nil
}
