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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
)

// TestScaleFromZero: the scale-from-zero flavor's MachineDeployment, with
// the cluster autoscaler's min and max annotations and no replicas, starts
// at the lower bound 0 and makes no Machine; its template
// advertises what the autoscaler reads to scale from zero (capacity and
// node info in the KubeVirtMachineTemplate's status). Scaled to 1, as the
// autoscaler would, it joins a real guest whose root disk is a clone of the
// template's shared import, which CDI imported over HTTP from the runner
// (the DataVolume path), with a ConfigDrive seed, and
// the Node has the capacity the template promised, less what the guest's
// kernel and file system keep.
func TestScaleFromZero(t *testing.T) {
	timings.scenario(t)
	g := NewWithT(t)
	p := newPool("zero")
	p.Autoscaled = true
	onlyPool(t, p)
	p.apply(t, map[string]string{"WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": "2"},
		importFromRunner(string(infrav1.ConfigDriveDatasource)))
	t.Cleanup(func() { p.remove(t) })

	template := &infrav1.KubeVirtMachineTemplate{}
	templateKey := client.ObjectKey{Namespace: p.Deployment().Namespace, Name: p.Deployment().Name + "-r1"}
	g.Eventually(func(g Gomega) {
		g.Expect(h.Client.Get(suiteCtx, templateKey, template)).To(Succeed())
		g.Expect(template.Status.Resolved).NotTo(BeNil())
		g.Expect(template.Status.Capacity).NotTo(BeEmpty())
		md := &clusterv1.MachineDeployment{}
		g.Expect(h.Client.Get(suiteCtx, p.Deployment(), md)).To(Succeed())
		g.Expect(md.Status.Replicas).To(Equal(ptr.To[int32](0)))
	}, time.Minute, poll).Should(Succeed())
	md := &clusterv1.MachineDeployment{}
	g.Expect(h.Client.Get(suiteCtx, p.Deployment(), md)).To(Succeed())
	g.Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMinSizeAnnotation, "0"))
	g.Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMaxSizeAnnotation, "2"))
	g.Expect(template.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceCPU, resource.MustParse("2")))
	g.Expect(template.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceMemory, resource.MustParse("1536Mi")))
	g.Expect(template.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceEphemeralStorage, resource.MustParse("4Gi")))
	g.Expect(template.Status.NodeInfo).To(Equal(infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"}))
	g.Expect(p.machines(g)).To(BeEmpty())

	g.Expect(h.ScalePool(suiteCtx, p.Pool, 1)).To(Succeed())

	ms := p.expectJoined(t, 1)
	m := ms[0]
	dv := &cdiv1.DataVolume{}
	g.Expect(h.Client.Get(suiteCtx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name + "-root"}, dv)).To(Succeed())
	shared := sharedimage.Name(template)
	g.Expect(dv.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: m.Namespace, Name: shared}),
		"the classless template's machine clones its shared import")
	g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
	sharedDV := &cdiv1.DataVolume{}
	g.Expect(h.Client.Get(suiteCtx, client.ObjectKey{Namespace: m.Namespace, Name: shared}, sharedDV)).To(Succeed())
	g.Expect(sharedDV.Spec.Source.HTTP).NotTo(BeNil())
	g.Expect(sharedDV.Spec.Source.HTTP.URL).To(Equal(runner.ImageURL()))
	vm := &kubevirtv1.VirtualMachine{}
	g.Expect(h.Client.Get(suiteCtx, vmKey(m), vm)).To(Succeed())
	g.Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("DataVolume.Name", dv.Name)))
	// The guest boots the volume CDI's cloner wrote: its claim's
	// PersistentVolume's file.
	pvc := &corev1.PersistentVolumeClaim{}
	g.Expect(h.Client.Get(suiteCtx, client.ObjectKeyFromObject(dv), pvc)).To(Succeed())
	pv := &corev1.PersistentVolume{}
	g.Expect(h.Client.Get(suiteCtx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
	g.Expect(pv.Spec.HostPath).NotTo(BeNil())
	guest := guestOf(g, vmKey(m))
	g.Expect(guest.RootImage).NotTo(Equal(disk.Image()), "the guest boots the shared disk, not its imported volume")
	g.Expect(guest.RootImage).To(Equal(cdisim.DiskImage(pv)))
	g.Expect(guest.Seed).To(Equal(ConfigDrive))
	recordJoins(t, "scale from zero", ms)

	// What the autoscaler was promised is what the node has: the same CPUs
	// and architecture, and no more memory or disk than advertised (the
	// kernel and the file system keep a little of each).
	node := p.nodes(g)[0]
	g.Expect(node.Status.Capacity.Cpu().Cmp(*template.Status.Capacity.Cpu())).To(BeZero())
	g.Expect(node.Status.NodeInfo.Architecture).To(BeEquivalentTo(template.Status.NodeInfo.Architecture))
	g.Expect(node.Status.NodeInfo.OperatingSystem).To(Equal(template.Status.NodeInfo.OperatingSystem))
	for _, name := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		got, promised := node.Status.Capacity[name], template.Status.Capacity[name]
		g.Expect(got.Cmp(promised)).To(BeNumerically("<=", 0), "Node %s has more %s than the template advertises", node.Name, name)
		g.Expect(got.AsApproximateFloat64()).To(BeNumerically(">=", 0.85*promised.AsApproximateFloat64()),
			"Node %s has %s %s, far below the %s the template advertises", node.Name, name, got.String(), promised.String())
		t.Logf("Node %s has %s %s; the template advertises %s", node.Name, name, got.String(), promised.String())
	}
}
