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
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
)

// TestScaleFromZeroFromAClaimThroughVirtLauncher: the QEMU tier's
// TestScaleFromZero on KubeVirt's real node side. The scale-from-zero
// flavor's MachineDeployment, with the cluster autoscaler's min and max
// annotations and no replicas, starts at the lower bound 0 and makes no
// Machine; its template advertises what the autoscaler reads to scale from
// zero. Scaled to 1, as the autoscaler would, its Machine's root disk is a
// DataVolume clone of the template's shared import, which CDI's stand-in
// imported over HTTP (the worker container disk's image as raw, served by
// test/sim/imageserver) into a local volume: a hostPath directory holding
// disk.img, owned by the qemu user. The launcher Pod on the real node
// mounts that claim, QEMU opens its disk.img, the guest boots from it with
// a ConfigDrive seed and joins, and its Node has the capacity the
// template promised, less what the guest's kernel and file system keep.
func TestScaleFromZeroFromAClaimThroughVirtLauncher(t *testing.T) {
	scaleFromZeroFromAClaim(t, "node-scale-from-zero", false)
}

// TestScaleFromZeroFromAClaimOnRealCDI: TestScaleFromZeroFromAClaimThroughVirtLauncher
// with CDI's own cdi-controller in place of the stand-in: its importer Pod
// imports the template's HTTP image (over TLS, with the template's CA;
// TestRealCDIImportsOverHTTP) and its host-assisted clone (a cloner Pod
// posting to an upload server Pod through its Service, by name: kube-proxy
// and CoreDNS run on the node) makes the machine's root disk from it.
func TestScaleFromZeroFromAClaimOnRealCDI(t *testing.T) {
	scaleFromZeroFromAClaim(t, "node-real-cdi-zero", true)
}

