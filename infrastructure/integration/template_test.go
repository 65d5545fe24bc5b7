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
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/capacity"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
)

var (
	schematic   = strings.Repeat("a", 64)
	kairosImage = "ghcr.io/cozystack/kairos-worker@sha256:" + strings.Repeat("2", 64)
)

// The class-based tests share the cluster-scoped platform configuration and
// classes; they run one after another in TestClassBasedTemplates.

func classlessTemplate(ns, name string, spec infrav1.KubeVirtMachineSpec) *infrav1.KubeVirtMachineTemplate {
	return &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: spec}},
	}
}

func classTemplate(ns, name, class, version string, spec infrav1.KubeVirtMachineSpec) *infrav1.KubeVirtMachineTemplate {
	spec.Image = nil
	t := classlessTemplate(ns, name, spec)
	t.Spec.Template.Spec.WorkerClass = &infrav1.WorkerClassSelection{Name: class, PoolSettings: workerclassv1.PoolSettings{Version: version}}
	return t
}

func waitResolved(t *testing.T, tmpl *infrav1.KubeVirtMachineTemplate) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionTrue, infrav1.ResolvedReason)
		g.Expect(tmpl.Status.Resolved).NotTo(BeNil())
	}).Should(Succeed())
}

func TestClasslessTemplate(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	spec := containerDiskSpec()
	spec.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/GA102GL_A10"}}
	tmpl := classlessTemplate(tc.namespace, "classless", spec)
	g.Expect(c.Create(context.Background(), tmpl)).To(Succeed())
	waitResolved(t, tmpl)
	g.Expect(tmpl.Status.Resolved.Image).To(Equal(*spec.Image))
	g.Expect(tmpl.Status.Resolved.CloudInitDatasource).To(Equal(infrav1.NoCloudDatasource))
	g.Expect(tmpl.Status.Resolved.KubernetesVersion).To(BeEmpty())
	g.Expect(tmpl.Status.Resolved.ContentHash).To(HaveLen(64))
	g.Expect(tmpl.Status.ObservedGeneration).To(Equal(tmpl.Generation), "the resolution goes out with the generation it observed")
	expectCapacity(g, tmpl.Status.Capacity, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		"nvidia.com/gpu": resource.MustParse("1")})
	g.Expect(tmpl.Status.NodeInfo).To(Equal(infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"}))
	g.Expect(tmpl.Status.NodeLabels).To(Equal(map[string]string{capacity.GPULabel: "GA102GL_A10"}), "the GPU type the bootstrap provider labels the nodes with")
}

// TestTemplateOfAPausedCluster: a template created while its Cluster is
// paused, as clusterctl move creates every object in the target, reports
// Paused and waits; when the Cluster resumes it is resolved.
func TestTemplateOfAPausedCluster(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	original := tc.cluster.DeepCopy()
	tc.cluster.Spec.Paused = ptr.To(true)
	g.Expect(c.Patch(ctx, tc.cluster, client.MergeFrom(original))).To(Succeed())
	tmpl := classlessTemplate(tc.namespace, "moved", containerDiskSpec())
	tmpl.Labels = map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		expectCondition(g, tmpl, clusterv1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)
	}).Should(Succeed())
	g.Expect(tmpl.Status.Resolved).To(BeNil(), "a paused template is not resolved")

	original = tc.cluster.DeepCopy()
	tc.cluster.Spec.Paused = nil
	g.Expect(c.Patch(ctx, tc.cluster, client.MergeFrom(original))).To(Succeed())
	// The suite resyncs every 2 s, so this checks the outcome; that the
	// Cluster's event brings it is checked where the resync is 10 minutes,
	// by the harness's TestClusterctlMoveCarriesAJoinedPool.
	waitResolved(t, tmpl)
	expectCondition(g, tmpl, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason)
}

