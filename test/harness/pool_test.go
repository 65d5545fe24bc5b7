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

package harness

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPoolRender: a named pool's objects carry its name and node label, a
// later map of variables overrides an earlier one, the default pool is the
// template's, and an autoscaled pool is the scale-from-zero flavor's.
func TestPoolRender(t *testing.T) {
	g := NewWithT(t)
	cluster := client.ObjectKey{Namespace: "tenants", Name: "tenant"}

	named := Pool{Cluster: cluster, Name: "gpu"}
	g.Expect(named.Deployment()).To(Equal(client.ObjectKey{Namespace: "tenants", Name: "tenant-gpu"}))
	objs, err := named.Render(map[string]string{"WORKER_MACHINE_COUNT": "2"}, map[string]string{"WORKER_MACHINE_COUNT": "5"})
	g.Expect(err).NotTo(HaveOccurred())
	md := objectOfKind(g, objs, "MachineDeployment")
	g.Expect(md.GetName()).To(Equal("tenant-gpu"))
	g.Expect(md.GetNamespace()).To(Equal("tenants"))
	replicas, _, _ := unstructured.NestedFieldNoCopy(md.Object, "spec", "replicas")
	g.Expect(replicas).To(BeEquivalentTo(5), "the later map wins")
	nodeLabels, _, _ := unstructured.NestedStringMap(objectOfKind(g, objs, "KairosConfigTemplate").Object,
		"spec", "template", "spec", "nodeLabels")
	g.Expect(nodeLabels).To(HaveKeyWithValue(PoolLabel, "gpu"))

	byDefault := Pool{Cluster: cluster}
	g.Expect(byDefault.Deployment()).To(Equal(client.ObjectKey{Namespace: "tenants", Name: "tenant-kairos"}))
	objs, err = byDefault.Render()
	g.Expect(err).NotTo(HaveOccurred())
	md = objectOfKind(g, objs, "MachineDeployment")
	g.Expect(md.GetName()).To(Equal(byDefault.Deployment().Name))

	autoscaled := Pool{Cluster: cluster, Autoscaled: true}
	g.Expect(autoscaled.Deployment()).To(Equal(client.ObjectKey{Namespace: "tenants", Name: "tenant-burst"}))
	objs, err = autoscaled.Render(map[string]string{"WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": "4"})
	g.Expect(err).NotTo(HaveOccurred())
	md = objectOfKind(g, objs, "MachineDeployment")
	g.Expect(md.GetName()).To(Equal(autoscaled.Deployment().Name))
	_, hasReplicas, _ := unstructured.NestedFieldNoCopy(md.Object, "spec", "replicas")
	g.Expect(hasReplicas).To(BeFalse(), "the autoscaler owns the size")
	g.Expect(md.GetAnnotations()).To(HaveKeyWithValue("cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size", "4"))
}

func objectOfKind(g Gomega, objs []unstructured.Unstructured, kind string) unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	g.Expect(kind).To(BeEmpty(), "the rendered pool has no %s", kind)
	return unstructured.Unstructured{}
}
