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

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/test/sim/fault"
)

const sharedImportClass = "talos-factory-r1"

// TestSharedImport: the machines of class-based templates that resolve to
// an HTTP import clone one import per namespace, resolution and disk
// shape. It owns the cluster-scoped platform while it runs, so it is not
// parallel with TestClassBasedTemplates; its cases run one after another.
func TestSharedImport(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	platform := &workerclassv1.WorkerPlatform{
		ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.PlatformName},
		Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass:       workerclassv1.TalosClassName,
			KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
			TalosFactory:       workerclassv1.TalosFactoryDefaults{URL: "https://factory.talos.dev", Version: "v1.13.6", SchematicID: schematic},
		},
	}
	g.Expect(c.Create(ctx, platform)).To(Succeed())
	t.Cleanup(func() { g.Expect(c.Delete(ctx, platform)).To(Succeed()) })
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: sharedImportClass}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		KubeVirt:  &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{}}},
	}}
	g.Expect(c.Create(ctx, class)).To(Succeed())
	t.Cleanup(func() { g.Expect(c.Delete(ctx, class)).To(Succeed()) })

	t.Run("the machines of one template clone one import, and so do a second template's", func(t *testing.T) {
		g := NewWithT(t)
		tc := newCluster(t)
		ca := caBundle(t)
		first := factoryTemplate(t, tc, "first", func(tmpl *infrav1.KubeVirtMachineTemplate) {
			tmpl.Spec.Template.Spec.WorkerClass.Talos = &workerclassv1.TalosScalars{ImageFactoryCA: ptr.To(ca)}
		})
		shared := sharedimage.Name(first)
		machines := templateMachines(t, tc, first, 3)
		for _, kvm := range machines {
			expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
			root := rootDataVolume(g, kvm)
			g.Expect(root.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: tc.namespace, Name: shared}), "DataVolume %s clones the shared import", root.Name)
			g.Expect(root.Spec.Source.HTTP).To(BeNil())
			g.Expect(metav1.IsControlledBy(root, kvm)).To(BeTrue())
		}
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
		g.Expect(dv.Spec.Source.HTTP.URL).To(Equal(first.Status.Resolved.Image.HTTPImport.URL))
		g.Expect(dv.Spec.Source.HTTP.CertConfigMap).To(Equal(vmspec.SharedImportCAName(shared)))
		g.Expect(dv.Labels).To(HaveKeyWithValue(vmspec.SharedImageLabel, shared))
		g.Expect(dv.Annotations).To(HaveKeyWithValue(vmspec.ContentHashAnnotation, first.Status.Resolved.ContentHash))
		g.Expect(dv.Finalizers).To(ConsistOf(vmspec.CloneSourceFinalizer))
		g.Expect(dv.OwnerReferences).To(ConsistOf(vmspec.TemplateOwnerReference(first)))
		caMap := &corev1.ConfigMap{}
		g.Expect(c.Get(ctx, key(tc.namespace, vmspec.SharedImportCAName(shared)), caMap)).To(Succeed())
		g.Expect(caMap.Data).To(HaveKeyWithValue(vmspec.ImportCAKey, ca))
		g.Expect(metav1.IsControlledBy(caMap, dv)).To(BeTrue())
		g.Expect(httpImports(g, tc.namespace)).To(ConsistOf(shared), "one download for three machines")

		// Another template of the same resolution shares the import.
		second := factoryTemplate(t, tc, "second", func(tmpl *infrav1.KubeVirtMachineTemplate) {
			tmpl.Spec.Template.Spec.WorkerClass.Talos = &workerclassv1.TalosScalars{ImageFactoryCA: ptr.To(ca)}
		})
		g.Expect(second.Status.Resolved.ContentHash).To(Equal(first.Status.Resolved.ContentHash))
		g.Expect(sharedimage.Name(second)).To(Equal(shared))
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.OwnerReferences).To(ConsistOf(vmspec.TemplateOwnerReference(first), vmspec.TemplateOwnerReference(second)))
		}).Should(Succeed())
		more := templateMachines(t, tc, second, 1)
		expectReady(t, more[0], metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(rootDataVolume(g, more[0]).Spec.Source.PVC.Name).To(Equal(shared))
		g.Expect(httpImports(g, tc.namespace)).To(ConsistOf(shared))

		// A template of another disk size imports its own.
		bigger := factoryTemplate(t, tc, "bigger", func(tmpl *infrav1.KubeVirtMachineTemplate) {
			tmpl.Spec.Template.Spec.WorkerClass.Talos = &workerclassv1.TalosScalars{ImageFactoryCA: ptr.To(ca)}
			tmpl.Spec.Template.Spec.RootDisk.Size = ptr.To(resource.MustParse("20Gi"))
		})
		g.Expect(sharedimage.Name(bigger)).NotTo(Equal(shared))
		g.Eventually(func(g Gomega) {
			g.Expect(httpImports(g, tc.namespace)).To(ConsistOf(shared, sharedimage.Name(bigger)))
		}).Should(Succeed())
	})

	t.Run("a failed import is reported on every waiting machine and retried once", func(t *testing.T) {
		g := NewWithT(t)
		tc := newCluster(t)
		// Both attempts fail: the importer keeps restarting.
		stack.CDI.FailImports(sharedImportIn(tc.namespace), 2)
		tmpl := factoryTemplate(t, tc, "failing", nil)
		shared := sharedimage.Name(tmpl)
		machines := templateMachines(t, tc, tmpl, 2)

		// The first attempt's failure is seen by the machines that happen
		// to reconcile before the retry deletes it; the second's by all.
		dv := &cdiv1.DataVolume{}
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.Annotations).To(HaveKeyWithValue(vmspec.ImportAttemptAnnotation, "2"))
		}).Should(Succeed())
		for _, kvm := range machines {
			g.Eventually(func(g Gomega) {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
				cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ImageImportFailedReason)
				g.Expect(cond.Message).To(HavePrefix(fmt.Sprintf("Shared import DataVolume %s, attempt 2 of 2: its importer pod restarted", shared)))
				g.Expect(cond.Message).To(HaveSuffix("; delete it to import again"))
			}).Should(Succeed())
		}
		retried := dv.UID
		g.Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.UID).To(Equal(retried), "the shared import is retried once, not again")
		}).WithTimeout(3 * time.Second).Should(Succeed())
		g.Expect(rootDataVolumes(g, tc.namespace)).To(BeEmpty(), "no machine clones a failed import")

		// Deleting it imports it again; this time the import succeeds.
		g.Expect(c.Delete(ctx, dv)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.UID).NotTo(Equal(retried))
			g.Expect(dv.Annotations).To(HaveKeyWithValue(vmspec.ImportAttemptAnnotation, "1"))
		}).Should(Succeed())
		for _, kvm := range machines {
			expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		}
		g.Expect(httpImports(g, tc.namespace)).To(ConsistOf(shared))
	})

	t.Run("a deleted shared import is imported again before machines clone it", func(t *testing.T) {
		g := NewWithT(t)
		tc := newCluster(t)
		tmpl := factoryTemplate(t, tc, "lost", nil)
		shared := sharedimage.Name(tmpl)
		first := templateMachines(t, tc, tmpl, 1)[0]
		expectReady(t, first, metav1.ConditionTrue, infrav1.ReadyReason)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
		lost := dv.UID
		// The next import is slow, so that a machine created meanwhile
		// is seen waiting for it.
		stack.CDI.SlowImports(sharedImportIn(tc.namespace), 1, 5*time.Second)
		g.Expect(c.Delete(ctx, dv)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.UID).NotTo(Equal(lost))
		}).Should(Succeed())
		next := templateMachines(t, tc, tmpl, 1)[0]
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(next), next)).To(Succeed())
			cond := expectCondition(g, next, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForImageImportReason)
			g.Expect(cond.Message).To(HavePrefix(fmt.Sprintf("Shared import DataVolume %s: ", shared)))
		}).Should(Succeed())
		expectReady(t, next, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(rootDataVolume(g, next).Spec.Source.PVC.Name).To(Equal(shared))
		expectReady(t, first, metav1.ConditionTrue, infrav1.ReadyReason)
	})

	t.Run("the shared import goes with its last template, once no clone of it is in progress", func(t *testing.T) {
		g := NewWithT(t)
		tc := newCluster(t)
		tmpl := factoryTemplate(t, tc, "gone", nil)
		shared := sharedimage.Name(tmpl)
		dv := &cdiv1.DataVolume{}
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
		}).Should(Succeed())
		// The machine's clone is slow: the template goes while it runs.
		stack.CDI.SlowImports(fault.WithLabels(map[string]string{infrav1.MachineNameLabel: "gone-0"}), 1, 8*time.Second)
		kvm := templateMachines(t, tc, tmpl, 1)[0]
		g.Eventually(func(g Gomega) {
			root := rootDataVolume(g, kvm)
			g.Expect(root.Status.Phase).To(Equal(cdiv1.CloneInProgress))
		}).Should(Succeed())
		g.Expect(c.Delete(ctx, tmpl)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
			g.Expect(dv.DeletionTimestamp.IsZero()).To(BeFalse(), "garbage collection deletes the import of no template")
		}).Should(Succeed())
		g.Expect(rootDataVolume(g, kvm).Status.Phase).NotTo(Equal(cdiv1.Succeeded), "the clone was still in progress")
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Eventually(func(g Gomega) {
			err := c.Get(ctx, key(tc.namespace, shared), dv)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the shared import is released once its clone succeeded: %v", err)
		}).Should(Succeed())
	})
}

