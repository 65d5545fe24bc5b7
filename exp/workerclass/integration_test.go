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

package workerclass_test

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/controllers"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// The built-ins talos and kairos exist after install, the platform default
// is talos at first, and the controller never overwrites the platform.
func TestBuiltinsAndPlatform(t *testing.T) {
	g := NewWithT(t)
	for name, family := range map[string]workerclassv1.BootstrapFamily{"talos": workerclassv1.BootstrapTalos, "kairos": workerclassv1.BootstrapKairos} {
		class := &workerclassv1.WorkerClass{}
		g.Eventually(func() error { return env.Client.Get(ctx, types.NamespacedName{Name: name}, class) }).Should(Succeed())
		g.Expect(class.Spec.Bootstrap).To(Equal(family))
		g.Eventually(func() []string {
			_ = env.Client.Get(ctx, types.NamespacedName{Name: name}, class)
			return class.Finalizers
		}).Should(ContainElement(workerclassv1.WorkerClassInUseFinalizer))
	}

	platform := &workerclassv1.WorkerPlatform{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, platform)).To(Succeed())
	g.Expect(platform.Spec.DefaultClass).To(Equal(workerclassv1.TalosClassName))

	t.Run("a deleted, unused built-in comes back", func(t *testing.T) {
		g := NewWithT(t)
		kairos := &workerclassv1.WorkerClass{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: "kairos"}, kairos)).To(Succeed())
		g.Expect(env.Client.Delete(ctx, kairos)).To(Succeed())
		g.Eventually(func() types.UID {
			again := &workerclassv1.WorkerClass{}
			_ = env.Client.Get(ctx, types.NamespacedName{Name: "kairos"}, again)
			return again.UID
		}).ShouldNot(Or(BeEmpty(), Equal(kairos.UID)))
	})

	t.Run("a deleted platform configuration comes back, an existing one is never overwritten", func(t *testing.T) {
		g := NewWithT(t)
		current := &workerclassv1.WorkerPlatform{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, current)).To(Succeed())
		saved := current.Spec.DeepCopy()
		g.Expect(env.Client.Delete(ctx, current)).To(Succeed())
		recreated := &workerclassv1.WorkerPlatform{}
		g.Eventually(func() types.UID {
			_ = env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, recreated)
			return recreated.UID
		}).ShouldNot(Or(BeEmpty(), Equal(current.UID)))
		g.Expect(recreated.Spec.DefaultClass).To(Equal(workerclassv1.TalosClassName))
		recreated.Spec = *saved
		g.Expect(env.Client.Update(ctx, recreated)).To(Succeed())
		// Ensuring the defaults again, as the controller does on start,
		// leaves the hoster's configuration alone.
		g.Expect(controllers.EnsureDefaults(ctx, env.Client)).To(Succeed())
		got := &workerclassv1.WorkerPlatform{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, got)).To(Succeed())
		g.Expect(got.Spec).To(Equal(*saved))
		g.Expect(got.ResourceVersion).To(Equal(recreated.ResourceVersion), "the configuration was rewritten")
	})
}

