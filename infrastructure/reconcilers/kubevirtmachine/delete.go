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

package kubevirtmachine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// Deleting a machine: its VM, instance and disks are deleted, and the
// finalizer stays until they are gone.

// reconcileDelete deletes the machine's VM, instance and disks and keeps the
// finalizer until all of them are gone. The watches on them bring the
// machine back here when each one disappears.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) error {
	log := ctrl.LoggerFrom(ctx)
	kvm := s.kubeVirtMachine
	key := client.ObjectKeyFromObject(kvm)
	infra := r.Infrastructure
	var pending []string
	waitFor := func(reader client.Reader, obj client.Object, kind string, ours func(client.Object) bool) error {
		if err := reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: obj.GetName()}, obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !ours(obj) {
			return nil
		}
		pending = append(pending, fmt.Sprintf("%s %s", kind, obj.GetName()))
		if !obj.GetDeletionTimestamp().IsZero() {
			return nil
		}
		if err := infra.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", kind, obj.GetName(), err)
		}
		log.Info("Deleting the machine's "+kind, kind, klog.KObj(obj))
		return nil
	}
	controlled := func(o client.Object) bool { return infra.Controls(o, kvm) }
	labelled := func(o client.Object) bool { return infra.Labelled(o, kvm) }

	waitForAll := func(reader client.Reader) error {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
		vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
		dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: vmspec.RootDataVolumeName(key.Name)}}
		return kerrors.NewAggregate([]error{
			waitFor(reader, vm, "VirtualMachine", controlled),
			waitFor(reader, vmi, "VirtualMachineInstance", labelled),
			waitFor(reader, dv, "DataVolume", controlled),
		})
	}
	if err := waitForAll(infra.Client); err != nil {
		return err
	}
	if len(pending) == 0 {
		// The cache says all is gone; the finalizer is the last guard of
		// the VM and its disks, so the API server confirms it (a VM created
		// moments ago may not be in the cache yet).
		if err := waitForAll(infra.Reader); err != nil {
			return err
		}
	}
	setConditions(kvm, deletingConditions(pending)...)
	if len(pending) > 0 {
		return nil
	}

	// The VM is gone: its bootstrap data and CA go now rather than with
	// garbage collection.
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: vmspec.UserDataSecretName(key.Name)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: vmspec.ImportCAConfigMapName(key.Name)}},
	} {
		if err := r.deleteIfControlled(ctx, kvm, obj); err != nil {
			return err
		}
	}
	controllerutil.RemoveFinalizer(kvm, infrav1.MachineFinalizer)
	log.Info("The machine's VirtualMachine and disks are deleted; releasing the finalizer")
	return nil
}

func (r *Reconciler) deleteIfControlled(ctx context.Context, kvm *infrav1.KubeVirtMachine, obj client.Object) error {
	infra := r.Infrastructure
	if err := infra.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !infra.Controls(obj, kvm) {
		return nil
	}
	return client.IgnoreNotFound(infra.Client.Delete(ctx, obj))
}
