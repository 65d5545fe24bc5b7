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
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// hostileMachines is how many Machines the hostile tenant makes.
const hostileMachines = 300

// TestATenantCannotStallAnothersPool: the bootstrap provider runs as its
// shipped role with its production concurrency and reconcile timeout. One
// tenant, as its own user, makes hundreds of Machines and KairosConfigs
// whose infrastructure reference names a kind that role cannot list (a
// contract CRD, the harness's hosted control plane): read through the
// shared cache, each would hold a worker for a minute. Another tenant's
// pool scales up beside them and joins as it joined alone (the ratio is
// logged, not asserted), and every hostile config reports
// InfrastructureKindNotSupported.
func TestATenantCannotStallAnothersPool(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	victim := newCluster(t, harness.ClusterOptions{})
	hostileKey := client.ObjectKey{Namespace: victim.Key.Namespace + "-hostile", Name: "tenant"}
	hostile, err := h.CreateCluster(ctx, hostileKey, harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { h.ReleaseCluster(hostile.Key) })

	start := time.Now()
	poolOf(victim).apply(t, map[string]string{"WORKER_MACHINE_COUNT": "1"})
	poolOf(victim).expectJoined(t, 1)
	alone := time.Since(start)

	tenant := tenantClient(t, hostileKey.Namespace)
	labels := map[string]string{clusterv1.ClusterNameLabel: hostileKey.Name}
	for i := range hostileMachines {
		name := fmt.Sprintf("hostile-%d", i)
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostileKey.Namespace, Name: name, Labels: labels},
			Spec: clusterv1.MachineSpec{
				ClusterName: hostileKey.Name,
				Version:     "v1.36.3",
				Bootstrap:   clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: "controlplane.harness.cozystack.io", Kind: "HostedControlPlane", Name: name},
			},
		}
		g.Expect(tenant.Create(ctx, machine)).To(Succeed())
		g.Expect(tenant.Create(ctx, &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{
			Namespace: hostileKey.Namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: machine.UID}},
		}})).To(Succeed())
	}

	start = time.Now()
	scaleTo(t, h, poolOf(victim), 2)
	poolOf(victim).expectJoined(t, 2)
	beside := time.Since(start)
	t.Logf("the pool's machine joined in %s alone and in %s beside %d hostile Machines: ratio %.2f",
		alone.Round(time.Millisecond), beside.Round(time.Millisecond), hostileMachines, float64(beside)/float64(alone))

	g.Eventually(func(g Gomega) {
		list := &bootstrapv1.KairosConfigList{}
		g.Expect(h.Client.List(ctx, list, client.InNamespace(hostileKey.Namespace))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(hostileMachines))
		for _, cfg := range list.Items {
			cond := conditions.Get(&cfg, bootstrapv1.DataSecretAvailableCondition)
			g.Expect(cond).NotTo(BeNil(), cfg.Name)
			g.Expect(cond.Reason).To(Equal(bootstrapv1.InfrastructureKindNotSupportedReason), cfg.Name)
			g.Expect(cond.Message).To(ContainSubstring(`spec.infrastructureRef: Unsupported value: "HostedControlPlane.controlplane.harness.cozystack.io"`))
		}
	}, timeout, poll).Should(Succeed())
}

// tenantClient is a tenant's own user, who may write Machines and
// KairosConfigs in its namespace and nothing else.
func tenantClient(t *testing.T, namespace string) client.Client {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	user := "tenant-" + namespace
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{"machines"}, Verbs: []string{"create", "get", "list"}},
		{APIGroups: []string{bootstrapv1.GroupVersion.Group}, Resources: []string{"kairosconfigs"}, Verbs: []string{"create", "get", "list"}},
	}}
	g.Expect(h.Client.Create(ctx, role)).To(Succeed())
	g.Expect(h.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
	cfg, err := h.Management.AddUser(user, "system:authenticated")
	g.Expect(err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = 200, 400
	c, err := client.New(cfg, client.Options{Scheme: h.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}