// TestSharedImportClassless: the machines Cluster API copies from a
// classless template whose spec.image is an HTTP import wait for the
// template's resolution and clone one import of it, as a class-based
// template's do; a machine that names another image, or has no template,
// imports its own.
func TestSharedImportClassless(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/classless.raw", CABundle: caBundle(t)}}
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	// The instancetype comes late, so the machines are created before
	// the template is resolved.
	spec.CPU, spec.Memory = nil, nil
	spec.Instancetype = &infrav1.InstancetypeReference{Kind: infrav1.NamespacedInstancetypeKind, Name: "late"}
	tmpl := classlessTemplate(tc.namespace, "classless", spec)
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
	}).Should(Succeed())

	machines := templateMachines(t, tc, tmpl, 3)
	for _, kvm := range machines {
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForTemplateReason)
			g.Expect(cond.Message).To(HavePrefix("KubeVirtMachineTemplate classless is not resolved yet: spec.template.spec.instancetype.name: Not found"))
		}).Should(Succeed())
	}
	g.Expect(httpImports(g, tc.namespace)).To(BeEmpty(), "a copy of the template's image waits for its resolution instead of importing it")

	g.Expect(c.Create(ctx, &instancetypev1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: tc.namespace},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 2},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")},
		},
	})).To(Succeed())
	waitResolved(t, tmpl)
	g.Expect(sharedimage.Shared(tmpl)).To(BeTrue())
	shared := sharedimage.Name(tmpl)
	for _, kvm := range machines {
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		root := rootDataVolume(g, kvm)
		g.Expect(root.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: tc.namespace, Name: shared}), "DataVolume %s clones the shared import", root.Name)
	}
	dv := &cdiv1.DataVolume{}
	g.Expect(c.Get(ctx, key(tc.namespace, shared), dv)).To(Succeed())
	g.Expect(dv.Spec.Source.HTTP.URL).To(Equal(spec.Image.HTTPImport.URL))
	g.Expect(dv.Annotations).To(HaveKeyWithValue(vmspec.ContentHashAnnotation, tmpl.Status.Resolved.ContentHash))
	g.Expect(dv.OwnerReferences).To(ConsistOf(vmspec.TemplateOwnerReference(tmpl)))
	caMap := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, key(tc.namespace, vmspec.SharedImportCAName(shared)), caMap)).To(Succeed())
	g.Expect(caMap.Data).To(HaveKeyWithValue(vmspec.ImportCAKey, spec.Image.HTTPImport.CABundle))
	g.Expect(httpImports(g, tc.namespace)).To(ConsistOf(shared), "one download for three machines")

	// A machine of the template that names another image gets the bytes
	// its own spec names; so does one of the same image without a
	// template.
	ownSpec := *spec.DeepCopy()
	ownSpec.Image.HTTPImport.URL = "https://images.example.com/other.raw"
	own := tc.machine(t, "own-image", ownSpec, func(_ *clusterv1.Machine, k *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		k.Annotations = map[string]string{
			clusterv1.TemplateClonedFromNameAnnotation:      tmpl.Name,
			clusterv1.TemplateClonedFromGroupKindAnnotation: "KubeVirtMachineTemplate.infrastructure.cozystack.io",
		}
	})
	standalone := tc.machine(t, "standalone", spec)
	for _, kvm := range []*infrav1.KubeVirtMachine{own, standalone} {
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		root := rootDataVolume(g, kvm)
		g.Expect(root.Spec.Source.PVC).To(BeNil(), "DataVolume %s imports its machine's own image", root.Name)
		g.Expect(root.Spec.Source.HTTP.URL).To(Equal(kvm.Spec.Image.HTTPImport.URL))
	}
	g.Expect(httpImports(g, tc.namespace)).To(ConsistOf(shared, vmspec.RootDataVolumeName(own.Name), vmspec.RootDataVolumeName(standalone.Name)))
}