// TestTemplateCapacityFromInstancetype: a template sized by an
// instancetype that attaches GPUs, with a preference for arm64, waits for
// both to exist, then for KubeVirt's MultiArchitecture feature gate, which
// virt-api needs for a VM of another architecture than its own: the
// autoscaler gets no capacity to scale from zero into machines KubeVirt
// refuses. Once the hoster enables the gate, the template resolves with
// the instancetype's capacity and the preference's architecture.
//
// It enables the gate on the suite's KubeVirt CR, which no other test
// needs off, and turns it off again at the end.
func TestTemplateCapacityFromInstancetype(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	spec := containerDiskSpec()
	spec.CPU, spec.Memory = nil, nil
	spec.Instancetype = &infrav1.InstancetypeReference{Kind: infrav1.NamespacedInstancetypeKind, Name: "gn1.2xlarge"}
	spec.Preference = &infrav1.PreferenceReference{Kind: infrav1.NamespacedPreferenceKind, Name: "arm"}
	spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/worker.qcow2"}}
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("50Gi"))}
	tmpl := classlessTemplate(tc.namespace, "sized", spec)
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
		g.Expect(cond.Message).To(Equal(`spec.template.spec.instancetype.name: Not found: "VirtualMachineInstancetype gn1.2xlarge"`))
		g.Expect(tmpl.Status.Resolved).To(BeNil())
	}).Should(Succeed())

	g.Expect(c.Create(ctx, &instancetypev1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "gn1.2xlarge", Namespace: tc.namespace},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 8},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("32Gi")},
			GPUs:   []kubevirtv1.GPU{{Name: "gpu1", DeviceName: gpuResource}, {Name: "gpu2", DeviceName: gpuResource}},
		},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
		g.Expect(cond.Message).To(ContainSubstring("spec.template.spec.preference.name: Not found"))
	}).Should(Succeed())

	g.Expect(c.Create(ctx, &instancetypev1beta1.VirtualMachinePreference{
		ObjectMeta: metav1.ObjectMeta{Name: "arm", Namespace: tc.namespace},
		Spec:       instancetypev1beta1.VirtualMachinePreferenceSpec{PreferredArchitecture: ptr.To("arm64")},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.KubeVirtFeatureNotEnabledReason)
		g.Expect(cond.Message).To(Equal("spec.template.spec.preference.name: Forbidden: KubeVirt kubevirt/kubevirt runs amd64 and does not enable " +
			"the MultiArchitecture feature gate (spec.configuration.developerConfiguration.featureGates), and virt-api refuses a VM of architecture arm64 without it"))
		g.Expect(tmpl.Status.Capacity).To(BeEmpty(), "nothing to scale from zero into")
		g.Expect(tmpl.Status.NodeLabels).To(BeEmpty())
	}).Should(Succeed())

	enableFeatureGate(t, "MultiArchitecture")
	waitResolved(t, tmpl)
	expectCapacity(g, tmpl.Status.Capacity, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceEphemeralStorage: resource.MustParse("50Gi")})
	g.Expect(tmpl.Status.NodeInfo).To(Equal(infrav1.NodeInfo{Architecture: infrav1.ArchitectureArm64, OperatingSystem: "linux"}))
	g.Expect(tmpl.Status.NodeLabels).To(Equal(map[string]string{capacity.GPULabel: "GA102GL_A10"}), "the instancetype's GPUs name the type")
}

// TestTemplateWaitsForKubeVirtFeatures: a template whose VMs ask for a GPU
// that the suite's KubeVirt does not list in permittedHostDevices (virt-api
// would admit the VM, virt-controller never start it) is not resolved, has
// no capacity and names the device. The other gates and devices are the
// rules' table's (kubevirtmachinetemplate's TestKubeVirtRules).
func TestTemplateWaitsForKubeVirtFeatures(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	const missing = "nvidia.com/TU104GL_Tesla_T4"
	spec := containerDiskSpec()
	spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: missing}}
	tmpl := classlessTemplate(tc.namespace, "unpermitted-gpu", spec)
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.KubeVirtFeatureNotEnabledReason)
		g.Expect(cond.Message).To(Equal("spec.template.spec.gpus[0].deviceName: Forbidden: KubeVirt kubevirt/kubevirt does not permit GPU " + missing +
			" (spec.configuration.permittedHostDevices), and virt-controller cannot start a VM that asks for it"))
		g.Expect(tmpl.Status.Resolved).To(BeNil())
		g.Expect(tmpl.Status.Capacity).To(BeEmpty())
	}).Should(Succeed())
}

