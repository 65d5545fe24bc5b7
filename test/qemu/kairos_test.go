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
	"context"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/process"
)

// bootKairosDisk makes the pool's KubeVirtMachineTemplate classless with
// the Kairos disk as its container disk.
func bootKairosDisk(o *unstructured.Unstructured) {
	if o.GetKind() != "KubeVirtMachineTemplate" {
		return
	}
	labels := o.GetLabels()
	delete(labels, "cozystack.io/worker-class")
	o.SetLabels(labels)
	spec := templateSpecOf(o)
	delete(spec, "workerClass")
	spec["image"] = map[string]any{"containerDisk": map[string]any{"reference": kairosDiskRef}}
}

// bootedThroughGrub checks that a console log holds the kernel's command
// line as Kairos's grub passes it.
func bootedThroughGrub(g Gomega, console string, from int) {
	b, err := os.ReadFile(console) //nolint:gosec // The guest's console log, in the runner's directory.
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b[from:])).To(ContainSubstring(KairosBootLine), "the guest did not boot through Kairos's grub:\n%s", process.TailOf(string(b[from:]), 4<<10))
}

// TestKairosDiskJoins boots the Kairos disk of hack/kairos-disk (Kairos's
// immucore and kairos-agent, no Debian test scripts) with the bootstrap
// provider's Stages rendering as its NoCloud seed: Kairos's datasource
// caches it in COS_OEM, the agent runs its stages, and the guest joins
// with kubeadm. The guest boots from the disk: SeaBIOS, then the grub
// Kairos installs, which loads the kernel and initramfs from the active
// image with Kairos's command line. Opt-in (QEMU_KAIROS_DISK=1), since the
// disk's first build takes more than an hour.
func TestKairosDiskJoins(t *testing.T) {
	if kairosDisk == nil {
		t.Skip("QEMU_KAIROS_DISK=1 builds and boots the Kairos disk (docs/real-guests.md)")
	}
	timings.scenario(t)
	g := NewWithT(t)
	p := newPool("kairos")
	onlyPool(t, p)
	p.apply(t, map[string]string{"WORKER_MACHINE_COUNT": "1"}, bootKairosDisk)
	t.Cleanup(func() { p.remove(t) })

	ms := p.expectJoined(t, 1)
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(h.Client.Get(suiteCtx, vmKey(ms[0]), vmi)).To(Succeed())
	g.Expect(vmi.Status.NodeName).To(Equal(GuestNode))
	guest := guestOf(g, vmKey(ms[0]))
	g.Expect(guest.RootImage).To(Equal(kairosDisk.Image()), "guest %s does not boot the Kairos disk", guest.VM.Name)
	bootedThroughGrub(g, guest.ConsoleLog, 0)
	for _, n := range p.nodes(g) {
		g.Expect(n.Labels).To(HaveKeyWithValue(harness.PoolLabel, p.Name))
	}
	// It was Kairos that joined: kairos-agent's yip ran the join step from
	// the user data Kairos's datasource step cached in COS_OEM (the step
	// name is the renderer's StageJoin).
	journal, err := os.ReadFile(guest.JournalLog)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(journal)).To(ContainSubstring("Processing stage step '/oem/95_userdata/userdata.yaml.Join the cluster with kubeadm'"))
	recordJoins(t, "kairos", ms)
	// The token goes once the Machine has its nodeRef, as on any disk.
	g.Eventually(func(g Gomega) { g.Expect(p.joinTokens(g)).To(BeEmpty()) }, time.Minute, poll).Should(Succeed())
}

// A tenant's own kernel settings, as a pool sets them through the
// KairosConfig's files (the API has no fields of its own for them): a
// module for kube-proxy's IPVS mode, and the sysctls a kubelet hardened
// with --protect-kernel-defaults requires, which it refuses to start
// without (it sets them itself otherwise). On Kairos /etc/modules-load.d
// and /etc/sysctl.d are on tmpfs, so the files must be written again at
// every boot, before systemd reads them.
const (
	tenantModule  = "ip_vs"
	tenantSysctls = "vm.overcommit_memory = 1\nvm.panic_on_oom = 0\nkernel.panic = 10\nkernel.panic_on_oops = 1\n"
)

// tenantKernelSettings gives the pool's KairosConfigTemplate the tenant's
// module and sysctls and the hardened kubelet.
func tenantKernelSettings(o *unstructured.Unstructured) {
	if o.GetKind() != "KairosConfigTemplate" {
		return
	}
	spec := templateSpecOf(o)
	spec["files"] = []any{
		map[string]any{"path": "/etc/modules-load.d/tenant.conf", "content": tenantModule + "\n"},
		map[string]any{"path": "/etc/sysctl.d/90-tenant.conf", "content": tenantSysctls},
	}
	spec["kubeletExtraArgs"] = []any{map[string]any{"name": "protect-kernel-defaults", "value": "true"}}
}