// factoryTemplate creates a template of the Talos factory class with a
// 10Gi root disk and waits for its resolution.
func factoryTemplate(t *testing.T, tc *testCluster, name string, mutate func(*infrav1.KubeVirtMachineTemplate)) *infrav1.KubeVirtMachineTemplate {
	t.Helper()
	spec := containerDiskSpec()
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	tmpl := classTemplate(tc.namespace, name, sharedImportClass, "v1.35", spec)
	if mutate != nil {
		mutate(tmpl)
	}
	NewWithT(t).Expect(c.Create(context.Background(), tmpl)).To(Succeed())
	waitResolved(t, tmpl)
	NewWithT(t).Expect(sharedimage.Shared(tmpl)).To(BeTrue())
	return tmpl
}

// templateMachines creates n machines as Cluster API clones them from the
// template, named after it.
func templateMachines(t *testing.T, tc *testCluster, tmpl *infrav1.KubeVirtMachineTemplate, n int) []*infrav1.KubeVirtMachine {
	t.Helper()
	existing := &infrav1.KubeVirtMachineList{}
	NewWithT(t).Expect(c.List(context.Background(), existing, client.InNamespace(tc.namespace))).To(Succeed())
	offset := 0
	for _, m := range existing.Items {
		if strings.HasPrefix(m.Name, tmpl.Name+"-") {
			offset++
		}
	}
	out := make([]*infrav1.KubeVirtMachine, 0, n)
	for i := range n {
		out = append(out, tc.machine(t, fmt.Sprintf("%s-%d", tmpl.Name, offset+i), tmpl.Spec.Template.Spec,
			func(_ *clusterv1.Machine, k *infrav1.KubeVirtMachine, _ *corev1.Secret) {
				k.Annotations = map[string]string{
					clusterv1.TemplateClonedFromNameAnnotation:      tmpl.Name,
					clusterv1.TemplateClonedFromGroupKindAnnotation: "KubeVirtMachineTemplate.infrastructure.cozystack.io",
				}
			}))
	}
	return out
}

