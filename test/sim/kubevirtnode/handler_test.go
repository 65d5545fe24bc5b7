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

package kubevirtnode

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestInstanceReportedRunningAfterAFailedReport: the virt-handler stand-in
// starts a Scheduled instance's guest and reports it Running; when that
// report fails (the management apiserver was killed under the update),
// the next sync reports the running guest again, as virt-handler reports
// its domain on every sync. It used to find the guest started and do
// nothing, which left the instance Scheduled for good and its Machine to
// the MachineHealthCheck (the fault suite's management apiserver restart).
func TestInstanceReportedRunningAfterAFailedReport(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(kubevirtv1.AddToScheme(scheme)).To(Succeed())

	h := New(Options{})
	t.Cleanup(h.stop)
	node := h.opts.Nodes[0].Name
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "worker-0", UID: "vmi-uid"},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{
			Interfaces: []kubevirtv1.Interface{{Name: "default"}},
		}}},
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			Phase:    kubevirtv1.Scheduled,
			NodeName: node,
			PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
				{Phase: kubevirtv1.Scheduled, PhaseTransitionTimestamp: metav1.NewTime(time.Now().Add(-time.Minute))},
			},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "virt-launcher-worker-0-abcde", Labels: map[string]string{kubevirtv1.CreatedByLabel: string(vmi.UID)}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.10"},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi, pod).Build()
	failures := 1
	h.client = c
	h.handlers[node] = interceptor.NewClient(c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if failures > 0 {
				failures--
				return errors.New(`Put "https://127.0.0.1:6443/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/worker-0": EOF`)
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vmi)}

	_, err := h.reconcileInstance(ctx, req)
	g.Expect(err).To(MatchError(ContainSubstring("EOF")))
	g.Expect(h.guestOf(vmi.UID)).NotTo(BeNil(), "the guest started before the report failed")

	_, err = h.reconcileInstance(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	got := &kubevirtv1.VirtualMachineInstance{}
	g.Expect(c.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(kubevirtv1.Running))
	g.Expect(got.Status.Interfaces).To(HaveLen(1))
	g.Expect(got.Status.Interfaces[0].IP).To(Equal(pod.Status.PodIP))
}
