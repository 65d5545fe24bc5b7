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

package kairosconfig

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// templateObject is a TestMachineTemplate with the given
// spec.template.spec.workerClass.name (empty: none) and status.resolved
// (nil: not resolved).
func templateObject(class string, resolved map[string]any) *unstructured.Unstructured {
	machine := map[string]any{}
	if class != "" {
		machine["workerClass"] = map[string]any{"name": class}
	}
	spec := map[string]any{"template": map[string]any{"spec": machine}}
	o := map[string]any{
		"apiVersion": "infrastructure.test.cozystack.io/v1alpha1", "kind": "TestMachineTemplate",
		"metadata": map[string]any{"namespace": "ns", "name": "pool-r1"}, "spec": spec,
	}
	if resolved != nil {
		o["status"] = map[string]any{"resolved": resolved}
	}
	return &unstructured.Unstructured{Object: o}
}

// TestTemplatePairing: a KairosConfig bootstraps machines of a template
// resolved from a Kairos class, of a classless template and of templates
// that declare no family; it waits for a template that names a class it
// has not resolved; it refuses any other family (the seed: a pool's
// bootstrap family is the class's, and no override or pairing changes it).
func TestTemplatePairing(t *testing.T) {
	const talosRefusal = `TestMachineTemplate pool-r1 (WorkerClass talos-example-r1) boots talos workers, not Kairos; ` +
		`a KairosConfig cannot bootstrap them: status.resolved.bootstrap: Unsupported value: "talos": supported values: "kairos"`
	tests := []struct {
		name     string
		template *unstructured.Unstructured
		wantWait bool
		// wantRefusal is the exact condition message; empty: accepted.
		wantRefusal string
		wantErr     bool
	}{
		{
			name:     "a Kairos class is accepted",
			template: templateObject("kairos", map[string]any{"workerClassName": "kairos", "bootstrap": "kairos"}),
		},
		{
			name:        "a Talos class is refused, naming the template, the class, its OS and the field",
			template:    templateObject("talos-example-r1", map[string]any{"workerClassName": "talos-example-r1", "bootstrap": "talos"}),
			wantRefusal: talosRefusal,
		},
		{
			name:     "any other family is refused",
			template: templateObject("flatcar-r1", map[string]any{"workerClassName": "flatcar-r1", "bootstrap": "flatcar"}),
			wantRefusal: `TestMachineTemplate pool-r1 (WorkerClass flatcar-r1) boots flatcar workers, not Kairos; ` +
				`a KairosConfig cannot bootstrap them: status.resolved.bootstrap: Unsupported value: "flatcar": supported values: "kairos"`,
		},
		{
			name:     "a family without a class name is refused without naming one",
			template: templateObject("", map[string]any{"bootstrap": "talos"}),
			wantRefusal: `TestMachineTemplate pool-r1 boots talos workers, not Kairos; ` +
				`a KairosConfig cannot bootstrap them: status.resolved.bootstrap: Unsupported value: "talos": supported values: "kairos"`,
		},
		{
			name:        "the resolved class is named, not a spec that differs",
			template:    templateObject("talos", map[string]any{"workerClassName": "talos-example-r1", "bootstrap": "talos"}),
			wantRefusal: talosRefusal,
		},
		{
			name:     "a classless template (explicit image) declares no family and is accepted",
			template: templateObject("", map[string]any{"kubernetesVersion": "v1.35.6"}),
		},
		{
			name:     "another provider's template without status is accepted",
			template: templateObject("", nil),
		},
		{
			name:     "a class not resolved yet is waited for",
			template: templateObject("kairos", nil),
			wantWait: true,
		},
		{
			name:     "a malformed family is an error",
			template: templateObject("kairos", map[string]any{"bootstrap": int64(1)}),
			wantErr:  true,
		},
		{
			name:     "a malformed class name is an error",
			template: templateObject("", map[string]any{"workerClassName": []any{"talos"}}),
			wantErr:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := templateClassFrom(tt.template)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring("TestMachineTemplate pool-r1"))
				g.Expect(err.Error()).To(ContainSubstring("status.resolved."))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.awaitingResolution()).To(Equal(tt.wantWait))
			if tt.wantWait {
				g.Expect(c.waitingMessage()).To(Equal("Waiting for TestMachineTemplate pool-r1 to resolve WorkerClass kairos into status.resolved, to check that its workers boot Kairos"))
			}
			g.Expect(c.familyMismatch()).To(Equal(tt.wantRefusal))
		})
	}
}

