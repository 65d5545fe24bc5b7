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
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// ProcessUsage is the CPU one process used over the scale-up and its peak
// resident memory up to the end of the idle window.
type ProcessUsage struct {
	Name string `json:"name"`
	// Component is set for a provider process (test/harness/components).
	Component  string  `json:"component,omitempty"`
	PID        int     `json:"pid"`
	CPUSeconds float64 `json:"cpuSeconds"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc/<pid>/stat.
const clockTicks = 100

// processUsage reads the benchmark process (Cluster API, the webhooks, the
// simulators, and the providers unless they run as processes) and its
// child processes (the provider processes, named by names, the apiservers,
// etcd and kube-controller-manager).
func processUsage(names map[int]components.Name) (map[int]ProcessUsage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return nil, fmt.Errorf("reading this process's resource usage: %w", err)
	}
	self := os.Getpid()
	name := "benchmark process (Cluster API, webhooks, simulators, providers)"
	if len(names) > 0 {
		name = "benchmark process (Cluster API, webhooks, simulators)"
	}
	out := map[int]ProcessUsage{self: {
		Name:       name,
		PID:        self,
		CPUSeconds: tv(ru.Utime) + tv(ru.Stime),
		PeakRSSMiB: float64(ru.Maxrss) / 1024, // KiB on Linux
	}}
	for _, pid := range children(self) {
		if u, err := readProc(pid); err == nil {
			if n, ok := names[pid]; ok {
				u.Name, u.Component = string(n)+" provider process", string(n)
			}
			out[pid] = u
		}
	}
	return out, nil
}

func tv(t syscall.Timeval) float64 {
	return float64(t.Sec) + float64(t.Usec)/1e6
}

// children lists the direct child processes of pid.
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, f := range tasks {
		raw, err := os.ReadFile(f) //nolint:gosec // A /proc children file of a process the benchmark started.
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(raw)) {
			if p, err := strconv.Atoi(field); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

func readProc(pid int) (ProcessUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcessUsage{}, err
	}
	// The command sits in parentheses and may hold spaces; the fields
	// after it are numbered from 3 (state).
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return ProcessUsage{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 13 {
		return ProcessUsage{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	u := ProcessUsage{Name: s[open+1 : end], PID: pid, CPUSeconds: (utime + stime) / clockTicks}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcessUsage{}, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			u.PeakRSSMiB = kib / 1024
		}
	}
	return u, nil
}

// usageDelta is the CPU each process used between the first two readings
// (processes that started in between count from zero) and its peak RSS at
// the last.
func usageDelta(before, after, end map[int]ProcessUsage) []ProcessUsage {
	out := make([]ProcessUsage, 0, len(after))
	for pid, a := range after {
		a.CPUSeconds -= before[pid].CPUSeconds
		if e, ok := end[pid]; ok {
			a.PeakRSSMiB = max(a.PeakRSSMiB, e.PeakRSSMiB)
		}
		out = append(out, a)
	}
	// In start order: the benchmark, then the management apiserver's
	// processes, then the workload cluster's.
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}
