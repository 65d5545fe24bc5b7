//go:build qemu

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
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cozystack/cluster-api-workers/test/process"
)

// TestRootDiskBus boots the worker disk on the buses KubeVirt attaches a
// root disk to: virtio, which the provider renders unless a preference
// names a bus, and SATA, KubeVirt's default on q35, which every VM got
// before. The disk runs Debian's cloud kernel, which has no AHCI driver
// (CONFIG_SATA_AHCI is not set), like other cloud kernels: on SATA it
// never finds its root disk. The times are reported, not asserted.
func TestRootDiskBus(t *testing.T) {
	timings.scenario(t)
	g := NewWithT(t)
	// The initramfs gives up on a missing root disk after rootdelay
	// seconds, then reboots, which ends QEMU (-no-reboot).
	const rootDelay = 20
	boot := func(bus string) *VM {
		vm, err := StartVM(suiteCtx, VMOptions{
			Name: "bus-" + bus, Disk: disk, RootBus: bus, Dir: t.TempDir(),
			UserData:   []byte("#cloud-config\n"),
			KernelArgs: []string{fmt.Sprintf("rootdelay=%d", rootDelay)},
		})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(vm.Kill)
		return vm
	}
	virtio, sata := boot("virtio"), boot("sata")

	g.Eventually(func() string { return process.Tail(virtio.ConsoleLog, 256<<10) }, 5*time.Minute, poll).
		Should(MatchRegexp(`EXT4-fs \(vda\): mounted filesystem`), func() string { return process.Tail(virtio.ConsoleLog, 4<<10) })
	mounted := time.Since(virtio.Started)
	t.Logf("timing: on virtio the guest mounted its root disk %s after QEMU started", mounted.Round(time.Second))
	timings.addDiskBus(fmt.Sprintf("virtio: root file system mounted %s after QEMU started", mounted.Round(time.Second)))

	g.Eventually(sata.Done(), 5*time.Minute).Should(BeClosed(), func() string { return process.Tail(sata.ConsoleLog, 4<<10) })
	gaveUp := time.Since(sata.Started)
	console := process.Tail(sata.ConsoleLog, 256<<10)
	g.Expect(console).To(ContainSubstring("Gave up waiting for root file system device"))
	g.Expect(console).NotTo(MatchRegexp(`EXT4-fs \(sd[a-z]\): mounted`))
	t.Logf("timing: on SATA the guest found no root disk and gave up %s after QEMU started", gaveUp.Round(time.Second))
	timings.addDiskBus(fmt.Sprintf("sata: no root disk (no AHCI driver), gave up after rootdelay=%ds, %s after QEMU started", rootDelay, gaveUp.Round(time.Second)))
}
