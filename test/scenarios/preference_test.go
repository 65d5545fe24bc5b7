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
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestPoolSizedByCPUAndMemoryWithACommonPreferenceJoins: a pool sized by
// cpu and memory that names one of KubeVirt's common preferences with a
// CPU requirement (oraclelinux: 2 vCPUs, preferred as sockets) is accepted
// by virt-api and joins. Rendering the vCPUs as cores, as the provider did,
// was refused ("insufficient CPU resources of 1 vCPU provided by
// VirtualMachine, preference requires 2 vCPU provided as sockets"). The
// instances run on virtio disks (the preference prefers virtio too).
func TestPoolSizedByCPUAndMemoryWithACommonPreferenceJoins(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	objs := poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "1", "WORKER_CPU_CORES": "2"})
	harness.EditMachineTemplates(objs, func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["preference"] = map[string]any{"name": "oraclelinux"}
	})
	g.Expect(h.Apply(ctx, objs)).To(Succeed())
	ms := poolOf(w).expectJoined(t, 1)
	expectBootsClean(g, ms)
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: ms[0].Spec.InfrastructureRef.Name}, vmi)).To(Succeed())
	g.Expect(vmi.Spec.Domain.CPU.Sockets).To(Equal(uint32(2)))
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		g.Expect(d.Disk.Bus).To(Equal(kubevirtv1.DiskBusVirtio), "disk %s", d.Name)
	}
	expectNoOrphans(t, w)
}