// enableFeatureGate enables a KubeVirt feature gate on the suite's KubeVirt
// CR, as a hoster would, until the test ends.
func enableFeatureGate(t *testing.T, gate string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	kv := &kubevirtv1.KubeVirt{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: kubevirt.Namespace, Name: "kubevirt"}, kv)).To(Succeed())
	original := kv.DeepCopy()
	kv.Spec.Configuration.DeveloperConfiguration.FeatureGates = append(kv.Spec.Configuration.DeveloperConfiguration.FeatureGates, gate)
	g.Expect(c.Patch(ctx, kv, client.MergeFrom(original))).To(Succeed())
	t.Cleanup(func() {
		current := &kubevirtv1.KubeVirt{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kv), current)).To(Succeed())
		before := current.DeepCopy()
		current.Spec.Configuration.DeveloperConfiguration.FeatureGates = original.Spec.Configuration.DeveloperConfiguration.FeatureGates
		g.Expect(c.Patch(ctx, current, client.MergeFrom(before))).To(Succeed())
	})
}

// TestTemplateAdmission checks the CRD schema and webhook rules on the real
// apiserver.
func TestTemplateAdmission(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	ctx := context.Background()
	for _, bad := range []struct {
		name     string
		template *infrav1.KubeVirtMachineTemplate
		message  string
	}{
		{"a class and an explicit image", func() *infrav1.KubeVirtMachineTemplate {
			tmpl := classTemplate(tc.namespace, "both", "kairos", "v1.35", containerDiskSpec())
			tmpl.Spec.Template.Spec.Image = containerDiskSpec().Image
			return tmpl
		}(), "takes its image from the class"},
		{"neither a class nor an image", func() *infrav1.KubeVirtMachineTemplate {
			spec := containerDiskSpec()
			spec.Image = nil
			return classlessTemplate(tc.namespace, "neither", spec)
		}(), "set spec.template.spec.workerClass, or an explicit spec.template.spec.image"},
		{"an instancetype and cpu", func() *infrav1.KubeVirtMachineTemplate {
			spec := containerDiskSpec()
			spec.Instancetype = &infrav1.InstancetypeReference{Name: "u1.large"}
			return classlessTemplate(tc.namespace, "over-sized", spec)
		}(), "set instancetype, or cpu and memory, not both"},
		{"a container disk by tag", func() *infrav1.KubeVirtMachineTemplate {
			spec := containerDiskSpec()
			spec.Image.ContainerDisk.Reference = "registry.example.com/workers/kairos:latest"
			return classlessTemplate(tc.namespace, "tagged", spec)
		}(), "must be pinned by digest"},
	} {
		t.Run(bad.name+" is rejected", func(t *testing.T) {
			err := c.Create(ctx, bad.template)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(bad.message)))
		})
	}

	t.Run("a template's spec is immutable and its resolution frozen", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := classlessTemplate(tc.namespace, "immutable", containerDiskSpec())
		g.Expect(c.Create(ctx, tmpl)).To(Succeed())
		waitResolved(t, tmpl)
		changed := tmpl.DeepCopy()
		changed.Spec.Template.Spec.CPU.Cores = 16
		g.Expect(c.Update(ctx, changed)).To(MatchError(ContainSubstring("immutable")))
		frozen := tmpl.DeepCopy()
		frozen.Status.Resolved.ContentHash = strings.Repeat("0", 64)
		g.Expect(c.Status().Update(ctx, frozen)).To(MatchError(ContainSubstring("status.resolved is frozen once written")))
	})

	t.Run("a class-based template is labelled with its class", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := classTemplate(tc.namespace, "labelled", "kairos", "v1.35", containerDiskSpec())
		g.Expect(c.Create(ctx, tmpl)).To(Succeed())
		g.Expect(tmpl.Labels).To(HaveKeyWithValue(workerclassv1.WorkerClassLabel, "kairos"))
	})
}

