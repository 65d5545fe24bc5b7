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

package qemu

import (
	"slices"
	"testing"
)

// TestKernelArgs checks the guest's command line for both disks: the
// Debian disk's root device, and a Kairos disk's own command line with no
// root device of the runner's, its panic= overridden so that a panic ends
// QEMU, and the scenario's arguments last.
func TestKernelArgs(t *testing.T) {
	for name, tc := range map[string]struct {
		opts VMOptions
		want []string
	}{
		"debian disk": {
			opts: VMOptions{KernelArgs: []string{"rootdelay=20"}},
			want: []string{"root=/dev/vda", "rw", "console=ttyS0", "panic=-1", "rootdelay=20"},
		},
		"disk with its own command line": {
			opts: VMOptions{
				Disk:       Disk{Cmdline: []string{"root=LABEL=COS_ACTIVE", "cos-img/filename=/cOS/active.img", "panic=5"}},
				KernelArgs: []string{"rd.debug"},
			},
			want: []string{"root=LABEL=COS_ACTIVE", "cos-img/filename=/cOS/active.img", "panic=5", "console=ttyS0", "panic=-1", "rd.debug"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := kernelArgs(tc.opts, "/dev/vda")
			if !slices.Equal(got, tc.want) {
				t.Errorf("kernelArgs = %q, want %q", got, tc.want)
			}
		})
	}
	// Guests of one disk share its command line: one guest's arguments
	// must not be written into it, where the next guest's would replace
	// them.
	disk := Disk{Cmdline: append(make([]string, 0, 8), "root=LABEL=COS_ACTIVE")}
	first := kernelArgs(VMOptions{Disk: disk, KernelArgs: []string{"first"}}, "/dev/vda")
	_ = kernelArgs(VMOptions{Disk: disk, KernelArgs: []string{"second"}}, "/dev/vda")
	if got := first[len(first)-1]; got != "first" {
		t.Errorf("the first guest's last argument became %q: kernelArgs appends into the disk's command line", got)
	}
}
