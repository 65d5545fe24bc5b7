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

// Command sandbox runs the Kairos bootstrap provider and the KubeVirt
// infrastructure provider inside upstream Cluster API on this machine, with
// no cluster, container runtime or network: an embedded management
// kube-apiserver, a workload kube-apiserver standing in for a hosted control
// plane, Cluster API's controllers, both providers, and simulated KubeVirt,
// CDI and Kairos guests. It applies the example Kairos pool from
// templates/cluster-template-kairos.yaml, shows the machines by phase until
// they join, and writes kubeconfigs so kubectl and clusterctl can look
// around. Ctrl-C stops it; --once exits 0 once the pool has joined.
//
//	go run ./cmd/sandbox            # or: make sandbox
//	go run ./cmd/sandbox --once
//
// See docs/sandbox.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if err := runUntilSignal(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}

// runUntilSignal runs the sandbox until SIGINT or SIGTERM.
func runUntilSignal() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdout)
}
