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

package cloudconfig

import (
	"syscall"
	"testing"
	"time"
)

// BenchmarkRender measures one render of a realistic worker: SSH key,
// labels, taints, kubelet flags and three files. The aim is under 200 µs.
// Besides wall time it reports the process CPU time per render, which
// stays meaningful when other work shares the machine.
func BenchmarkRender(b *testing.B) {
	cases := goldenCases()
	in := cases["labels-and-taints"]
	in.SSHAuthorizedKey = testSSHKey
	in.Files = cases["extra-files"].Files
	benchmarkRender(b, in)
}

// BenchmarkRenderMinimal measures the smallest join: no key, labels or
// files.
func BenchmarkRenderMinimal(b *testing.B) {
	benchmarkRender(b, minimalInput())
}

// BenchmarkRenderClusterProvider measures the cluster-block rendering.
func BenchmarkRenderClusterProvider(b *testing.B) {
	benchmarkRender(b, goldenCases()["fixed-custom-image"])
}

func benchmarkRender(b *testing.B, in Input) {
	b.Helper()
	b.ReportAllocs()
	start := cpuTime(b)
	n := 0
	for b.Loop() {
		if _, err := Render(in); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(n), "cpu-ns/op")
}

func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
