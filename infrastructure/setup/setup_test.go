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

package setup

import (
	"reflect"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/kubevirtmachine"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// TestCachedSecretsAreCutDown: both caches transform the Secrets they
// select with the machine controller's transform, which keeps only what
// the controller reads (its own test pins what is kept).
func TestCachedSecretsAreCutDown(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	management, err := ManagerCacheOptions(scheme, "secret-cache-test", "", time.Hour)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	infrastructure, err := InfrastructureCacheOptions(scheme, "secret-cache-test-infrastructure", "", time.Hour)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for name, opts := range map[string]ctrlcache.Options{"management": management, "infrastructure": infrastructure} {
		transform := cacheEntry(opts, &corev1.Secret{}).Transform
		NewWithT(t).Expect(reflect.ValueOf(transform).Pointer()).To(Equal(reflect.ValueOf(kubevirtmachine.StripUnreadSecretData).Pointer()), name)
	}
}

// TestCachedMachinesAreCutDown: the manager caches Machines through
// watchview.CachedMachine, which keeps the nodeRef that tells the
// controller the node joined (its own test pins what is kept).
func TestCachedMachinesAreCutDown(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	opts, err := ManagerCacheOptions(scheme, "machine-cache-test", "", time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	transform := cacheEntry(opts, &clusterv1.Machine{}).Transform
	g.Expect(reflect.ValueOf(transform).Pointer()).To(Equal(reflect.ValueOf(watchview.CachedMachine).Pointer()))
}

// cacheEntry is the ByObject entry of opts for obj's kind; the zero entry
// when there is none.
func cacheEntry(opts ctrlcache.Options, obj client.Object) ctrlcache.ByObject {
	for o, by := range opts.ByObject {
		if reflect.TypeOf(o) == reflect.TypeOf(obj) {
			return by
		}
	}
	return ctrlcache.ByObject{}
}

// TestCachedVMsAndInstancesKeepOnlyWhatTheControllerReads: the
// machines' own VMs and instances are selected by their machine-name label
// in the management cluster's cache and in an infrastructure cluster's, and
// transformed by the machine controller's transforms, which drop
// managedFields as the default transform they replace does, and what the
// controller never reads (kubevirtmachine's tests pin what is kept).
func TestCachedVMsAndInstancesKeepOnlyWhatTheControllerReads(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(AddToScheme(scheme)).To(Succeed())
	management, err := ManagerCacheOptions(scheme, "vm-cache-test", "", time.Hour)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	infrastructure, err := InfrastructureCacheOptions(scheme, "vm-cache-test-infrastructure", "", time.Hour)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	managed := []metav1.ManagedFieldsEntry{{Manager: "virt-controller"}}
	for name, opts := range map[string]ctrlcache.Options{"management": management, "infrastructure": infrastructure} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			vms, instances := cacheEntry(opts, &kubevirtv1.VirtualMachine{}), cacheEntry(opts, &kubevirtv1.VirtualMachineInstance{})
			for _, by := range []ctrlcache.ByObject{vms, instances} {
				g.Expect(by.Label).NotTo(BeNil())
				g.Expect(by.Label.String()).To(Equal(infrav1.MachineNameLabel))
				g.Expect(by.Transform).NotTo(BeNil())
			}

			out, err := vms.Transform(&kubevirtv1.VirtualMachine{
				ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{infrav1.MachineNameLabel: "w"}, ManagedFields: managed},
				Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
					Spec: kubevirtv1.VirtualMachineInstanceSpec{Hostname: "w"}}},
			})
			g.Expect(err).NotTo(HaveOccurred())
			vm := out.(*kubevirtv1.VirtualMachine)
			g.Expect(vm.ManagedFields).To(BeNil())
			g.Expect(vm.Labels).To(HaveKeyWithValue(infrav1.MachineNameLabel, "w"))
			g.Expect(vm.Spec.RunStrategy).To(HaveValue(Equal(kubevirtv1.RunStrategyAlways)))
			g.Expect(vm.Spec.Template.Spec.Hostname).To(BeEmpty(), "the VM's template is not read")

			out, err = instances.Transform(&kubevirtv1.VirtualMachineInstance{
				ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: managed},
				Spec:       kubevirtv1.VirtualMachineInstanceSpec{Hostname: "w", Subdomain: "workers"},
				Status:     kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, LauncherContainerImageVersion: "v1.7.0"},
			})
			g.Expect(err).NotTo(HaveOccurred())
			vmi := out.(*kubevirtv1.VirtualMachineInstance)
			g.Expect(vmi.ManagedFields).To(BeNil())
			g.Expect(vmi.Spec.Hostname).To(Equal("w"))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
			g.Expect(vmi.Spec.Subdomain).To(BeEmpty(), "not read")
			g.Expect(vmi.Status.LauncherContainerImageVersion).To(BeEmpty(), "not read")
		})
	}
}