// sharedImportIn selects the shared imports of a namespace for CDI's
// faults.
func sharedImportIn(namespace string) fault.Selector {
	inNamespace := fault.InNamespace(namespace)
	return func(o client.Object) bool {
		_, shared := o.GetLabels()[vmspec.SharedImageLabel]
		return shared && inNamespace(o)
	}
}

func rootDataVolume(g Gomega, kvm *infrav1.KubeVirtMachine) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{}
	g.Expect(c.Get(context.Background(), key(kvm.Namespace, vmspec.RootDataVolumeName(kvm.Name)), dv)).To(Succeed())
	return dv
}

// httpImports lists the DataVolumes of a namespace that download.
func httpImports(g Gomega, namespace string) []string {
	dvs := &cdiv1.DataVolumeList{}
	g.Expect(c.List(context.Background(), dvs, client.InNamespace(namespace))).To(Succeed())
	var names []string
	for _, dv := range dvs.Items {
		if dv.Spec.Source != nil && dv.Spec.Source.HTTP != nil {
			names = append(names, dv.Name)
		}
	}
	return names
}

// rootDataVolumes lists the machines' DataVolumes of a namespace.
func rootDataVolumes(g Gomega, namespace string) []string {
	dvs := &cdiv1.DataVolumeList{}
	g.Expect(c.List(context.Background(), dvs, client.InNamespace(namespace), client.HasLabels{infrav1.MachineNameLabel})).To(Succeed())
	names := make([]string, 0, len(dvs.Items))
	for _, dv := range dvs.Items {
		names = append(names, dv.Name)
	}
	return names
}