// TestTemplatePairingReadsTheInfrastructureContract reads real
// KubeVirtMachineTemplates: the fields the reconciler reads as
// unstructured are the infrastructure API's, and the family it accepts is
// the WorkerClass API's Kairos.
func TestTemplatePairingReadsTheInfrastructureContract(t *testing.T) {
	g := NewWithT(t)

	toUnstructured := func(tmpl *infrav1.KubeVirtMachineTemplate) *unstructured.Unstructured {
		tmpl.APIVersion, tmpl.Kind = infrav1.GroupVersion.String(), "KubeVirtMachineTemplate"
		o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl)
		g.Expect(err).NotTo(HaveOccurred())
		return &unstructured.Unstructured{Object: o}
	}
	resolved := func(class string, family workerclassv1.BootstrapFamily) *infrav1.KubeVirtMachineTemplate {
		var selection *infrav1.WorkerClassSelection
		if class != "" {
			selection = &infrav1.WorkerClassSelection{Name: class}
		}
		return &infrav1.KubeVirtMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool-r1"},
			Spec: infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{
				Spec: infrav1.KubeVirtMachineSpec{WorkerClass: selection}}},
			Status: infrav1.KubeVirtMachineTemplateStatus{Resolved: &infrav1.ResolvedMachine{
				WorkerClassName: class, Bootstrap: family, KubernetesVersion: "v1.35.6",
				CloudInitDatasource: infrav1.NoCloudDatasource, ContentHash: "h",
			}},
		}
	}

	talos, err := templateClassFrom(toUnstructured(resolved(workerclassv1.TalosClassName, workerclassv1.BootstrapTalos)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(talos).To(Equal(templateClass{Source: "KubeVirtMachineTemplate pool-r1", WorkerClass: "talos", Resolved: true, Bootstrap: "talos"}))
	g.Expect(talos.familyMismatch()).To(ContainSubstring("KubeVirtMachineTemplate pool-r1 (WorkerClass talos) boots talos workers"))

	kairos, err := templateClassFrom(toUnstructured(resolved(workerclassv1.KairosClassName, workerclassv1.BootstrapKairos)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kairos.familyMismatch()).To(BeEmpty())
	g.Expect(kairos.awaitingResolution()).To(BeFalse())

	classless, err := templateClassFrom(toUnstructured(resolved("", "")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(classless.familyMismatch()).To(BeEmpty())
	g.Expect(classless.awaitingResolution()).To(BeFalse())

	unresolved := resolved(workerclassv1.TalosClassName, workerclassv1.BootstrapTalos)
	unresolved.Status.Resolved = nil
	pending, err := templateClassFrom(toUnstructured(unresolved))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending.awaitingResolution()).To(BeTrue())

	// A classless template's GPUs and instancetype are read where the
	// infrastructure API writes them, and so are its node labels.
	gpus := resolved("", "")
	gpus.Spec.Template.Spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}}
	gpus.Status.NodeLabels = map[string]string{"cluster-api/accelerator": "GA102GL_A10"}
	withGPUs, err := templateClassFrom(toUnstructured(gpus))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(withGPUs.MayAttachGPUs).To(BeTrue())
	labels, refused, err := templateNodeLabels(toUnstructured(gpus))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(refused).To(BeEmpty())
	g.Expect(labels).To(Equal(map[string]string{"cluster-api/accelerator": "GA102GL_A10"}))
	gpus.Status.Resolved = nil
	withGPUs, err = templateClassFrom(toUnstructured(gpus))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(withGPUs.awaitingResolution()).To(BeTrue())
	sized := resolved("", "")
	sized.Spec.Template.Spec.Instancetype = &infrav1.InstancetypeReference{Name: "gn1.xlarge"}
	sized.Status.Resolved = nil
	withInstancetype, err := templateClassFrom(toUnstructured(sized))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(withInstancetype.awaitingResolution()).To(BeTrue())
}

// TestTemplateGPUsAreWaitedFor: a classless template whose machines list
// GPUs or use an instancetype (which may attach some) is waited for until
// it is resolved, as its resolution writes the GPU type the nodes are
// labelled with; a template without either is not.
func TestTemplateGPUsAreWaitedFor(t *testing.T) {
	for _, tt := range []struct {
		name     string
		machine  map[string]any
		resolved bool
		wantWait bool
	}{
		{name: "GPUs listed, not resolved", machine: map[string]any{"gpus": []any{map[string]any{"name": "gpu1", "deviceName": "nvidia.com/GA102GL_A10"}}}, wantWait: true},
		{name: "an instancetype, not resolved", machine: map[string]any{"instancetype": map[string]any{"name": "gn1.xlarge"}}, wantWait: true},
		{name: "GPUs listed, resolved", machine: map[string]any{"gpus": []any{map[string]any{"name": "gpu1", "deviceName": "nvidia.com/GA102GL_A10"}}}, resolved: true},
		{name: "an empty GPU list", machine: map[string]any{"gpus": []any{}}},
		{name: "neither", machine: map[string]any{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var resolved map[string]any
			if tt.resolved {
				resolved = map[string]any{}
			}
			tmpl := templateObject("", resolved)
			tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": tt.machine}}
			c, err := templateClassFrom(tmpl)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.awaitingResolution()).To(Equal(tt.wantWait))
			if tt.wantWait {
				g.Expect(c.waitingMessage()).To(Equal("Waiting for TestMachineTemplate pool-r1 to resolve the GPUs its machines get into status.nodeLabels, to label the nodes with their GPU type"))
			}
		})
	}
}

