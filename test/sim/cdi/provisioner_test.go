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

package cdi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestClaimBindFinishesAfterAFailedStatusUpdate: a bind that set the
// claim's volumeName but failed on its status (real CDI's controller
// updates the claim's annotations at the same time, and the status update
// conflicts) is finished by the next reconcile. Real CDI showed it in
// make test-node: the claim stayed Pending with its volumeName set, and
// the kubelet never mounted it into the importer Pod.
func TestClaimBindFinishesAfterAFailedStatusUpdate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", UID: "claim-uid"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	conflicted := false
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pvc).
		WithStatusSubresource(&corev1.PersistentVolumeClaim{}, &corev1.PersistentVolume{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if _, ok := obj.(*corev1.PersistentVolumeClaim); ok && !conflicted {
					conflicted = true
					return apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, obj.GetName(), nil)
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	c := New(Options{VolumeDir: t.TempDir()})
	c.client = cl
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pvc)}

	_, err := c.reconcileClaim(ctx, req)
	g.Expect(err).To(HaveOccurred(), "the claim's status update conflicted")
	got := &corev1.PersistentVolumeClaim{}
	g.Expect(cl.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Spec.VolumeName).NotTo(BeEmpty(), "the claim has its volume")
	g.Expect(got.Status.Phase).NotTo(Equal(corev1.ClaimBound))

	_, err = c.reconcileClaim(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cl.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(corev1.ClaimBound), "the next reconcile finished the bind")
	pv := &corev1.PersistentVolume{}
	g.Expect(cl.Get(ctx, client.ObjectKey{Name: got.Spec.VolumeName}, pv)).To(Succeed())
	g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound))
	g.Expect(pv.Spec.ClaimRef.Name).To(Equal(pvc.Name))
}

// TestAVolumeIsReleasedBeforeItIsDeleted: when a claim is gone, its
// volume is marked Released before it is deleted. The apiserver gives
// every volume the kubernetes.io/pv-protection finalizer, and
// kube-controller-manager's PV protection controller removes it only from
// a volume that is not Bound: the stand-in deleted volumes still Bound,
// and real CDI's make test-node scenario found the shared import's volume
// Terminating for good after its claim was gone.
func TestAVolumeIsReleasedBeforeItIsDeleted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	dir := t.TempDir()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-claim-uid", Finalizers: []string{"kubernetes.io/pv-protection"}},
		Spec: corev1.PersistentVolumeSpec{
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "ns", Name: "disk", UID: "claim-uid"},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(dir, "ns-disk-claim-uid")}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	g.Expect(os.MkdirAll(pv.Spec.HostPath.Path, 0o750)).To(Succeed())
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pv).WithStatusSubresource(&corev1.PersistentVolume{}).Build()
	c := New(Options{VolumeDir: dir})
	c.client = cl

	_, err := c.reconcileClaim(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "disk"}})
	g.Expect(err).NotTo(HaveOccurred())
	got := &corev1.PersistentVolume{}
	g.Expect(cl.Get(ctx, client.ObjectKeyFromObject(pv), got)).To(Succeed(), "the finalizer keeps the deleted volume")
	g.Expect(got.DeletionTimestamp.IsZero()).To(BeFalse(), "the volume is deleted")
	g.Expect(got.Status.Phase).To(Equal(corev1.VolumeReleased), "the PV protection controller frees a volume that is not Bound")
	g.Expect(pv.Spec.HostPath.Path).NotTo(BeADirectory())
}