// TestClassBasedTemplates resolves templates against classes and the
// platform configuration and proves a resolved template is frozen.
func TestClassBasedTemplates(t *testing.T) {
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	platform := &workerclassv1.WorkerPlatform{
		ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.PlatformName},
		Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass:       workerclassv1.TalosClassName,
			KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
			TalosFactory:       workerclassv1.TalosFactoryDefaults{URL: "https://factory.talos.dev", Version: "v1.13.6", SchematicID: schematic},
			GoldenImages: []workerclassv1.GoldenImage{{Version: "v1.13.6", SchematicID: schematic,
				Source: workerclassv1.GoldenImageSource{Kind: workerclassv1.GoldenDataSource, Namespace: "cozy-golden", Name: "talos-v1-13-6"}}},
			KairosImages: []workerclassv1.KairosImage{{Minor: "v1.35", Reference: kairosImage}},
		},
	}
	g.Expect(c.Create(ctx, platform)).To(Succeed())
	t.Cleanup(func() { g.Expect(c.Delete(ctx, platform)).To(Succeed()) })
	classes := []*workerclassv1.WorkerClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "kairos"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kairos-fixed-r1"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.4", Reference: digestRef}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "talos-builtin-r1"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}}}}},
	}
	for _, class := range classes {
		g.Expect(c.Create(ctx, class)).To(Succeed())
		t.Cleanup(func() { g.Expect(c.Delete(ctx, class)).To(Succeed()) })
	}

	// Resolutions that do not change the shared platform run side by side.
	t.Run("resolution", func(t *testing.T) {
		t.Run("the platform Kairos image for the pool's minor", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			tmpl := classTemplate(tc.namespace, "kairos-platform", "kairos", "v1.35", containerDiskSpec())
			g.Expect(c.Create(ctx, tmpl)).To(Succeed())
			waitResolved(t, tmpl)
			r := tmpl.Status.Resolved
			g.Expect(r.WorkerClassName).To(Equal("kairos"))
			g.Expect(r.Bootstrap).To(Equal(workerclassv1.BootstrapKairos))
			g.Expect(r.KubernetesVersion).To(Equal("v1.35.6"))
			g.Expect(r.KubernetesVersionMatch).To(Equal(workerclassv1.KubernetesVersionMatchMinor))
			g.Expect(r.Image.ContainerDisk).To(Equal(&infrav1.ContainerDiskSource{Reference: kairosImage}))
			g.Expect(r.ContentHash).To(HaveLen(64))
		})

		t.Run("a fixed Kairos image keeps its own patch", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			tmpl := classTemplate(tc.namespace, "kairos-fixed", "kairos-fixed-r1", "v1.35", containerDiskSpec())
			g.Expect(c.Create(ctx, tmpl)).To(Succeed())
			waitResolved(t, tmpl)
			g.Expect(tmpl.Status.Resolved.KubernetesVersion).To(Equal("v1.35.4"))
			g.Expect(tmpl.Status.Resolved.KubernetesVersionMatch).To(Equal(workerclassv1.KubernetesVersionMatchExact))
			g.Expect(tmpl.Status.Resolved.Image.ContainerDisk.Reference).To(Equal(digestRef))
		})

		t.Run("a Talos builtin source clones the golden DataSource", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			tmpl := classTemplate(tc.namespace, "talos-builtin", "talos-builtin-r1", "v1.35", containerDiskSpec())
			g.Expect(c.Create(ctx, tmpl)).To(Succeed())
			waitResolved(t, tmpl)
			r := tmpl.Status.Resolved
			g.Expect(r.Image.Clone).To(Equal(&infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "cozy-golden", Name: "talos-v1-13-6"}))
			g.Expect(r.TalosVersion).To(Equal("v1.13.6"))
			g.Expect(r.SchematicID).To(Equal(schematic))
		})

		t.Run("a Talos factory import with the pool's CA needs a disk size", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ca := caBundle(t)
			tmpl := classTemplate(tc.namespace, "talos-factory", "talos-builtin-r1", "v1.35", containerDiskSpec())
			tmpl.Spec.Template.Spec.WorkerClass.OSImage = &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{}}
			tmpl.Spec.Template.Spec.WorkerClass.Talos = &workerclassv1.TalosScalars{ImageFactoryCA: ptr.To(ca)}
			g.Expect(c.Create(ctx, tmpl)).To(Succeed())
			g.Eventually(func(g Gomega) {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
				cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
				g.Expect(cond.Message).To(ContainSubstring("spec.template.spec.rootDisk.size: Required value"))
			}).Should(Succeed())

			sized := classTemplate(tc.namespace, "talos-factory-sized", "talos-builtin-r1", "v1.35", containerDiskSpec())
			sized.Spec.Template.Spec.WorkerClass.OSImage = tmpl.Spec.Template.Spec.WorkerClass.OSImage
			sized.Spec.Template.Spec.WorkerClass.Talos = tmpl.Spec.Template.Spec.WorkerClass.Talos
			sized.Spec.Template.Spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
			g.Expect(c.Create(ctx, sized)).To(Succeed())
			waitResolved(t, sized)
			g.Expect(sized.Status.Resolved.Image.HTTPImport.URL).To(Equal(
				"https://factory.talos.dev/image/" + schematic + "/v1.13.6/nocloud-amd64.raw.xz"))
			g.Expect(sized.Status.Resolved.Image.HTTPImport.CABundle).To(Equal(ca))
		})

		t.Run("a resolution failure names the field", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			tmpl := classTemplate(tc.namespace, "unsupported-minor", "kairos", "v1.30", containerDiskSpec())
			g.Expect(c.Create(ctx, tmpl)).To(Succeed())
			g.Eventually(func(g Gomega) {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
				cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
				g.Expect(cond.Message).To(HavePrefix("spec.template.spec.workerClass.version: "))
			}).Should(Succeed())
		})

		t.Run("a missing class resolves once it is created", func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			tmpl := classTemplate(tc.namespace, "late-class", "kairos-late-r1", "v1.35", containerDiskSpec())
			g.Expect(c.Create(ctx, tmpl)).To(Succeed())
			g.Eventually(func(g Gomega) {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
				cond := expectCondition(g, tmpl, infrav1.ResolvedCondition, metav1.ConditionFalse, infrav1.ResolutionFailedReason)
				g.Expect(cond.Message).To(Equal(`spec.template.spec.workerClass.name: Not found: "kairos-late-r1"`))
			}).Should(Succeed())
			late := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "kairos-late-r1"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}}
			g.Expect(c.Create(ctx, late)).To(Succeed())
			t.Cleanup(func() { g.Expect(c.Delete(ctx, late)).To(Succeed()) })
			waitResolved(t, tmpl)
		})
	})

	t.Run("a platform change never reaches a resolved template", func(t *testing.T) {
		g := NewWithT(t)
		before := classTemplate(tc.namespace, "frozen", "kairos", "v1.35", containerDiskSpec())
		g.Expect(c.Create(ctx, before)).To(Succeed())
		waitResolved(t, before)
		resolved := before.Status.Resolved.DeepCopy()

		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(platform), platform)).To(Succeed())
		platform.Spec.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.7"}}
		newImage := "ghcr.io/cozystack/kairos-worker@sha256:" + strings.Repeat("3", 64)
		platform.Spec.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.35", Reference: newImage}}
		g.Expect(c.Update(ctx, platform)).To(Succeed())

		after := classTemplate(tc.namespace, "after-change", "kairos", "v1.35", containerDiskSpec())
		g.Expect(c.Create(ctx, after)).To(Succeed())
		waitResolved(t, after)
		g.Expect(after.Status.Resolved.KubernetesVersion).To(Equal("v1.35.7"), "new templates see the new platform")
		g.Expect(after.Status.Resolved.Image.ContainerDisk.Reference).To(Equal(newImage))

		g.Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(before), before)).To(Succeed())
			g.Expect(before.Status.Resolved).To(Equal(resolved))
		}).WithTimeout(syncPeriod+time.Second).Should(Succeed(), "the resolved template is frozen")
	})

	t.Run("a machine of a class-based template boots the resolved image", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := &infrav1.KubeVirtMachineTemplate{}
		g.Expect(c.Get(ctx, key(tc.namespace, "kairos-fixed"), tmpl)).To(Succeed())
		spec := tmpl.Spec.Template.Spec
		kvm := tc.machine(t, "class-machine", spec, func(_ *clusterv1.Machine, k *infrav1.KubeVirtMachine, _ *corev1.Secret) {
			k.Annotations = map[string]string{
				clusterv1.TemplateClonedFromNameAnnotation:      tmpl.Name,
				clusterv1.TemplateClonedFromGroupKindAnnotation: "KubeVirtMachineTemplate.infrastructure.cozystack.io",
			}
		})
		vm := waitForVM(t, kvm)
		g.Expect(volumeNamed(vm, "root").ContainerDisk.Image).To(Equal(digestRef))
	})
}

func expectCapacity(g Gomega, got, want corev1.ResourceList) {
	g.Expect(got).To(HaveLen(len(want)), "capacity %v", got)
	for name, q := range want {
		v, ok := got[name]
		g.Expect(ok).To(BeTrue(), "capacity lacks %s", name)
		g.Expect(v.Cmp(q)).To(BeZero(), "%s: got %s, want %s", name, v.String(), q.String())
	}
}
