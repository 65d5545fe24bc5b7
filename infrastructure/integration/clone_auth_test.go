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
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// cloneSourceRole is what CDI asks of whoever clones from a namespace: the
// role a source namespace's owner binds to those who may clone from it.
const cloneSourceRole = "integration-clone-source"

// tenantRole lets a tenant write the provider's objects and DataSources in
// its own namespace.
const tenantRole = "integration-tenant"

func ensureClusterRoles(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	for _, role := range []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: cloneSourceRole}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{cdiv1.SchemeGroupVersion.Group}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: tenantRole}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"kubevirtmachinetemplates", "kubevirtmachines"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{cdiv1.SchemeGroupVersion.Group}, Resources: []string{"datasources"}, Verbs: []string{"create", "get", "update"}},
		}},
	} {
		g.Expect(client.IgnoreAlreadyExists(c.Create(context.Background(), role))).To(Succeed())
	}
}

// bind binds a cluster role to a subject in a namespace.
func bind(t *testing.T, namespace, role string, subject rbacv1.Subject) {
	t.Helper()
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role + "-" + rand.String(6)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}
	NewWithT(t).Expect(c.Create(context.Background(), binding)).To(Succeed())
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// namespaceServiceAccount is the identity a machine's namespace clones as.
func namespaceServiceAccount(namespace string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "default"}
}

// tenantClient is a client that authenticates as a tenant user.
func tenantClient(t *testing.T, name string) client.Client {
	t.Helper()
	g := NewWithT(t)
	cfg, err := env.AddUser(name, "system:authenticated")
	g.Expect(err).NotTo(HaveOccurred())
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return cl
}

// expectRefused expects a create refused by the provider's admission with
// a field error on path whose text contains detail.
func expectRefused(g Gomega, err error, path, detail string) {
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want a field error on %s, got %v", path, err)
	g.Expect(err.Error()).To(ContainSubstring(path))
	g.Expect(err.Error()).To(ContainSubstring(detail))
}

