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
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestScaleFromZero: the scale-from-zero flavor's MachineDeployment, with
// the cluster autoscaler's min/max annotations and no replicas, starts at
// the lower bound 0 and creates no machine; its template
// advertises, for the autoscaler's scale from zero, the capacity and node
// info that the nodes it makes really have; scaling it to 2 (as the
// autoscaler does) joins 2 nodes.
func TestScaleFromZero(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	p := poolOf(w)
	p.Autoscaled = true
	p.apply(t, map[string]string{
		"WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": "3",
		"WORKER_CPU_CORES": "4", "WORKER_MEMORY": "8Gi",
	})
	mdKey := p.Deployment()
	templateKey := client.ObjectKey{Namespace: mdKey.Namespace, Name: mdKey.Name + "-r1"}

	template := &infrav1.KubeVirtMachineTemplate{}
	g.Eventually(func(g Gomega) {
		g.Expect(h.Client.Get(ctx, templateKey, template)).To(Succeed())
		g.Expect(template.Status.Resolved).NotTo(BeNil())
		md := &clusterv1.MachineDeployment{}
		g.Expect(h.Client.Get(ctx, mdKey, md)).To(Succeed())
		g.Expect(md.Status.Replicas).To(Equal(ptr.To[int32](0)))
		g.Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMinSizeAnnotation, "0"))
		g.Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMaxSizeAnnotation, "3"))
	}, timeout, poll).Should(Succeed())
	g.Expect(template.Status.Capacity.Cpu().String()).To(Equal("4"))
	g.Expect(template.Status.Capacity.Memory().String()).To(Equal("8Gi"))
	g.Expect(template.Status.NodeInfo).To(Equal(infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"}))
	g.Consistently(func(g Gomega) { g.Expect(p.machines(g)).To(BeEmpty()) }, 3*time.Second, poll).Should(Succeed())

	g.Expect(h.ScalePool(ctx, p.Pool, 2)).To(Succeed())
	expectBootsClean(g, p.expectJoined(t, 2))
	for _, n := range p.nodes(g) {
		// What the autoscaler was promised is what the node has.
		for name, want := range template.Status.Capacity {
			got := n.Status.Capacity[name]
			g.Expect(got.Cmp(want)).To(BeZero(), "Node %s has %s %s, the template advertises %s", n.Name, name, got.String(), want.String())
		}
		g.Expect(n.Status.NodeInfo.Architecture).To(BeEquivalentTo(template.Status.NodeInfo.Architecture))
		g.Expect(n.Status.NodeInfo.OperatingSystem).To(Equal(template.Status.NodeInfo.OperatingSystem))
		g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelArchStable, string(template.Status.NodeInfo.Architecture)))
	}
	expectNoOrphans(t, w)
}
