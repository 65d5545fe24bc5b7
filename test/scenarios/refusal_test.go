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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestVirtualMachineRefusedByKubeVirt: a pool's machines have fewer vCPUs
// than their preference requires (KubeVirt's common preference oraclelinux
// asks for 2). The template resolves (KubeVirt's feature gates and
// permitted devices, which the template controller checks, allow it), but
// virt-api refuses the VirtualMachine; the machine reports the refusal in
// KubeVirt's words on InfrastructureReady (Unknown: a replacement would be
// refused too, so the MachineHealthCheck does not churn Machines over it),
// asks again only after a minute, and what it created before the VM (the
// cloud-init Secret) belongs to it and goes with the Cluster.
func TestVirtualMachineRefusedByKubeVirt(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	w := newCluster(t, harness.ClusterOptions{})
	objs := poolOf(w).render(t, map[string]string{"WORKER_MACHINE_COUNT": "1", "WORKER_CPU_CORES": "1"})
	harness.EditMachineTemplates(objs, func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["preference"] = map[string]any{"name": "oraclelinux"}
	})
	g.Expect(h.Apply(ctx, objs)).To(Succeed())

	var refused clusterv1.Machine
	g.Eventually(func(g Gomega) {
		ms := poolOf(w).machines(g)
		g.Expect(ms).To(HaveLen(1))
		refused = ms[0]
		c := conditions.Get(&refused, clusterv1.MachineInfrastructureReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionUnknown))
		g.Expect(c.Reason).To(Equal(infrav1.CreateRefusedReason))
		g.Expect(c.Message).To(ContainSubstring(`admission webhook "virtualmachine-validator.kubevirt.io" denied the request`))
		g.Expect(c.Message).To(ContainSubstring("failure checking preference requirements: insufficient CPU resources of 1 vCPU"))
	}, timeout, poll).Should(Succeed(), func() string { return describe(w) })

	kvm := &infrav1.KubeVirtMachine{}
	kvmKey := client.ObjectKey{Namespace: w.Key.Namespace, Name: refused.Spec.InfrastructureRef.Name}
	g.Expect(h.Client.Get(ctx, kvmKey, kvm)).To(Succeed())
	// No VM, and no retry storm: the machine's status is written once and
	// left alone (the next try is a minute away).
	g.Consistently(func(g Gomega) {
		g.Expect(client.IgnoreNotFound(h.Client.Get(ctx, kvmKey, &kubevirtv1.VirtualMachine{}))).To(Succeed())
		current := &infrav1.KubeVirtMachine{}
		g.Expect(h.Client.Get(ctx, kvmKey, current)).To(Succeed())
		g.Expect(current.ResourceVersion).To(Equal(kvm.ResourceVersion))
		vms := &kubevirtv1.VirtualMachineList{}
		g.Expect(h.Client.List(ctx, vms, client.InNamespace(w.Key.Namespace))).To(Succeed())
		g.Expect(vms.Items).To(BeEmpty())
	}, 10*time.Second, time.Second).Should(Succeed())
	secret := &corev1.Secret{}
	g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: kvm.Name + "-userdata"}, secret)).To(Succeed())
	g.Expect(metav1.IsControlledBy(secret, kvm)).To(BeTrue())

	g.Expect(h.DeleteCluster(ctx, w.Key, timeout)).To(Succeed())
	expectNoOrphans(t, w)
}