// The seed's table "KubernetesNodes application API" through the real
// apiserver with the webhooks installed.
func TestPoolAPITable(t *testing.T) {
	ns := newNamespace(t)
	spec := func(class string, extra ...any) map[string]any {
		s := map[string]any{"cluster": "example", "version": "v1.35", "minReplicas": int64(2), "maxReplicas": int64(3)}
		if class != "-" {
			s["workerClassName"] = class
		}
		for i := 0; i+1 < len(extra); i += 2 {
			s[extra[i].(string)] = extra[i+1]
		}
		return s
	}

	t.Run("CREATE with class omitted writes the current platform default", func(t *testing.T) {
		g := NewWithT(t)
		pool, err := createPool(t, ns, "omitted", spec("-"))
		g.Expect(err).NotTo(HaveOccurred())
		expectClass(g, pool, "talos")
	})
	t.Run("CREATE with class empty writes the current platform default", func(t *testing.T) {
		g := NewWithT(t)
		pool, err := createPool(t, ns, "empty", spec(""))
		g.Expect(err).NotTo(HaveOccurred())
		expectClass(g, pool, "talos")
	})
	t.Run("changing the platform default does not retarget stored pools", func(t *testing.T) {
		g := NewWithT(t)
		before, err := createPool(t, ns, "before-change", spec("-"))
		g.Expect(err).NotTo(HaveOccurred())
		setPlatformDefault(g, "kairos")
		t.Cleanup(func() { setPlatformDefault(NewWithT(t), "talos") })
		after, err := createPool(t, ns, "after-change", spec("-", "sshKeys", []any{}))
		g.Expect(err).NotTo(HaveOccurred())
		expectClass(g, after, "kairos")
		expectClass(g, before, "talos")
	})
	t.Run("CREATE with an explicit class preserves and validates it", func(t *testing.T) {
		g := NewWithT(t)
		pool, err := createPool(t, ns, "explicit", spec(fixedClass))
		g.Expect(err).NotTo(HaveOccurred())
		expectClass(g, pool, fixedClass)

		_, err = createPool(t, ns, "explicit-wrong-minor", spec(fixedClass, "version", "v1.34"))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("the pool must select minor v1.35"))

		_, err = createPool(t, ns, "explicit-missing", spec("no-such-class"))
		g.Expect(err).To(MatchError(ContainSubstring(`spec.workerClassName: Not found: "no-such-class"`)))
	})

	t.Run("UPDATE of a classless pool, class omitted or empty, stays legacy Talos", func(t *testing.T) {
		g := NewWithT(t)
		legacy := envtest.NewPool(ns, "legacy", spec("-"))
		g.Expect(env.CreateLegacyPools(ctx, legacy)).To(Succeed())
		t.Cleanup(func() { deletePool(t, legacy) })
		_, found := classOf(g, getPool(g, legacy))
		g.Expect(found).To(BeFalse())

		g.Expect(replaceSpec(legacy, spec("-", "minReplicas", int64(5)))).To(Succeed())
		got := getPool(g, legacy)
		_, found = classOf(g, got)
		g.Expect(found).To(BeFalse(), "an omitted class stays omitted")
		g.Expect(got.GetLabels()).NotTo(HaveKey(workerclassv1.WorkerClassLabel))

		g.Expect(replaceSpec(legacy, spec("", "minReplicas", int64(4)))).To(Succeed())
		name, _ := classOf(g, getPool(g, legacy))
		g.Expect(name).To(BeEmpty(), "an empty class leaves the pool legacy")
	})

	t.Run("UPDATE of a classified pool, class omitted or empty, restores the stored class", func(t *testing.T) {
		g := NewWithT(t)
		pool, err := createPool(t, ns, "classified", spec("kairos"))
		g.Expect(err).NotTo(HaveOccurred())

		g.Expect(replaceSpec(pool, spec("-", "minReplicas", int64(1)))).To(Succeed(), "full replace without the class")
		expectClass(g, pool, "kairos")

		g.Expect(replaceSpec(pool, spec(""))).To(Succeed(), "empty is not a request to become legacy")
		expectClass(g, pool, "kairos")

		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"workerClassName":null},"metadata":{"labels":null}}`))
		g.Expect(env.Client.Patch(ctx, envtest.NewPool(ns, "classified", nil), patch)).To(Succeed())
		expectClass(g, pool, "kairos")

		err = replaceSpec(pool, spec("-", "talos", map[string]any{"version": "v1.13.5"}))
		g.Expect(err).To(MatchError(ContainSubstring("spec.talos: Forbidden")), "the restored class validates the new settings")
	})

	t.Run("UPDATE selecting another class passes the family and image checks", func(t *testing.T) {
		g := NewWithT(t)
		talosPool, err := createPool(t, ns, "switch-talos", spec("talos"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(replaceSpec(talosPool, spec(talosR1))).To(Succeed())
		expectClass(g, talosPool, talosR1)

		err = replaceSpec(talosPool, spec("kairos"))
		g.Expect(err).To(MatchError(ContainSubstring("switching a running pool from class talos-example-r1 (bootstrap family talos) to class kairos (bootstrap family kairos) in place is refused")))

		kairosPool, err := createPool(t, ns, "switch-kairos", spec("kairos", "version", "v1.35"))
		g.Expect(err).NotTo(HaveOccurred())
		err = replaceSpec(kairosPool, spec(fixedClass, "version", "v1.34"))
		g.Expect(err).To(MatchError(ContainSubstring("the pool must select minor v1.35")))
		g.Expect(replaceSpec(kairosPool, spec(fixedClass))).To(Succeed())
		expectClass(g, kairosPool, fixedClass)

		legacy := envtest.NewPool(ns, "switch-legacy", spec("-"))
		g.Expect(env.CreateLegacyPools(ctx, legacy)).To(Succeed())
		t.Cleanup(func() { deletePool(t, legacy) })
		err = replaceSpec(legacy, spec("kairos"))
		g.Expect(err).To(MatchError(ContainSubstring("from no class (bootstrap family talos) to class kairos (bootstrap family kairos)")), "a legacy pool is Talos")
	})
}

// The seed's example classes and pools are accepted as written.
func TestSeedExamples(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	public, _ := sshkeystest.KeyPair()
	for name, spec := range map[string]map[string]any{
		"example-kairos": {"cluster": "example", "workerClassName": "kairos", "version": "v1.35",
			"minReplicas": int64(2), "maxReplicas": int64(3), "sshKeys": []any{}},
		"example-kairos-ssh": {"cluster": "example", "workerClassName": "kairos", "version": "v1.35", "sshKeys": []any{public}},
		"example-talos": {"cluster": "example", "workerClassName": talosR1, "version": "v1.35",
			"talos": map[string]any{"version": "v1.13.6"}, "kernelModules": []any{map[string]any{"name": "nvme_tcp"}}},
		"example-custom-kairos": {"cluster": "example", "workerClassName": fixedClass, "version": "v1.35"},
	} {
		pool, err := createPool(t, ns, name, spec)
		g.Expect(err).NotTo(HaveOccurred(), name)
		expectClass(g, pool, spec["workerClassName"].(string))
	}
}

// The pool's sshKeys rules through the apiserver.
func TestPoolSSHKeys(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	public, private := sshkeystest.KeyPair()
	second, _ := sshkeystest.KeyPair()

	_, err := createPool(t, ns, "two-keys", map[string]any{"cluster": "c", "workerClassName": "kairos", "version": "v1.35", "sshKeys": []any{public, second}})
	g.Expect(err).To(MatchError(ContainSubstring("spec.sshKeys: Too many: 2: must have at most 1 item")))

	_, err = createPool(t, ns, "talos-key", map[string]any{"cluster": "c", "workerClassName": "talos", "version": "v1.35", "sshKeys": []any{public}})
	g.Expect(err).To(MatchError(ContainSubstring("Talos has no SSH server")))

	_, err = createPool(t, ns, "talos-empty", map[string]any{"cluster": "c", "workerClassName": "talos", "version": "v1.35", "sshKeys": []any{}})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = createPool(t, ns, "private", map[string]any{"cluster": "c", "workerClassName": "kairos", "version": "v1.35", "sshKeys": []any{private}})
	// The webhook's refusal and the admission policy's both say it.
	g.Expect(err).To(MatchError(ContainSubstring("never put a private key here, only a public key")))
	for _, line := range strings.Split(private, "\n") {
		if len(line) > 16 && !strings.HasPrefix(line, "-----") {
			g.Expect(err.Error()).NotTo(ContainSubstring(line), "the refusal echoes the private key")
		}
	}
}

// A supplied [] or {} survives the apiserver and typed clients: empty is
// a value, not an absence.
func TestEmptyValuesRoundTrip(t *testing.T) {
	g := NewWithT(t)
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos-empty-lists"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		Talos: &workerclassv1.TalosBaseline{
			TalosScalars:    workerclassv1.TalosScalars{InstallerRepository: ptr("")},
			KernelModules:   []workerclassv1.KernelModule{},
			RegistryMirrors: map[string]workerclassv1.RegistryMirror{},
		},
		Proxmox: &workerclassv1.ProxmoxTemplateSource{TemplateTags: []string{}},
	}}
	g.Expect(env.Client.Create(ctx, class, client.FieldValidation(metav1.FieldValidationStrict))).To(Succeed())
	t.Cleanup(func() { g.Expect(env.Client.Delete(ctx, class)).To(Succeed()) })
	got := &workerclassv1.WorkerClass{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(class), got)).To(Succeed())
	g.Expect(got.Spec.Talos.KernelModules).NotTo(BeNil())
	g.Expect(got.Spec.Talos.KernelModules).To(BeEmpty())
	g.Expect(got.Spec.Talos.RegistryMirrors).NotTo(BeNil())
	g.Expect(got.Spec.Talos.RegistryMirrors).To(BeEmpty())
	g.Expect(got.Spec.Proxmox.TemplateTags).NotTo(BeNil())
	g.Expect(got.Spec.Talos.InstallerRepository).To(Equal(ptr("")))
	g.Expect(got.Spec.Talos.Version).To(BeNil(), "absent stays absent")

	ns := newNamespace(t)
	pool, err := createPool(t, ns, "empties", map[string]any{"cluster": "c", "workerClassName": class.Name, "version": "v1.35",
		"sshKeys": []any{}, "kernelModules": []any{}, "registryMirrors": map[string]any{}, "talos": map[string]any{"imageFactoryCA": ""}})
	g.Expect(err).NotTo(HaveOccurred())
	stored := getPool(g, pool)
	settings, errs := admission.PoolFromObject(stored.Object)
	g.Expect(errs).To(BeEmpty())
	g.Expect(settings.Settings.SSHKeys).To(And(Not(BeNil()), BeEmpty()))
	g.Expect(settings.Settings.KernelModules).To(And(Not(BeNil()), BeEmpty()))
	g.Expect(settings.Settings.RegistryMirrors).To(And(Not(BeNil()), BeEmpty()))
	g.Expect(settings.Settings.Talos.ImageFactoryCA).To(Equal(ptr("")))
	g.Expect(settings.Settings.OSImage).To(BeNil())
}

// The class spec is immutable (CEL and webhook) and invalid classes and
// platform configurations are rejected.
func TestClassAndPlatformValidation(t *testing.T) {
	g := NewWithT(t)
	class := &workerclassv1.WorkerClass{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: talosR1}, class)).To(Succeed())

	// Merge patches carry no resourceVersion, so the controller's status
	// updates cannot conflict with them.
	changed := class.DeepCopy()
	changed.Spec.Talos.Version = ptr("v1.13.7")
	err := env.Client.Patch(ctx, changed, client.MergeFrom(class))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec is immutable"))

	labelled := class.DeepCopy()
	labelled.Labels = map[string]string{"tier": "gold"}
	g.Expect(env.Client.Patch(ctx, labelled, client.MergeFrom(class))).To(Succeed(), "metadata stays editable")

	ref := "registry.example.com/workers/kairos-worker@" + diskDigest
	for name, tc := range map[string]struct {
		spec workerclassv1.WorkerClassSpec
		want string
	}{
		"fixed image reference without digest": {workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: "registry.example.com/w:v1.35.6"}}, "pinned by digest"},
		"fixed image without reference": {workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6"}}, "spec.image.reference"},
		"fixed image with a minor only": {workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35", Reference: ref}}, "spec.image.kubernetesVersion"},
		"fixed image on Talos": {workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: ref}}, "a fixed image is a Kairos artifact"},
		"builtin and factory": {workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{
				Builtin: &workerclassv1.BuiltinImageSource{}, Factory: &workerclassv1.FactoryImageSource{}}}}, "builtin and factory cannot both be set"},
		"Talos settings on Kairos": {workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Talos: &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}}}, "Talos settings are not Kairos configuration"},
	} {
		bad := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "invalid-" + strings.ReplaceAll(strings.ToLower(name), " ", "-")}, Spec: tc.spec}
		err := env.Client.Create(ctx, bad)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: got %v", name, err)
		g.Expect(err.Error()).To(ContainSubstring(tc.want), name)
	}

	other := &workerclassv1.WorkerPlatform{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: workerclassv1.WorkerPlatformSpec{DefaultClass: "talos"}}
	g.Expect(env.Client.Create(ctx, other)).To(MatchError(ContainSubstring("singleton named default")))

	platform := &workerclassv1.WorkerPlatform{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, platform)).To(Succeed())
	platform.Spec.KubernetesVersions = append(platform.Spec.KubernetesVersions, workerclassv1.KubernetesVersion{Minor: "v1.33", Patch: "v1.34.1"})
	g.Expect(env.Client.Update(ctx, platform)).To(MatchError(ContainSubstring("the patch must belong to minor v1.33")))
}

// A class in use keeps its finalizer until no pool uses it; its status
// lists the users.
func TestDeletionProtection(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos-protected"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}}
	g.Expect(env.Client.Create(ctx, class)).To(Succeed())
	pool, err := createPool(t, ns, "user", map[string]any{"cluster": "c", "workerClassName": class.Name, "version": "v1.35"})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(class), class)).To(Succeed())
		g.Expect(class.Status.PoolCount).To(BeEquivalentTo(1))
		g.Expect(class.Status.NamespaceCount).To(BeEquivalentTo(1))
		g.Expect(class.Finalizers).To(ContainElement(workerclassv1.WorkerClassInUseFinalizer))
	}).Should(Succeed())

	g.Expect(env.Client.Delete(ctx, class)).To(Succeed())
	g.Eventually(func() []string { return classEvents(g, class) }).Should(ContainElement("DeletionBlocked"))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(class), class)).To(Succeed(), "a class in use is not deleted")
	g.Expect(class.DeletionTimestamp.IsZero()).To(BeFalse())

	_, err = createPool(t, ns, "late", map[string]any{"cluster": "c", "workerClassName": class.Name, "version": "v1.35"})
	g.Expect(err).To(MatchError(ContainSubstring("is being deleted")))
	g.Expect(replaceSpec(pool, map[string]any{"cluster": "c", "version": "v1.34"})).To(Succeed(), "its users keep working")
	expectClass(g, pool, class.Name)

	deletePool(t, pool)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(class), &workerclassv1.WorkerClass{}))
	}).Should(BeTrue(), "the finalizer is released once unused")
}

// The status counts pools and namespaces and never names them: a tenant
// who may read classes learns nothing of the other tenants.
func TestClassStatusNamesNoTenant(t *testing.T) {
	g := NewWithT(t)
	first, second := newNamespace(t), newNamespace(t)
	const pools = 35
	for i := range pools {
		ns := first
		if i%5 == 0 {
			ns = second
		}
		_, err := createPool(t, ns, "pool-"+string(rune('a'+i/26))+string(rune('a'+i%26)), map[string]any{"cluster": "c", "workerClassName": talosR1, "version": "v1.35"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	class := &workerclassv1.WorkerClass{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: talosR1}, class)).To(Succeed())
		g.Expect(class.Status.PoolCount).To(BeNumerically(">=", pools))
		g.Expect(class.Status.NamespaceCount).To(BeNumerically(">=", 2))
		inUse := metaCondition(class, workerclassv1.InUseCondition)
		g.Expect(inUse).NotTo(BeNil())
		g.Expect(inUse.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(inUse.Message).To(MatchRegexp(`^Used by \d+ pool\(s\) and \d+ template\(s\)$`))
	}).Should(Succeed())
	status, err := json.Marshal(class.Status)
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{first, second, "pool-aa"} {
		g.Expect(string(status)).NotTo(ContainSubstring(name), "the class status names a tenant's object")
	}
}

func metaCondition(class *workerclassv1.WorkerClass, t string) *metav1.Condition {
	for i := range class.Status.Conditions {
		if class.Status.Conditions[i].Type == t {
			return &class.Status.Conditions[i]
		}
	}
	return nil
}

// A class label on a classless pool would count the pool as a user of the
// class it names and keep that class from being deleted. A classless
// pool's UPDATE never reaches the pool webhooks, so the admission policy
// refuses the label, on CREATE too; the class, unused, is deleted.
func TestAClassLabelOnAClasslessPoolPinsNoClass(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos-unpinned"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}}
	g.Expect(env.Client.Create(ctx, class)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(class), class)).To(Succeed())
		g.Expect(class.Finalizers).To(ContainElement(workerclassv1.WorkerClassInUseFinalizer))
	}).Should(Succeed())

	legacy := envtest.NewPool(ns, "legacy", map[string]any{"cluster": "c"})
	g.Expect(env.CreateLegacyPools(ctx, legacy)).To(Succeed())
	t.Cleanup(func() { deletePool(t, legacy) })
	pinned := getPool(g, legacy)
	pinned.SetLabels(map[string]string{workerclassv1.WorkerClassLabel: class.Name})
	g.Expect(env.Client.Update(ctx, pinned)).To(MatchError(And(
		ContainSubstring("workerclass-pool-class-label"),
		ContainSubstring("a pool without spec.workerClassName uses no class"))))

	labelled := envtest.NewPool(ns, "labelled", map[string]any{"cluster": "c"})
	labelled.SetLabels(map[string]string{workerclassv1.WorkerClassLabel: class.Name})
	g.Expect(env.CreateLegacyPools(ctx, labelled)).To(MatchError(ContainSubstring("uses no class")))

	g.Expect(env.Client.Delete(ctx, class)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(class), &workerclassv1.WorkerClass{}))
	}).Should(BeTrue(), "no pool uses the class")
}
