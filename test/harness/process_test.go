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
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

func TestRenderKubeadmPoolTemplateNeedsTheImage(t *testing.T) {
	g := NewWithT(t)
	_, err := RenderTemplate(KubeadmPoolTemplate(), map[string]string{"CLUSTER_NAME": "tenant", "NAMESPACE": "tenants"})
	g.Expect(err).To(MatchError(ContainSubstring("WORKER_IMAGE")))
	objs, err := RenderTemplate(KubeadmPoolTemplate(), map[string]string{"CLUSTER_NAME": "tenant", "NAMESPACE": "tenants", "WORKER_IMAGE": "registry.example.com/worker@sha256:" + sha})
	g.Expect(err).NotTo(HaveOccurred())
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	g.Expect(kinds).To(ConsistOf("KubeadmConfigTemplate", "KubeVirtMachineTemplate", "MachineDeployment", "MachineHealthCheck"))
}

const sha = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"

func TestProductionLimitsUnlessOverridden(t *testing.T) {
	g := NewWithT(t)
	h := &Harness{opts: Options{Limits: map[components.Name]components.Limits{components.Infrastructure: {QPS: 5, Burst: 7}}}}
	g.Expect(h.limits(components.KairosBootstrap)).To(Equal(components.Limits{QPS: 100, Burst: 200, ClusterCacheQPS: 20, ClusterCacheBurst: 30}))
	g.Expect(h.limits(components.KubeadmBootstrap)).To(Equal(components.Limits{QPS: 100, Burst: 200, ClusterCacheQPS: 20, ClusterCacheBurst: 30}))
	g.Expect(h.limits(components.CAPICore)).To(Equal(components.Limits{QPS: 100, Burst: 200, ClusterCacheQPS: 20, ClusterCacheBurst: 30}))
	g.Expect(h.limits(components.Infrastructure)).To(Equal(components.Limits{QPS: 5, Burst: 7}))
	g.Expect((&Harness{}).limits(components.Infrastructure)).To(Equal(components.Limits{QPS: 100, Burst: 200, ClusterCacheQPS: 20, ClusterCacheBurst: 30}),
		"the infrastructure provider's production limits")
}

// TestKubeadmPeerAsProcesses runs the peer pipeline's providers as
// processes: Cluster API's kubeadm webhooks are served in-process (an
// invalid KubeadmConfigTemplate is refused), and each process serves the
// counts of its own requests (its informers' lists and watches).
func TestKubeadmPeerAsProcesses(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, err := Start(ctx, Options{Bootstrap: BootstrapKubeadm, Processes: true, WorkerClasses: true})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(h.Stop()).To(Succeed()) }()

	invalid := &kubeadmv1.KubeadmConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "invalid"},
		Spec: kubeadmv1.KubeadmConfigTemplateSpec{Template: kubeadmv1.KubeadmConfigTemplateResource{Spec: kubeadmv1.KubeadmConfigSpec{
			Format: "no-such-format",
		}}},
	}
	err = h.Client.Create(ctx, invalid, client.FieldValidation("Strict"))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an invalid KubeadmConfigTemplate: %v", err)

	processes := h.Processes()
	g.Expect(processes).To(HaveLen(2))
	roles := map[string]bool{}
	for _, p := range processes {
		g.Expect(p.PID).To(BeNumerically(">", 0))
		state, err := p.Requests.State(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(state.Requests).NotTo(BeEmpty())
		for _, r := range state.Requests {
			g.Expect(r.Component).To(Equal(p.Name.Role()), "request of %s: %+v", p.Name, r)
			roles[r.Component] = true
		}
		g.Expect(p.Requests.Reset(ctx)).To(Succeed())
	}
	g.Expect(roles).To(HaveKey(requests.ComponentBootstrap))
	g.Expect(roles).To(HaveKey(requests.ComponentInfra))
}