// TestKairosDiskReboots joins one Kairos guest whose pool sets its own
// kernel module and sysctls, then reboots it twice from inside, the second
// time with its seed disk unplugged: each time the Node comes back Ready
// under the same name with a new boot ID, the Machine and its guest stay
// (no new instance, no remediation), no bootstrap token is minted, and the
// tenant's settings hold again (the module is loaded at boot, and the
// hardened kubelet, which checks the sysctls, runs). Kairos reads the seed
// once and caches it in COS_OEM; later boots run the cached user data, so
// the seed's absence changes nothing. Each reboot goes through the firmware
// and Kairos's grub again. Opt-in with TestKairosDiskJoins.
func TestKairosDiskReboots(t *testing.T) {
	if kairosDisk == nil {
		t.Skip("QEMU_KAIROS_DISK=1 builds and boots the Kairos disk (docs/real-guests.md)")
	}
	timings.scenario(t)
	g := NewWithT(t)
	p := newPool("reboot")
	onlyPool(t, p)
	// The MachineHealthCheck must not take a reboot for a failure: under
	// TCG a Kairos guest takes minutes to boot.
	p.apply(t, map[string]string{"WORKER_MACHINE_COUNT": "1", "NODE_UNHEALTHY_TIMEOUT_SECONDS": "1800"}, bootKairosDisk, tenantKernelSettings)
	t.Cleanup(func() { p.remove(t) })

	ms := p.expectJoined(t, 1)
	recordJoins(t, "kairos reboot", ms)
	g.Eventually(func(g Gomega) { g.Expect(p.joinTokens(g)).To(BeEmpty()) }, time.Minute, poll).Should(Succeed())
	vm := vmKey(ms[0])
	guest := guestOf(g, vm)
	g.Expect(guest.RootImage).To(Equal(kairosDisk.Image()))
	nodeName := ms[0].Status.NodeRef.Name
	journal := func(from int) string {
		b, err := os.ReadFile(guest.JournalLog)
		g.Expect(err).NotTo(HaveOccurred())
		return string(b[from:])
	}
	loaded := "Inserted module '" + tenantModule + "'"
	g.Expect(journal(0)).To(ContainSubstring(loaded), "systemd-modules-load did not load the tenant's module at the first boot")

	// Every bootstrap token Secret of the pool the workload cluster sees
	// from here on: none may be minted for a reboot.
	minted := watchPoolTokens(t, p)

	reboot := func(step string) {
		t.Helper()
		before := &corev1.Node{}
		g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Name: nodeName}, before)).To(Succeed())
		from := len(journal(0))
		consoleFrom := consoleSize(g, guest.ConsoleLog)
		started := time.Now()
		ctx, cancel := context.WithTimeout(suiteCtx, 5*time.Minute)
		defer cancel()
		g.Expect(runner.Reboot(ctx, vm)).To(Succeed())
		reset := time.Since(started)
		after := &corev1.Node{}
		g.Eventually(func(g Gomega) {
			g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Name: nodeName}, after)).To(Succeed())
			g.Expect(after.Status.NodeInfo.BootID).NotTo(Equal(before.Status.NodeInfo.BootID), "the kubelet of the rebooted guest has not reported yet")
			g.Expect(nodeReady(after)).To(BeTrue(), "Node %s is not Ready", nodeName)
		}, joinTimeout, poll).Should(Succeed(), func() string {
			return describe(p) + "\njournal since the reboot:\n" + process.TailOf(journal(from), 8<<10)
		})
		t.Logf("timing: %s: QEMU reset the guest %s after the reboot was asked, and Node %s was Ready again with a new boot ID %s after it",
			step, reset.Round(time.Second), nodeName, time.Since(started).Round(time.Second))
		g.Expect(after.UID).To(Equal(before.UID), "Node %s was registered anew", nodeName)
		g.Expect(journal(from)).To(ContainSubstring(loaded), "%s: the tenant's module was not loaded at boot", step)
		// The reset went through the firmware and grub again.
		bootedThroughGrub(g, guest.ConsoleLog, consoleFrom)
		// The same Machine, instance and QEMU: nothing was replaced.
		now := p.machines(g)
		g.Expect(now).To(HaveLen(1))
		g.Expect(now[0].UID).To(Equal(ms[0].UID))
		g.Expect(now[0].Status.NodeRef.Name).To(Equal(nodeName))
		var guests []Guest
		for _, gu := range runner.Guests() {
			if gu.VM == vm {
				guests = append(guests, gu)
			}
		}
		g.Expect(guests).To(HaveLen(1), "the guest was replaced")
		g.Expect(guests[0].Exited.IsZero()).To(BeTrue(), "the guest's QEMU exited")
		g.Expect(minted()).To(BeEmpty(), "%s: bootstrap tokens were minted", step)
	}

	reboot("reboot with the seed")
	ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
	defer cancel()
	g.Expect(runner.DetachSeed(ctx, vm)).To(Succeed())
	reboot("reboot without the seed")
}

// consoleSize is how much a console log holds so far.
func consoleSize(g Gomega, console string) int {
	st, err := os.Stat(console)
	g.Expect(err).NotTo(HaveOccurred())
	return int(st.Size())
}

// nodeReady reports whether the Node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchPoolTokens watches the workload cluster's bootstrap token Secrets
// (harness.Watch, which misses none however briefly it lives) until the
// test ends, and returns the names of those seen for the pool's
// KairosConfigs since the call.
func watchPoolTokens(t *testing.T, p pool) func() []string {
	t.Helper()
	c, err := client.NewWithWatch(workload.API.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := p.Deployment().String() + "-"
	var mu sync.Mutex
	seen := map[string]bool{}
	ctx, cancel := context.WithCancel(suiteCtx)
	done := harness.Watch(ctx, c, &corev1.SecretList{}, func(_ watch.EventType, o client.Object) {
		if owner, ok := harness.JoinTokenOwner(o.(*corev1.Secret)); ok && strings.HasPrefix(owner, prefix) {
			mu.Lock()
			seen[o.GetName()] = true
			mu.Unlock()
		}
	}, client.InNamespace(metav1.NamespaceSystem))
	t.Cleanup(func() { cancel(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names)
		return names
	}
}
