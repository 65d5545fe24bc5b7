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

// Package faults scales a Kairos pool to ten machines while real processes
// fail: each provider killed with SIGKILL at random points and started
// again, the management apiserver killed and restarted, the workload
// apiserver down for longer than the bootstrap token TTL, and the
// providers' webhooks unreachable. Afterwards every Machine must have
// joined, with no duplicate VM, token or Secret, no token left in the
// workload cluster and nothing left behind. The providers run as their own
// processes (test/harness/cmd/component) under the identities their
// ClusterRoles grant.
//
// Every fault is drawn from a seed; -faults.seeds picks them (CI runs one
// seed of each fault) and -faults.report writes the figures as Markdown
// (docs/testing.md holds a run's).
package faults

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/logcap"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
)

// platformImage is the Kairos disk of the platform's v1.36 minor, and what
// the node simulator boots from it.
const platformImage = "registry.example.com/cozystack/kairos-worker@sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"

// tokenTTL is the bootstrap token lifetime the provider runs with: the
// shortest its flag accepts, so that an outage can outlast it.
const tokenTTL = time.Minute

var (
	h         *harness.Harness
	verbose   = flag.Bool("harness.log", false, "print the in-process controllers' logs")
	seeds     = flag.String("faults.seeds", envOr("FAULT_SEEDS", "1"), "comma-separated seeds; every fault runs once per seed (FAULT_SEEDS)")
	report    = flag.String("faults.report", os.Getenv("FAULT_REPORT"), "write the figures as a Markdown table to this file (FAULT_REPORT)")
	artifacts = flag.String("faults.artifacts", os.Getenv("FAULT_ARTIFACTS"), "keep every component's log in this directory: harness.log (the in-process components), providers/ and kubevirt/ (FAULT_ARTIFACTS)")
	logDir    string

	resultsMu sync.Mutex
	results   []result
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The in-process components' lines and, at the end, every line of the
	// providers' processes (all their lives) are read for tokens, private
	// keys and bootstrap data.
	scanner, log, closeLog, err := harness.NewSuiteLogScanner(*verbose, *artifacts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "opening the suite's log:", err)
		return 1
	}
	defer closeLog()
	opts := harness.Options{
		Logger:        log,
		WorkerClasses: true,
		Processes:     true,
		// Both logging paths of the providers (controller-runtime's
		// logger and client-go's request logging) at the highest
		// verbosity the managers accept, so the scan reads everything
		// they can ever log.
		ProcessVerbosity:  logcap.MaxVerbosity,
		BootstrapTokenTTL: tokenTTL,
		Images: map[string]nodesim.Image{
			platformImage: {KubernetesVersion: "v1.36.3", OSImage: "Kairos v3.5.3 (Ubuntu 24.04)"},
		},
	}
	if *artifacts != "" {
		logDir = filepath.Join(*artifacts, "providers")
		opts.Infra.KubeVirt.LogDir = filepath.Join(*artifacts, "kubevirt")
	} else {
		if logDir, err = os.MkdirTemp("", "faults-providers-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(logDir) }()
	}
	defer func() {
		for _, p := range []components.Name{components.KairosBootstrap, components.Infrastructure} {
			if err := scanFile(scanner, string(p), filepath.Join(logDir, string(p)+".log")); err != nil {
				fmt.Fprintf(os.Stderr, "FAIL: scanning the %s log: %v\n", p, err)
				code = 1
			}
			// A quiet log passes any scan: the providers' request lines
			// (client-go's, from -v=6) prove the scan read their highest
			// verbosity.
			if n := scanner.RequestLines(string(p)); n == 0 && h != nil {
				fmt.Fprintf(os.Stderr, "FAIL: the %s log has no line of client-go's request logging: it did not run at -v=%d\n", p, logcap.MaxVerbosity)
				code = 1
			} else {
				fmt.Fprintf(os.Stderr, "scanned the %s log: %d lines of client-go's request logging\n", p, n)
			}
		}
		if scanner.Report(os.Stderr) {
			code = 1
		}
	}()
	opts.ProcessLogDir = logDir
	h, err = harness.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the harness:", err)
		return 1
	}
	defer func() {
		if err := h.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the harness:", err)
		}
	}()
	if err := h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: "v1.36.3"}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: platformImage}}
	}); err != nil {
		fmt.Fprintln(os.Stderr, "configuring the platform:", err)
		return 1
	}
	code = m.Run()
	table := markdown(results)
	fmt.Fprintln(os.Stderr, table)
	if *report != "" {
		if err := os.WriteFile(*report, []byte(table), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "writing the report:", err)
			return 1
		}
	}
	return code
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// scanFile feeds a provider process's log to the scanner, line by line.
func scanFile(s *harness.LogScanner, name, path string) error {
	f, err := os.Open(path) //nolint:gosec // A file of the repository or one the harness wrote.
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	// A message of several lines has klog's header on its first only.
	var at time.Time
	for lines.Scan() {
		line := lines.Text()
		if t, ok := klogTime(line); ok {
			at = t
		}
		if duringRestart(at) {
			s.ScanDuringRestart(name, line)
		} else {
			s.Scan(name, line)
		}
	}
	return lines.Err()
}