// TestClonesAreAuthorizedAsTheTenant: two tenants, each with its own
// namespace and user, and a golden namespace that only the first may clone
// from. Everything a tenant writes that clones from elsewhere is decided by
// CDI's rules for that tenant, never by the provider's own cluster-wide
// permission: at admission as the user, and before the DataVolume is
// created as the machine's namespace.
func TestClonesAreAuthorizedAsTheTenant(t *testing.T) {
	ensureClusterRoles(t)
	golden := fmt.Sprintf("golden-%s", rand.String(5))
	goldenImage(t, golden, "talos")
	alice, mallory := newCluster(t), newCluster(t)
	aliceName, malloryName := "alice-"+rand.String(5), "mallory-"+rand.String(5)
	bind(t, alice.namespace, tenantRole, user(aliceName))
	bind(t, mallory.namespace, tenantRole, user(malloryName))
	bind(t, golden, cloneSourceRole, user(aliceName))
	bind(t, golden, cloneSourceRole, namespaceServiceAccount(alice.namespace))
	asAlice, asMallory := tenantClient(t, aliceName), tenantClient(t, malloryName)
	ctx := context.Background()

	fromGolden := func(kind infrav1.CloneSourceKind) infrav1.KubeVirtMachineSpec {
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: kind, Namespace: golden, Name: "talos"}}
		return spec
	}
	insufficient := "insufficient permissions in clone source namespace " + golden

	t.Run("a tenant without the right in the source namespace is refused a template", func(t *testing.T) {
		g := NewWithT(t)
		for _, kind := range []infrav1.CloneSourceKind{infrav1.CloneFromDataSource, infrav1.CloneFromPersistentVolumeClaim} {
			err := asMallory.Create(ctx, classlessTemplate(mallory.namespace, "steal-"+rand.String(4), fromGolden(kind)))
			expectRefused(g, err, "spec.template.spec.image.clone.namespace", insufficient)
			g.Expect(err.Error()).To(ContainSubstring(malloryName))
		}
	})

	t.Run("a tenant with the right in the source namespace may clone from it", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(asAlice.Create(ctx, classlessTemplate(alice.namespace, "golden-"+rand.String(4), fromGolden(infrav1.CloneFromDataSource)))).To(Succeed())
	})

	t.Run("a tenant is refused a KubeVirtMachine that clones from another namespace", func(t *testing.T) {
		g := NewWithT(t)
		kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "steal-" + rand.String(4)}, Spec: fromGolden(infrav1.CloneFromPersistentVolumeClaim)}
		expectRefused(g, asMallory.Create(ctx, kvm), "spec.image.clone.namespace", insufficient)
	})

	t.Run("a DataSource of the tenant's own that points into another namespace is authorized where it points", func(t *testing.T) {
		g := NewWithT(t)
		redirect := &cdiv1.DataSource{
			ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "redirect-" + rand.String(4)},
			Spec:       cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: golden, Name: "talos"}}},
		}
		g.Expect(asMallory.Create(ctx, redirect)).To(Succeed())
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: redirect.Name}}
		expectRefused(g, asMallory.Create(ctx, classlessTemplate(mallory.namespace, "redirect-"+rand.String(4), spec)),
			"spec.template.spec.image.clone.namespace", insufficient)

		// Written past admission (an administrator's machine, or a
		// DataSource changed after its template was admitted), the
		// controller asks as the machine's namespace and creates no
		// DataVolume.
		kvm := mallory.machine(t, "redirected", spec)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.CloneSourceForbiddenReason)
			g.Expect(cond.Message).To(HavePrefix("spec.image.clone: User system:serviceaccount:" + mallory.namespace + ":default has " + insufficient))
		}).WithTimeout(time.Minute).Should(Succeed(), func() string { return describe(mallory.namespace) })
		dv := &cdiv1.DataVolume{}
		g.Consistently(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, key(mallory.namespace, "redirected-root"), dv))
		}).WithTimeout(3*time.Second).Should(BeTrue(), "no DataVolume is created for a refused clone")
	})

	t.Run("a clone source that does not exist is refused by name", func(t *testing.T) {
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "absent"}}
		expectRefused(g, asMallory.Create(ctx, classlessTemplate(mallory.namespace, "absent-"+rand.String(4), spec)),
			"spec.template.spec.image.clone.name", "DataSource "+mallory.namespace+"/absent does not exist")
	})

	t.Run("a machine copied from an admitted template waits for a clone source deleted since", func(t *testing.T) {
		g := NewWithT(t)
		goldenImage(t, mallory.namespace, "short-lived")
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "short-lived"}}
		tmpl := classlessTemplate(mallory.namespace, "short-lived", spec)
		g.Expect(asMallory.Create(ctx, tmpl)).To(Succeed())
		g.Expect(c.Delete(ctx, &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "short-lived"}})).To(Succeed())
		kvm := mallory.machine(t, "copied", spec, func(_ *clusterv1.Machine, kvm *infrav1.KubeVirtMachine, _ *corev1.Secret) {
			kvm.Annotations = map[string]string{
				clusterv1.TemplateClonedFromNameAnnotation:      tmpl.Name,
				clusterv1.TemplateClonedFromGroupKindAnnotation: infrav1.GroupVersion.WithKind("KubeVirtMachineTemplate").GroupKind().String(),
			}
		})
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForCloneSourceReason)
			g.Expect(cond.Message).To(Equal("spec.image.clone: DataSource " + mallory.namespace + "/short-lived does not exist"))
		}).WithTimeout(time.Minute).Should(Succeed(), func() string { return describe(mallory.namespace) })
	})

	t.Run("a machine without spec.image is authorized for its classless template's clone", func(t *testing.T) {
		g := NewWithT(t)
		// Mallory's template clones her own DataSource, which points at
		// her own claim: nothing to refuse at admission. Once it is
		// resolved she repoints the DataSource into the golden namespace
		// and writes a machine that names no image of its own, which
		// admission has nothing to check on.
		goldenImage(t, mallory.namespace, "own-disk")
		steer := &cdiv1.DataSource{
			ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "steer-" + rand.String(4)},
			Spec:       cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: mallory.namespace, Name: "own-disk"}}},
		}
		g.Expect(asMallory.Create(ctx, steer)).To(Succeed())
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: steer.Name}}
		tmpl := classlessTemplate(mallory.namespace, "steer-"+rand.String(4), spec)
		g.Expect(asMallory.Create(ctx, tmpl)).To(Succeed())
		waitResolved(t, tmpl)
		steer.Spec.Source.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: golden, Name: "talos"}
		g.Expect(asMallory.Update(ctx, steer)).To(Succeed())

		bare := containerDiskSpec()
		bare.Image = nil
		fromTemplate := func(_ *clusterv1.Machine, kvm *infrav1.KubeVirtMachine, _ *corev1.Secret) {
			kvm.Annotations = map[string]string{
				clusterv1.TemplateClonedFromNameAnnotation:      tmpl.Name,
				clusterv1.TemplateClonedFromGroupKindAnnotation: infrav1.GroupVersion.WithKind("KubeVirtMachineTemplate").GroupKind().String(),
			}
		}
		own := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "bare"}, Spec: bare}
		fromTemplate(nil, own, nil)
		g.Expect(asMallory.Create(ctx, own, client.DryRunAll)).To(Succeed(), "admission lets the tenant write a machine without spec.image")

		kvm := mallory.machine(t, "bare", bare, fromTemplate)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.CloneSourceForbiddenReason)
			g.Expect(cond.Message).To(HavePrefix("KubeVirtMachineTemplate " + tmpl.Name + " spec.template.spec.image.clone: User system:serviceaccount:" + mallory.namespace + ":default has " + insufficient))
		}).WithTimeout(time.Minute).Should(Succeed(), func() string { return describe(mallory.namespace) })
		g.Consistently(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, key(mallory.namespace, "bare-root"), &cdiv1.DataVolume{}))
		}).WithTimeout(3*time.Second).Should(BeTrue(), "no DataVolume is created for a refused clone")
	})

	t.Run("a machine of the tenant allowed in the source namespace clones from it", func(t *testing.T) {
		g := NewWithT(t)
		kvm := alice.machine(t, "golden", fromGolden(infrav1.CloneFromDataSource))
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(alice.namespace, "golden-root"), dv)).To(Succeed())
		// The DataVolume names the claim the DataSource pointed at when
		// it was authorized, not the DataSource, which CDI would read
		// again and its owner may repoint meanwhile.
		g.Expect(dv.Spec.SourceRef).To(BeNil())
		g.Expect(dv.Spec.Source).To(Equal(&cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: golden, Name: "talos"}}))
	})
}

