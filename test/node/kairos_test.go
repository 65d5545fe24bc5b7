//go:build node

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

package node_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/qemu"
)

// TestKairosPoolJoinsThroughVirtLauncher: one machine of a Kairos pool
// joins through KubeVirt's real node side, as in
// TestPoolJoinsThroughVirtLauncher, from the Kairos disk of hack/kairos-disk
// (Kairos's immucore and kairos-agent, grub as Kairos installs it) as the
// WorkerPlatform's container disk: virt-launcher's QEMU starts it through
// SeaBIOS, grub loopback-mounts the active image from COS_STATE and boots
// its kernel with Kairos's command line, immucore mounts the system and
// caches the NoCloud seed in COS_OEM, and kairos-agent runs the
// rendering's stages, kubeadm's join among them. The Machine is Running
// with its Node Ready; the guest's console shows grub's command line and
// QEMU was given no kernel. Opt-in (NODE_KAIROS_DISK=1): the disk's first
// build takes more than an hour.
func TestKairosPoolJoinsThroughVirtLauncher(t *testing.T) {
	if os.Getenv("NODE_KAIROS_DISK") == "" {
		t.Skip("NODE_KAIROS_DISK=1 boots the Kairos disk as a container disk through virt-launcher (docs/testing.md)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	const namespace = "node-kairos"
	k := startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{kairosDisk: true})

	p := k.pool("kairos")
	p.apply(ctx, t, map[string]string{
		// A Kairos guest under TCG takes minutes to boot: nothing here is
		// remediated.
		"NODE_UNHEALTHY_TIMEOUT_SECONDS": "1800",
	})
	g := newGuest(k)
	defer g.keepConsole("guest-console-kairos.log")
	machine := k.waitJoined(ctx, t, p, namespace, g, nil)

	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := k.h.Management.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: machine.Spec.InfrastructureRef.Name}, vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.Status.NodeName != kubeVirtNodeName || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("instance %s: phase %s on node %q, want Running on %s", vmi.Name, vmi.Status.Phase, vmi.Status.NodeName, kubeVirtNodeName)
	}
	if !slices.ContainsFunc(vmi.Spec.Volumes, func(v kubevirtv1.Volume) bool {
		return v.ContainerDisk != nil && v.ContainerDisk.Image == k.worker.Image.Ref
	}) {
		t.Errorf("instance %s has no container disk %s: %+v", vmi.Name, k.worker.Image.Ref, vmi.Spec.Volumes)
	}
	console, err := k.node.ContainerLog(g.launcher.Namespace, g.launcher.Name, "guest-console-log")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console, qemu.KairosBootLine) {
		t.Errorf("the guest's console has no kernel command line from Kairos's grub (%q):\n%s", qemu.KairosBootLine, tail(console, 60))
	}
	qemus := k.node.CommandLines(qemuNames...)
	if len(qemus) != 1 {
		t.Fatalf("%d QEMU processes on the node, want the guest's alone: %q", len(qemus), qemus)
	}
	if slices.Contains(strings.Fields(qemus[0]), "-kernel") {
		t.Errorf("QEMU was given a kernel, the guest did not boot from its disk: %s", qemus[0])
	}

	var nd corev1.Node
	if err := k.workload.API.Client.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, &nd); err != nil {
		t.Fatal(err)
	}
	var ready time.Time
	for _, cond := range nd.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = cond.LastTransitionTime.Time
		}
	}
	created := machine.CreationTimestamp.Time
	t.Logf("Machine %s joined from the Kairos container disk through virt-launcher: Machine created to QEMU start %s (seen by polling), to Node %s registered %s and Ready %s (QEMU start to Ready %s); launcher Pod %s peak memory %d MiB, CPU requested %s",
		machine.Name, g.qemuSeen.Sub(created).Round(time.Second), nd.Name, nd.CreationTimestamp.Sub(created).Round(time.Second),
		ready.Sub(created).Round(time.Second), ready.Sub(g.qemuSeen).Round(time.Second), g.launcher.Name, g.peak>>20, g.cpuRequest())
	t.Logf("timeline from the Machine's creation: %s; QEMU used %s of CPU in %s; the node's components: %s; load average at the end %s",
		g.timeline(created), g.qemuCPU.Round(time.Second), time.Since(g.qemuSeen).Round(time.Second), nodeCPU(k.node), loadAverage())
}
