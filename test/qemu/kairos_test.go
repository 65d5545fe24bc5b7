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
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/cozystack/cluster-api-workers/test/harness"
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

// TestKairosDiskJoins boots the Kairos disk of hack/kairos-disk (Kairos's
// immucore and kairos-agent, no Debian test scripts) with the bootstrap
// provider's Stages rendering as its NoCloud seed: Kairos's datasource
// caches it in COS_OEM, the agent runs its stages, and the guest joins
// with kubeadm. Opt-in (QEMU_KAIROS_DISK=1), since the disk's first build
// takes more than an hour.
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