// statusWriterRole adds what a tenant may hold on top of tenantRole: the
// status subresource of templates, with which it can write the first
// resolution of a template before the controller does.
const statusWriterRole = "integration-template-status-writer"

// TestACloneIsAuthorizedFromWhatWasWrittenNotFromStatus writes, as a
// tenant who may write a template's status, a resolution that names
// another namespace's disk under a class. Whether the clone goes ahead
// without the tenant's authorization is decided from the template's spec
// and the hoster's golden catalog, never from the status alone: the forged
// resolution is authorized as the tenant and refused, while a class's
// golden image of the catalog is cloned for a tenant who may not read it.
func TestACloneIsAuthorizedFromWhatWasWrittenNotFromStatus(t *testing.T) {
	ensureClusterRoles(t)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: statusWriterRole}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"kubevirtmachinetemplates/status"}, Verbs: []string{"update", "patch"}},
	}}))).To(Succeed())
	golden := "golden-" + rand.String(5)
	goldenImage(t, golden, "catalog")
	goldenImage(t, golden, "private")
	platform := &workerclassv1.WorkerPlatform{
		ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.PlatformName},
		Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass:       workerclassv1.TalosClassName,
			KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
			TalosFactory:       workerclassv1.TalosFactoryDefaults{URL: "https://factory.talos.dev", Version: "v1.13.6", SchematicID: schematic},
			GoldenImages: []workerclassv1.GoldenImage{{Version: "v1.13.6", SchematicID: schematic,
				Source: workerclassv1.GoldenImageSource{Kind: workerclassv1.GoldenDataSource, Namespace: golden, Name: "catalog"}}},
		},
	}
	g.Expect(c.Create(ctx, platform)).To(Succeed())
	t.Cleanup(func() { g.Expect(c.Delete(ctx, platform)).To(Succeed()) })
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos-golden-" + rand.String(4)}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
		KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}}}}
	g.Expect(c.Create(ctx, class)).To(Succeed())
	t.Cleanup(func() { g.Expect(c.Delete(ctx, class)).To(Succeed()) })

	mallory := newCluster(t)
	malloryName := "mallory-" + rand.String(5)
	bind(t, mallory.namespace, tenantRole, user(malloryName))
	bind(t, mallory.namespace, statusWriterRole, user(malloryName))
	asMallory := tenantClient(t, malloryName)
	clonedFrom := func(template string) func(*clusterv1.Machine, *infrav1.KubeVirtMachine, *corev1.Secret) {
		return func(_ *clusterv1.Machine, kvm *infrav1.KubeVirtMachine, _ *corev1.Secret) {
			kvm.Annotations = map[string]string{
				clusterv1.TemplateClonedFromNameAnnotation:      template,
				clusterv1.TemplateClonedFromGroupKindAnnotation: infrav1.GroupVersion.WithKind("KubeVirtMachineTemplate").GroupKind().String(),
			}
		}
	}
	bare := containerDiskSpec()
	bare.Image = nil

	t.Run("a forged resolution under a class is authorized as the tenant", func(t *testing.T) {
		g := NewWithT(t)
		// A class that does not exist keeps the controller from writing
		// the resolution first; the tenant writes it.
		tmpl := classTemplate(mallory.namespace, "forged", "absent-"+rand.String(4), "v1.35", containerDiskSpec())
		g.Expect(asMallory.Create(ctx, tmpl)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
			expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
		}).Should(Succeed())
		before := tmpl.DeepCopy()
		tmpl.Status.Resolved = &infrav1.ResolvedMachine{
			WorkerClassName:     class.Name,
			Bootstrap:           workerclassv1.BootstrapTalos,
			CloudInitDatasource: infrav1.NoCloudDatasource,
			ContentHash:         strings.Repeat("f", 64),
			Image:               infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromPersistentVolumeClaim, Namespace: golden, Name: "private"}},
		}
		g.Expect(asMallory.Status().Patch(ctx, tmpl, client.MergeFrom(before))).To(Succeed(), "the tenant's role lets it write the first resolution")

		kvm := mallory.machine(t, "forged", bare, clonedFrom(tmpl.Name))
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.CloneSourceForbiddenReason)
			g.Expect(cond.Message).To(HavePrefix("KubeVirtMachineTemplate forged status.resolved.image.clone: User system:serviceaccount:" + mallory.namespace + ":default has insufficient permissions in clone source namespace " + golden))
		}).WithTimeout(time.Minute).Should(Succeed(), func() string { return describe(mallory.namespace) })
		g.Consistently(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, key(mallory.namespace, "forged-root"), &cdiv1.DataVolume{}))
		}).WithTimeout(3*time.Second).Should(BeTrue(), "no DataVolume is created for a forged resolution")
	})

	t.Run("a class's golden image of the catalog is cloned for the tenant", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := classTemplate(mallory.namespace, "catalog", class.Name, "v1.35", containerDiskSpec())
		g.Expect(asMallory.Create(ctx, tmpl)).To(Succeed())
		waitResolved(t, tmpl)
		g.Expect(tmpl.Status.Resolved.Image.Clone).To(Equal(&infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: golden, Name: "catalog"}))

		kvm := mallory.machine(t, "catalog", bare, clonedFrom(tmpl.Name))
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(mallory.namespace, "catalog-root"), dv)).To(Succeed())
		g.Expect(dv.Spec.SourceRef).To(Equal(&cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: ptr.To(golden), Name: "catalog"}))
	})
}