func scaleFromZeroFromAClaim(t *testing.T, namespace string, realCDI bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	disk := serveWorkerDisk(t, realCDI)
	k := startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{realCDI: realCDI, forwards: disk.forwards})
	c := k.h.Management.Client
	url := disk.url
	size := resource.NewQuantity(disk.size, resource.BinarySI)

	p := k.pool("zero")
	p.Autoscaled = true
	p.apply(ctx, t, map[string]string{"WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": "2"}, disk.imports()...)

	template := &infrav1.KubeVirtMachineTemplate{}
	templateKey := client.ObjectKey{Namespace: namespace, Name: p.Deployment().Name + "-r1"}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, templateKey, template); err != nil {
			return false, err.Error()
		}
		md := &clusterv1.MachineDeployment{}
		if err := c.Get(ctx, p.Deployment(), md); err != nil {
			return false, err.Error()
		}
		return template.Status.Resolved != nil && len(template.Status.Capacity) > 0 && md.Status.Replicas != nil && *md.Status.Replicas == 0,
			fmt.Sprintf("template resolved %v, capacity %v; MachineDeployment replicas %v", template.Status.Resolved != nil, template.Status.Capacity, md.Status.Replicas)
	}); err != nil {
		t.Fatalf("the pool at zero did not advertise its capacity: %v", err)
	}
	md := &clusterv1.MachineDeployment{}
	if err := c.Get(ctx, p.Deployment(), md); err != nil {
		t.Fatal(err)
	}
	if md.Annotations[clusterv1.AutoscalerMinSizeAnnotation] != "0" || md.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] != "2" {
		t.Errorf("the MachineDeployment's autoscaler annotations are %v, want min 0 and max 2", md.Annotations)
	}
	for name, want := range map[corev1.ResourceName]resource.Quantity{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1536Mi"), corev1.ResourceEphemeralStorage: *size,
	} {
		if got := template.Status.Capacity[name]; got.Cmp(want) != 0 {
			t.Errorf("the template advertises %s %s, want %s", name, got.String(), want.String())
		}
	}
	if want := (infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"}); template.Status.NodeInfo != want {
		t.Errorf("the template's node info is %+v, want %+v", template.Status.NodeInfo, want)
	}
	if ms, err := k.h.PoolMachines(ctx, p.Pool); err != nil || len(ms) != 0 {
		t.Fatalf("the pool at zero has Machines %v (%v)", ms, err)
	}

	if err := k.h.ScalePool(ctx, p.Pool, 1); err != nil {
		t.Fatal(err)
	}
	g := newGuest(k)
	defer g.keepConsole("guest-console-zero.log")
	machine := k.waitJoined(ctx, t, p, namespace, g, nil)

	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: machine.Spec.InfrastructureRef.Name + "-root"}, dv); err != nil {
		t.Fatal(err)
	}
	shared := sharedimage.Name(template)
	if src := dv.Spec.Source; src == nil || src.PVC == nil || *src.PVC != (cdiv1.DataVolumeSourcePVC{Namespace: namespace, Name: shared}) {
		t.Errorf("the machine's DataVolume's source is %+v, want a clone of the shared import %s", dv.Spec.Source, shared)
	}
	sharedDV := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: shared}, sharedDV); err != nil {
		t.Fatal(err)
	}
	if src := sharedDV.Spec.Source; src == nil || src.HTTP == nil || src.HTTP.URL != url {
		t.Errorf("the shared import's source is %+v, want an HTTP import of %s", sharedDV.Spec.Source, url)
	}
	// The launcher Pod mounts the clone's claim, and QEMU opens the
	// volume's disk.img.
	if !slices.ContainsFunc(g.launcher.Spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == dv.Name
	}) {
		t.Errorf("launcher Pod %s does not mount claim %s: %+v", g.launcher.Name, dv.Name, g.launcher.Spec.Volumes)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dv), pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cdisim.DiskImage(pv)); err != nil {
		t.Errorf("the clone's volume has no disk.img: %v", err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: machine.Spec.InfrastructureRef.Name}, vmi); err != nil {
		t.Fatal(err)
	}
	rootVolume := ""
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.BootOrder != nil && *d.BootOrder == 1 {
			rootVolume = d.Name
		}
	}
	qemuLine := strings.Join(k.node.CommandLines(qemuNames...), "\n")
	if want := "/var/run/kubevirt-private/vmi-disks/" + rootVolume + "/disk.img"; rootVolume == "" || !strings.Contains(qemuLine, want) {
		t.Errorf("QEMU does not open the root volume's %s: %.800s", want, qemuLine)
	}
	if _, seed := g.seen(seedRead); seed != "config-2" {
		t.Errorf("the guest's seed runner read its cloud-config from %q, want the ConfigDrive disk (config-2)", seed)
	}

	// What the autoscaler was promised is what the node has: the same CPUs
	// and architecture, and no more memory or disk than advertised (the
	// kernel and the file system keep a little of each).
	var nd corev1.Node
	if err := k.workload.API.Client.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, &nd); err != nil {
		t.Fatal(err)
	}
	if nd.Status.Capacity.Cpu().Cmp(*template.Status.Capacity.Cpu()) != 0 {
		t.Errorf("Node %s has %s CPUs, the template advertises %s", nd.Name, nd.Status.Capacity.Cpu(), template.Status.Capacity.Cpu())
	}
	if nd.Status.NodeInfo.Architecture != string(template.Status.NodeInfo.Architecture) || nd.Status.NodeInfo.OperatingSystem != template.Status.NodeInfo.OperatingSystem {
		t.Errorf("Node %s is %s/%s, the template advertises %+v", nd.Name, nd.Status.NodeInfo.OperatingSystem, nd.Status.NodeInfo.Architecture, template.Status.NodeInfo)
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		got, promised := nd.Status.Capacity[name], template.Status.Capacity[name]
		if got.Cmp(promised) > 0 || got.AsApproximateFloat64() < 0.85*promised.AsApproximateFloat64() {
			t.Errorf("Node %s has %s %s, the template advertises %s (want at most that and at least 85%% of it)", nd.Name, name, got.String(), promised.String())
		}
		t.Logf("Node %s has %s %s; the template advertises %s", nd.Name, name, got.String(), promised.String())
	}
	created := machine.CreationTimestamp.Time
	t.Logf("Machine %s scaled from zero joined from a claim through virt-launcher: Machine created to QEMU start %s, to Running with its Node Ready %s; timeline %s; launcher Pod peak memory %d MiB; load average %s",
		machine.Name, g.qemuSeen.Sub(created).Round(time.Second), time.Since(created).Round(time.Second), g.timeline(created), g.peak>>20, loadAverage())
}