// TestTemplateNodeLabels: the template's status.nodeLabels are rendered
// under the config's own, which win, and pass the rule the config's own
// pass at admission (nodelabels.Validate): a label the kubelet may not set
// on itself or of invalid syntax is a refusal naming the template and the
// field; a malformed field is an error.
func TestTemplateNodeLabels(t *testing.T) {
	withLabels := func(labels any) *unstructured.Unstructured {
		tmpl := templateObject("", map[string]any{})
		tmpl.Object["status"].(map[string]any)["nodeLabels"] = labels
		return tmpl
	}
	for _, tt := range []struct {
		name        string
		template    *unstructured.Unstructured
		want        map[string]string
		wantRefusal string
		wantErr     string
	}{
		{name: "the GPU type", template: withLabels(map[string]any{"cluster-api/accelerator": "GA102GL_A10"}), want: map[string]string{"cluster-api/accelerator": "GA102GL_A10"}},
		{name: "none", template: templateObject("", nil)},
		{name: "a label the kubelet sets on itself", template: withLabels(map[string]any{"node.kubernetes.io/instance-type": "u1.large", "topology.kubernetes.io/zone": "a"}),
			want: map[string]string{"node.kubernetes.io/instance-type": "u1.large", "topology.kubernetes.io/zone": "a"}},
		{name: "invalid syntax", template: withLabels(map[string]any{"cluster-api/accelerator": "nvidia.com/GA102GL_A10"}),
			wantRefusal: `TestMachineTemplate pool-r1 gives its nodes labels the config's own nodeLabels may not have: status.nodeLabels: Invalid value: "nvidia.com/GA102GL_A10"`},
		{name: "a control-plane role written into status", template: withLabels(map[string]any{"node-role.kubernetes.io/control-plane": ""}),
			wantRefusal: `status.nodeLabels[node-role.kubernetes.io/control-plane]: Invalid value: "node-role.kubernetes.io/control-plane": labels in the kubernetes.io and k8s.io namespaces are limited`},
		{name: "a NodeRestriction label written into status", template: withLabels(map[string]any{"node-restriction.kubernetes.io/dedicated": "infra"}),
			wantRefusal: `status.nodeLabels[node-restriction.kubernetes.io/dedicated]: Invalid value`},
		{name: "not a map", template: withLabels("cluster-api/accelerator=GA102GL_A10"), wantErr: "reading status.nodeLabels of TestMachineTemplate pool-r1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			labels, refused, err := templateNodeLabels(tt.template)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tt.wantRefusal != "" {
				g.Expect(refused).To(ContainSubstring(tt.wantRefusal))
				g.Expect(labels).To(BeNil())
				return
			}
			g.Expect(refused).To(BeEmpty())
			g.Expect(labels).To(Equal(tt.want))
		})
	}

	g := NewWithT(t)
	g.Expect(nodeLabels(map[string]string{"cluster-api/accelerator": "GA102GL_A10"}, map[string]string{"cluster-api/accelerator": "a10", "pool": "gpu"})).
		To(Equal(map[string]string{"cluster-api/accelerator": "a10", "pool": "gpu"}), "the label the user set wins")
	g.Expect(nodeLabels(map[string]string{"cluster-api/accelerator": "GA102GL_A10"}, map[string]string{"pool": "gpu"})).
		To(Equal(map[string]string{"cluster-api/accelerator": "GA102GL_A10", "pool": "gpu"}))
	g.Expect(nodeLabels(nil, map[string]string{"pool": "gpu"})).To(Equal(map[string]string{"pool": "gpu"}))
}

