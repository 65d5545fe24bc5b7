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

package faults

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestKlogTime(t *testing.T) {
	year := time.Now().Year()
	for _, tc := range []struct {
		line string
		want time.Time
		ok   bool
	}{
		{`E1202 01:54:39.996687   22996 runtime.go:243] "Failed to watch"`, time.Date(year, 12, 2, 1, 54, 39, 996687000, time.Local), true},
		{`I0101 00:00:00.000001   1 main.go:1] "Started"`, time.Date(year, 1, 1, 0, 0, 0, 1000, time.Local), true},
		{"\t[listing KubernetesNodes: nodes is forbidden]", time.Time{}, false},
		{"", time.Time{}, false},
		{`X1202 01:54:39.996687   1 a.go:1] "not a level"`, time.Time{}, false},
	} {
		got, ok := klogTime(tc.line)
		NewWithT(t).Expect(ok).To(Equal(tc.ok), tc.line)
		NewWithT(t).Expect(got.Equal(tc.want)).To(BeTrue(), "%q: got %s", tc.line, got)
	}
}
