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

package scenarios

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/capacity"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestPoolWithAGPUInstancetypeJoins: a Kairos pool names the GPU in its
// pool settings (for the class's NVIDIA rule) and sizes its machines with
// an instancetype that attaches the GPU. virt-api refuses a VM that lists
// the instancetype's GPU again ("conflicts with selected instance type"),
// so the machines carry it once, from the instancetype, and the pool joins
// on the node that has the GPU, labelled cluster-api/accelerator with the
// GPU's model.
func TestPoolWithAGPUInstancetypeJoins(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	it := &instancetypev1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + w.Key.Namespace},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 4},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("8Gi")},
			GPUs:   []kubevirtv1.GPU{{Name: "gpu1", DeviceName: gpuDevice}},
		},
	}
	g.Expect(h.Client.Create(ctx, it)).To(Succeed())
	t.Cleanup(func() { _ = h.Client.Delete(context.Background(), it) })

	// KubeVirt refuses any GPU in a VM whose instancetype attaches GPUs,
	// not only the same device: a template that lists another one beside
	// the instancetype is refused when it is written, not by virt-api on
	// every machine.
	beside := &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Key.Namespace, Name: "gpu-beside"},
		Spec: infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: infrav1.KubeVirtMachineSpec{
			Image:        &infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: "registry.example.com/w@sha256:" + strings.Repeat("1", 64)}},
			Instancetype: &infrav1.InstancetypeReference{Name: it.Name},
			GPUs:         []infrav1.GPU{{Name: "extra", DeviceName: "nvidia.com/AD102GL_L40S"}},
		}}},
	}
	g.Expect(h.Client.Create(ctx, beside)).To(MatchError(ContainSubstring(
		"spec.template.spec.gpus: Forbidden: instancetype " + it.Name + " attaches GPUs (" + gpuDevice + ")")))

	objs := poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "1"})
	harness.EditMachineTemplates(objs, func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["workerClass"].(map[string]any)["gpus"] = []any{map[string]any{"name": gpuDevice}}
		delete(machine, "cpu")
		delete(machine, "memory")
		machine["instancetype"] = map[string]any{"name": it.Name}
	})
	g.Expect(h.Apply(ctx, objs)).To(Succeed())
	ms := poolOf(w).expectJoined(t, 1)
	expectBootsClean(g, ms)
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: ms[0].Spec.InfrastructureRef.Name}, vmi)).To(Succeed())
	g.Expect(vmi.Spec.Domain.Devices.GPUs).To(ConsistOf(HaveField("DeviceName", gpuDevice)))
	g.Expect(vmi.Status.NodeName).To(Equal("sim-infra-0"))
	nodes := poolOf(w).nodes(g)
	g.Expect(nodes).To(HaveLen(1))
	g.Expect(nodes[0].Status.Capacity).To(HaveKey(corev1.ResourceName("nvidia.com/gpu")), "the template advertised the GPU for scale from zero")
	// The node registered with the label the cluster autoscaler
	// recognizes a GPU node by, its value the instancetype's GPU model,
	// which the pool's KairosConfigTemplate never named.
	g.Expect(nodes[0].Labels).To(HaveKeyWithValue(capacity.GPULabel, "GA102GL_A10"))
	expectNoOrphans(t, w)
}