// TestKairosConfigRefusesANonKairosClass pairs a KairosConfig with a
// template resolved from a Talos class: no bootstrap data, no token, a
// False condition naming the mismatch, and a final refusal (no requeue,
// and a second reconcile reads nothing uncached and writes nothing).
func TestKairosConfigRefusesANonKairosClass(t *testing.T) {
	cm := startController(t, loadTTL)
	tests := []struct {
		name, class, family string
		refused             bool
	}{
		{name: "a Talos class is refused", class: "talos-example-r1", family: "talos", refused: true},
		{name: "a Kairos class renders", class: "kairos-example-r1", family: string(workerclassv1.BootstrapKairos)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, readyCluster)
			g := f.g
			w := f.newWorker("worker-0", machineOptions{
				vmName:        "pairing-vm-" + string(rune('a'+i)),
				templateClass: tt.class,
				template: map[string]any{
					"workerClassName": tt.class, "bootstrap": tt.family,
					"kubernetesVersion": testVersion, "kubernetesVersionMatch": string(workerclassv1.KubernetesVersionMatchMinor),
				},
			})
			if !tt.refused {
				f.waitForData(w)
				return
			}
			cond := f.waitForReason(w, bootstrapv1.BootstrapFamilyMismatchReason)
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Message).To(Equal(`TestMachineTemplate worker-0-template (WorkerClass talos-example-r1) boots talos workers, not Kairos; ` +
				`a KairosConfig cannot bootstrap them: status.resolved.bootstrap: Unsupported value: "talos": supported values: "kairos"`))
			g.Consistently(func(g Gomega) {
				g.Expect(apierrors.IsNotFound(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: w.config.Name}, &corev1.Secret{}))).To(BeTrue())
				g.Expect(workloadTokensFor(g, w)).To(BeEmpty())
				_, found := f.storedToken(w)
				g.Expect(found).To(BeFalse())
			}, time.Second, 200*time.Millisecond).Should(Succeed())
			cfg := &bootstrapv1.KairosConfig{}
			g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
			g.Expect(conditions.IsFalse(cfg, bootstrapv1.ReadyCondition)).To(BeTrue())
			g.Expect(cfg.Status.Initialization.DataSecretCreated).To(BeNil())

			// Once the manager's cache shows the condition, reconciling
			// again sends no request and asks for no requeue.
			g.Eventually(func(g Gomega) {
				cached := &bootstrapv1.KairosConfig{}
				g.Expect(cm.reconciler.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cached)).To(Succeed())
				g.Expect(conditions.GetReason(cached, bootstrapv1.DataSecretAvailableCondition)).To(Equal(bootstrapv1.BootstrapFamilyMismatchReason))
			}, eventually, 50*time.Millisecond).Should(Succeed())
			res, requests := reconcileAlone(g, cm, w, time.Now())
			g.Expect(requests).To(BeEmpty())
			g.Expect(res.IsZero()).To(BeTrue())
		})
	}
}

// TestAResolvedTemplateReconcilesTheConfigsWithoutData: the template watch
// passes a template's first status.resolved only, and maps it to the
// configs of its namespace that have not rendered, within the watch filter.
func TestAResolvedTemplateReconcilesTheConfigsWithoutData(t *testing.T) {
	g := NewWithT(t)
	unresolved, resolved := templateObject("kairos", nil), templateObject("kairos", map[string]any{"bootstrap": "kairos"})
	p := templateResolved()
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: unresolved, ObjectNew: resolved})).To(BeTrue())
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: resolved, ObjectNew: resolved})).To(BeFalse(), "a resolved template changes no family")
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: unresolved, ObjectNew: unresolved})).To(BeFalse())
	g.Expect(p.Create(event.CreateEvent{Object: resolved})).To(BeTrue(), "a template resolved before the watch started")
	g.Expect(p.Create(event.CreateEvent{Object: unresolved})).To(BeFalse())
	g.Expect(p.Delete(event.DeleteEvent{Object: resolved})).To(BeFalse())

	s := runtime.NewScheme()
	g.Expect(bootstrapv1.AddToScheme(s)).To(Succeed())
	config := func(namespace, name, filter string, rendered bool) *bootstrapv1.KairosConfig {
		c := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{}}}
		if filter != "" {
			c.Labels[clusterv1.WatchLabel] = filter
		}
		if rendered {
			c.Status.Initialization.DataSecretCreated = ptr.To(true)
		}
		return c
	}
	objects := []client.Object{
		config("ns", "waiting", "", false),
		config("ns", "rendered", "", true),
		config("ns", "other-instance", "b", false),
		config("ns", "this-instance", "a", false),
		config("other-ns", "waiting", "", false),
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(objects...).Build()}
	names := func(reqs []ctrl.Request) []string {
		var out []string
		for _, req := range reqs {
			out = append(out, req.String())
		}
		return out
	}
	g.Expect(names(r.templateToKairosConfigs(context.Background(), resolved))).To(ConsistOf("ns/waiting", "ns/other-instance", "ns/this-instance"))
	r.WatchFilterValue = "a"
	g.Expect(names(r.templateToKairosConfigs(context.Background(), resolved))).To(ConsistOf("ns/this-instance"))
}