// klogTime reads the time of a klog header ("E1202 01:54:39.996687 ...");
// the header has no year: this one's is taken.
func klogTime(line string) (time.Time, bool) {
	if len(line) < 21 || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	return at.AddDate(time.Now().Year(), 0, 0), true
}

// restarts are when the management apiserver was down or had just come
// back (restartGrace after it was ready).
var (
	restartsMu sync.Mutex
	restarts   [][2]time.Time
)

// restartGrace is how long after a restarted apiserver reports ready its
// authorizer may still refuse requests.
const restartGrace = 15 * time.Second

func recordRestart(from, ready time.Time) {
	restartsMu.Lock()
	defer restartsMu.Unlock()
	restarts = append(restarts, [2]time.Time{from, ready.Add(restartGrace)})
}

// duringRestart reports whether a line logged at this time was written
// during a management apiserver restart.
func duringRestart(at time.Time) bool {
	restartsMu.Lock()
	defer restartsMu.Unlock()
	for _, r := range restarts {
		if !at.Before(r[0]) && !at.After(r[1]) {
			return true
		}
	}
	return false
}

// seedList parses -faults.seeds.
func seedList(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, f := range strings.Split(*seeds, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("-faults.seeds: %q is not a number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		t.Fatal("-faults.seeds names no seed")
	}
	return out
}

// result is one scenario's figures.
type result struct {
	Fault string
	Seed  int64
	// Injected are the faults, in order; Recovered is whether the pool
	// converged afterwards.
	Injected  []string
	Recovered bool
	// ToJoined runs from the pool's creation to every Machine joined;
	// AfterLastFault from the end of the last fault.
	ToJoined, AfterLastFault time.Duration
	// Replaced counts Machines that were created beyond the pool's size
	// (remediations).
	Replaced int
	// SlowestInstance is the longest a VirtualMachine of the converged
	// pool waited for its instance.
	SlowestInstance time.Duration
}

func record(r result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}

func markdown(rs []result) string {
	sorted := append([]result(nil), rs...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Fault != sorted[j].Fault {
			return sorted[i].Fault < sorted[j].Fault
		}
		return sorted[i].Seed < sorted[j].Seed
	})
	var b strings.Builder
	b.WriteString("| fault | seed | faults injected | recovered | all joined after creation | converged after the last fault | Machines replaced | slowest VM to instance |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range sorted {
		injected := "none"
		if len(r.Injected) > 0 {
			injected = fmt.Sprintf("%d: %s", len(r.Injected), strings.Join(r.Injected, "; "))
		}
		recovered, joined, after, slowest := "no", "-", "-", "-"
		if r.Recovered {
			recovered = "yes"
			joined = r.ToJoined.Round(time.Second).String()
			after = r.AfterLastFault.Round(time.Second).String()
			slowest = r.SlowestInstance.Round(time.Second).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d | %s |\n", r.Fault, r.Seed, injected, recovered, joined, after, r.Replaced, slowest)
	}
	return b.String()
}
