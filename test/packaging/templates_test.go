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

package packaging

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/cluster-api/core/reconcilers/topology/cluster/patches/inline"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	"sigs.k8s.io/cluster-api/feature"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	infraadmission "github.com/cozystack/cluster-api-workers/infrastructure/webhooks/admission"
)

// variableUse matches a clusterctl variable, ${NAME} or ${NAME:=default}.
var variableUse = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(:=([^}]*))?\}`)

// templateFiles returns the cluster templates and their flavor names ("" for
// cluster-template.yaml).
func templateFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "cluster-template*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	flavors := map[string]string{}
	for _, f := range files {
		flavor := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "cluster-template"), ".yaml")
		flavors[strings.TrimPrefix(flavor, "-")] = f
	}
	return flavors
}

// clusterClassFiles returns the shipped ClusterClasses by name, from their
// clusterclass-<name>.yaml files.
func clusterClassFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "clusterclass-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]string{}
	for _, f := range files {
		classes[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "clusterclass-"), ".yaml")] = f
	}
	return classes
}

// clusterctlPasses are the variables `clusterctl generate cluster` always
// sets, from its flags (with defaults of its own: 0 workers, 1 control plane
// replica).
var clusterctlPasses = map[string]string{
	"WORKER_MACHINE_COUNT":        "--worker-machine-count",
	"CONTROL_PLANE_MACHINE_COUNT": "--control-plane-machine-count",
}

// TestTemplatesDocumentEveryVariable checks that each flavor's and
// ClusterClass's header comment lists every variable the file uses, and that
// a variable used more than once always has the same default (clusterctl
// takes the first).
func TestTemplatesDocumentEveryVariable(t *testing.T) {
	flavors := templateFiles(t, filepath.Join(repoRoot, "templates"))
	NewWithT(t).Expect(flavors).To(HaveKey(""), "a default flavor, cluster-template.yaml")
	for _, flavor := range []string{"kairos", "talos", "kairos-fixed-image", "scale-from-zero", "topology-kairos", "topology-talos"} {
		NewWithT(t).Expect(flavors).To(HaveKey(flavor), "the %s flavor", flavor)
	}
	files := map[string]string{}
	for flavor, file := range flavors {
		files[fmt.Sprintf("the %q flavor", flavor)] = file
	}
	for class, file := range clusterClassFiles(t, filepath.Join(repoRoot, "templates")) {
		files[fmt.Sprintf("ClusterClass %s", class)] = file
	}
	for flavor, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(file) //nolint:gosec // A cluster template in the repository.
			g.Expect(err).NotTo(HaveOccurred())
			var header []string
			for _, line := range strings.Split(string(data), "\n") {
				if !strings.HasPrefix(line, "#") {
					break
				}
				header = append(header, line)
			}
			doc := strings.Join(header, "\n")
			_, documented, found := strings.Cut(doc, "Variables")
			g.Expect(found).To(BeTrue(), "the header of %s has a Variables section", flavor)
			g.Expect(doc).To(ContainSubstring("clusterctl generate cluster"), "the header shows how to generate the flavor")
			defaults := map[string]string{}
			for _, m := range variableUse.FindAllStringSubmatch(string(data), -1) {
				name, hasDefault, def := m[1], m[2] != "", m[3]
				g.Expect(documented).To(MatchRegexp(`\b`+name+`\b`), "variable %s is documented in the header", name)
				if !hasDefault {
					continue
				}
				// clusterctl always passes these two from its flags, so a
				// header giving the file's default as the pool's size
				// would be wrong under clusterctl.
				if flag, ok := clusterctlPasses[name]; ok {
					g.Expect(documented).To(ContainSubstring(flag), "the header says clusterctl passes %s from %s", name, flag)
				}
				if prev, ok := defaults[name]; ok {
					g.Expect(def).To(Equal(prev), "variable %s has one default", name)
				}
				defaults[name] = def
			}
		})
	}
}

// clusterScopedKinds are the kinds the project's CRDs (everything under
// config/) declare cluster-scoped, with the core kinds of clusterScoped.
func clusterScopedKinds(t *testing.T) map[string]bool {
	t.Helper()
	kinds := map[string]bool{}
	for k, v := range clusterScoped {
		kinds[k] = v
	}
	err := filepath.WalkDir(filepath.Join(repoRoot, "config"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" || filepath.Base(filepath.Dir(path)) != "bases" {
			return err
		}
		for _, o := range readObjects(t, path) {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			if scope == string(apiextensionsv1.ClusterScoped) {
				kinds[kind] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return kinds
}

// TestTenantTemplatesHoldOnlyNamespacedObjects checks that no flavor holds a
// cluster-scoped object: a flavor is a tenant's pool or cluster, which
// `kubectl delete -f` or a pool's deletion removes with everything in it,
// and a cluster-scoped object (a WorkerClass) is shared by every tenant. The
// hoster's WorkerClass of the kairos-fixed-image flavor ships on its own
// (templates/workerclass-kairos-fixed-image.yaml).
func TestTenantTemplatesHoldOnlyNamespacedObjects(t *testing.T) {
	scoped := clusterScopedKinds(t)
	NewWithT(t).Expect(scoped).To(HaveKey("WorkerClass"), "the WorkerClass CRD is found")
	for flavor, file := range templateFiles(t, filepath.Join(repoRoot, "templates")) {
		t.Run("flavor="+flavor, func(t *testing.T) {
			g := NewWithT(t)
			for _, o := range renderWithDefaults(t, file) {
				g.Expect(scoped[o.GetKind()]).To(BeFalse(), "%s %s is cluster-scoped: it belongs to the hoster, not to a tenant's template", o.GetKind(), o.GetName())
				g.Expect(o.GetNamespace()).NotTo(BeEmpty(), "%s %s is in the tenant's namespace", o.GetKind(), o.GetName())
			}
		})
	}
}

// TestEveryPoolHasOneOwnerOfItsSize checks that each pool of every flavor,
// a MachineDeployment or a topology's machineDeployments entry, either sets
// replicas (a pool of fixed size) or the cluster autoscaler's bounds (a pool
// the autoscaler sizes), never both: with both, every apply of the flavor
// resets the autoscaler's decision to the file's count.
func TestEveryPoolHasOneOwnerOfItsSize(t *testing.T) {
	owners := map[string]string{}
	for flavor, file := range templateFiles(t, filepath.Join(repoRoot, "templates")) {
		for _, o := range renderWithDefaults(t, file) {
			pools := map[string]map[string]any{}
			switch o.GetKind() {
			case "MachineDeployment":
				replicas, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
				pools[o.GetName()] = map[string]any{"replicas": replicas, "annotations": o.GetAnnotations()}
			case "Cluster":
				entries, _, _ := unstructured.NestedSlice(o.Object, "spec", "topology", "workers", "machineDeployments")
				for _, e := range entries {
					entry := e.(map[string]any)
					annotations, _, _ := unstructured.NestedStringMap(entry, "metadata", "annotations")
					pools[fmt.Sprint(entry["name"])] = map[string]any{"replicas": entry["replicas"], "annotations": annotations}
				}
			}
			for name, pool := range pools {
				annotations, _ := pool["annotations"].(map[string]string)
				_, hasMin := annotations[clusterv1.AutoscalerMinSizeAnnotation]
				_, hasMax := annotations[clusterv1.AutoscalerMaxSizeAnnotation]
				hasReplicas := pool["replicas"] != nil
				where := fmt.Sprintf("flavor %q, pool %s", flavor, name)
				NewWithT(t).Expect(hasMin).To(Equal(hasMax), "%s: the autoscaler needs both bounds", where)
				NewWithT(t).Expect(hasReplicas).NotTo(Equal(hasMin), "%s: replicas or the autoscaler's bounds, exactly one", where)
				owners[flavor] = map[bool]string{true: "file", false: "autoscaler"}[hasReplicas]
			}
		}
	}
	// The two Kairos pool flavors are the two owners.
	NewWithT(t).Expect(owners).To(HaveKeyWithValue("kairos", "file"))
	NewWithT(t).Expect(owners).To(HaveKeyWithValue("scale-from-zero", "autoscaler"))
}

// TestHosterWorkerClassOfTheFixedImageFlavor checks the hoster's side of the
// kairos-fixed-image flavor: templates/workerclass-kairos-fixed-image.yaml
// renders, from the flavor's own variables, exactly the WorkerClass that the
// flavor's pool selects, with the Kubernetes version its Machines run.
func TestHosterWorkerClassOfTheFixedImageFlavor(t *testing.T) {
	g := NewWithT(t)
	classes := renderWithDefaults(t, filepath.Join(repoRoot, "templates", "workerclass-kairos-fixed-image.yaml"))
	g.Expect(classes).To(HaveLen(1))
	class := classes[0]
	g.Expect(class.GetKind()).To(Equal("WorkerClass"))
	g.Expect(class.GetNamespace()).To(BeEmpty(), "cluster-scoped")
	g.Expect(class.GetName()).To(Equal(sampleVariables["WORKER_CLASS"]))
	version, _, _ := unstructured.NestedString(class.Object, "spec", "image", "kubernetesVersion")
	g.Expect(version).To(Equal(sampleVariables["KUBERNETES_VERSION"]))

	pool := renderWithDefaults(t, filepath.Join(repoRoot, "templates", "cluster-template-kairos-fixed-image.yaml"))
	templates := byKind(pool, "KubeVirtMachineTemplate")
	g.Expect(templates).To(HaveLen(1))
	selected, _, _ := unstructured.NestedString(templates[0].Object, "spec", "template", "spec", "workerClass", "name")
	g.Expect(selected).To(Equal(class.GetName()), "the pool selects the hoster's class")
	deployments := byKind(pool, "MachineDeployment")
	g.Expect(deployments).To(HaveLen(1))
	machineVersion, _, _ := unstructured.NestedString(deployments[0].Object, "spec", "template", "spec", "version")
	g.Expect(machineVersion).To(Equal(version), "the Machines run the class's Kubernetes version")
}

// templateRef is an object a ClusterClass refers to, by API group, kind and
// name (in the ClusterClass's namespace).
type templateRef struct{ group, kind, name string }

func classTemplateRefs(tb testing.TB, obj *unstructured.Unstructured) []templateRef {
	tb.Helper()
	class := &clusterv1.ClusterClass{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, class, true); err != nil {
		tb.Fatalf("reading ClusterClass %s: %v", obj.GetName(), err)
	}
	refs := []clusterv1.ClusterClassTemplateReference{class.Spec.Infrastructure.TemplateRef, class.Spec.ControlPlane.TemplateRef}
	if class.Spec.ControlPlane.MachineInfrastructure.TemplateRef.IsDefined() {
		refs = append(refs, class.Spec.ControlPlane.MachineInfrastructure.TemplateRef)
	}
	for _, md := range class.Spec.Workers.MachineDeployments {
		refs = append(refs, md.Bootstrap.TemplateRef, md.Infrastructure.TemplateRef)
	}
	out := make([]templateRef, 0, len(refs))
	for _, r := range refs {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil {
			tb.Fatalf("ClusterClass %s refers to %s %s with apiVersion %q: %v", obj.GetName(), r.Kind, r.Name, r.APIVersion, err)
		}
		out = append(out, templateRef{gv.Group, r.Kind, r.Name})
	}
	return out
}

// renderWithDefaults renders a template as clusterctl does with only the
// sample values of required variables set.
func renderWithDefaults(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(file) //nolint:gosec // A template of the repository.
	if err != nil {
		t.Fatal(err)
	}
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(name string) (string, error) {
		if name == "NAMESPACE" {
			return "tenant-topology", nil
		}
		if v, ok := sampleVariables[name]; ok {
			return v, nil
		}
		if name == "CLUSTER_NAME" {
			return clusterName, nil
		}
		return "", fmt.Errorf("variable %s is not set", name)
	})
	if err != nil {
		t.Fatalf("rendering %s: %v", filepath.Base(file), err)
	}
	return decode(t, out)
}

// TestTopologyFlavorsAndTheirClusterClasses checks, without an apiserver,
// what clusterctl and Cluster API only find out when the Cluster is applied:
// each topology flavor names a ClusterClass shipped as
// clusterclass-<name>.yaml, which holds exactly the class and the templates
// it refers to and passes Cluster API's own ClusterClass validation
// (variables, patches, health checks) and patches only what topology copies
// from a template; the flavor uses only the class's
// worker classes and variables and sets every required variable without a
// default.
func TestTopologyFlavorsAndTheirClusterClasses(t *testing.T) {
	// The ClusterClass webhook refuses everything with the gate off, as the
	// released core provider does without CLUSTER_TOPOLOGY=true.
	g := NewWithT(t)
	g.Expect(feature.MutableGates.Set(string(feature.ClusterTopology) + "=true")).To(Succeed())
	dir := filepath.Join(repoRoot, "templates")
	classFiles := clusterClassFiles(t, dir)
	g.Expect(classFiles).To(HaveKey("kairos-workers"))
	g.Expect(classFiles).To(HaveKey("talos-workers"))

	classes := map[string]*clusterv1.ClusterClass{}
	for name, file := range classFiles {
		t.Run("clusterclass-"+name, func(t *testing.T) {
			g := NewWithT(t)
			objs := renderWithDefaults(t, file)
			byRef := map[templateRef]bool{}
			for _, o := range objs {
				byRef[templateRef{o.GroupVersionKind().Group, o.GetKind(), o.GetName()}] = true
				g.Expect(o.GetNamespace()).To(BeEmpty(), "%s %s sets no namespace: clusterctl puts a ClusterClass file's objects into the target namespace, as its contract asks", o.GetKind(), o.GetName())
			}
			found := byKind(objs, "ClusterClass")
			g.Expect(found).To(HaveLen(1), "the file holds one ClusterClass")
			g.Expect(found[0].GetName()).To(Equal(name), "the file is named after its ClusterClass, as clusterctl looks it up")
			refs := classTemplateRefs(t, found[0])
			for _, r := range refs {
				g.Expect(byRef).To(HaveKey(r), "the ClusterClass's %s %s ships with it", r.kind, r.name)
			}
			g.Expect(objs).To(HaveLen(len(refs)+1), "the file holds nothing the ClusterClass does not refer to")

			class := &clusterv1.ClusterClass{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(found[0].Object, class, true)).To(Succeed())
			// Topology applies patches to spec.template of a template and
			// drops the rest, so a patch anywhere else would be silently
			// lost; the KubeVirtMachineTemplate's class selection is in
			// spec.template.spec.workerClass for this reason.
			for _, patch := range class.Spec.Patches {
				for _, definition := range patch.Definitions {
					for _, op := range definition.JSONPatches {
						g.Expect(op.Path).To(Or(HavePrefix("/spec/template/spec/"), HavePrefix("/spec/template/metadata/")),
							"patch %s: Cluster API applies patches to spec.template of a template only", patch.Name)
					}
				}
			}
			_, err := (&coreadmission.ClusterClass{}).ValidateCreate(t.Context(), class)
			g.Expect(err).NotTo(HaveOccurred(), "Cluster API's ClusterClass validation")
			classes[name] = class
		})
	}

	for flavor, file := range templateFiles(t, dir) {
		objs := renderWithDefaults(t, file)
		clusters := byKind(objs, "Cluster")
		if len(clusters) != 1 {
			continue
		}
		cluster := &clusterv1.Cluster{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(clusters[0].Object, cluster, true)).To(Succeed())
		if !cluster.Spec.Topology.IsDefined() {
			continue
		}
		t.Run("flavor="+flavor, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(objs).To(HaveLen(1), "a topology flavor is its Cluster; the ClusterClass comes from its own file")
			class, ok := classes[cluster.Spec.Topology.ClassRef.Name]
			g.Expect(ok).To(BeTrue(), "ClusterClass %s ships as clusterclass-%s.yaml", cluster.Spec.Topology.ClassRef.Name, cluster.Spec.Topology.ClassRef.Name)
			if !ok {
				return
			}
			workerClasses := map[string]bool{}
			for _, md := range class.Spec.Workers.MachineDeployments {
				workerClasses[md.Class] = true
			}
			g.Expect(cluster.Spec.Topology.Workers.MachineDeployments).NotTo(BeEmpty(), "the flavor has a pool")
			for _, md := range cluster.Spec.Topology.Workers.MachineDeployments {
				g.Expect(workerClasses).To(HaveKey(md.Class), "pool %s uses a worker class of %s", md.Name, class.Name)
			}
			declared := map[string]clusterv1.ClusterClassVariable{}
			for _, v := range class.Spec.Variables {
				declared[v.Name] = v
			}
			set := map[string]bool{}
			for _, v := range cluster.Spec.Topology.Variables {
				g.Expect(declared).To(HaveKey(v.Name), "variable %s is one of %s", v.Name, class.Name)
				set[v.Name] = true
			}
			for _, v := range class.Spec.Variables {
				if ptr.Deref(v.Required, false) && v.Schema.OpenAPIV3Schema.Default == nil {
					g.Expect(set).To(HaveKey(v.Name), "the flavor sets %s, which %s requires", v.Name, class.Name)
				}
			}
		})
	}
}

// TestClusterClassPatchesMakeValidMachineTemplates generates each shipped
// ClusterClass's patches for its pools' KubeVirtMachineTemplates with
// Cluster API's own inline patch generator, as topology does for a pool at
// a sample version and WorkerClass, applies them and checks that the result
// is a KubeVirtMachineTemplate our API and webhook accept, with the class
// and the minor of the pool's version in spec.template.spec.workerClass. A
// replace of a field the template lacks fails topology at run time, so it
// fails here.
func TestClusterClassPatchesMakeValidMachineTemplates(t *testing.T) {
	const (
		poolVersion = "v1.35.6"
		poolMinor   = "v1.35"
		poolClass   = "kairos-v1-35-6-r1"
	)
	for name, file := range clusterClassFiles(t, filepath.Join(repoRoot, "templates")) {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs := renderWithDefaults(t, file)
			class := &clusterv1.ClusterClass{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(byKind(objs, "ClusterClass")[0].Object, class, true)).To(Succeed())
			var global []runtimehooksv1.Variable
			for _, v := range class.Spec.Variables {
				value := v.Schema.OpenAPIV3Schema.Default
				if v.Name == "workerClass" {
					value = &apiextensionsv1.JSON{Raw: []byte(`"` + poolClass + `"`)}
				}
				if value != nil {
					global = append(global, runtimehooksv1.Variable{Name: v.Name, Value: *value})
				}
			}
			g.Expect(global).To(ContainElement(HaveField("Name", "workerClass")), "the class declares the workerClass variable")
			for _, md := range class.Spec.Workers.MachineDeployments {
				var template *unstructured.Unstructured
				for _, o := range byKind(objs, "KubeVirtMachineTemplate") {
					if o.GetName() == md.Infrastructure.TemplateRef.Name {
						template = o.DeepCopy()
					}
				}
				g.Expect(template).NotTo(BeNil(), "worker class %s's KubeVirtMachineTemplate ships with the class", md.Class)
				builtin, err := json.Marshal(map[string]any{"machineDeployment": map[string]any{
					"class": md.Class, "version": poolVersion, "topologyName": "pool", "name": "tenant-pool"}})
				g.Expect(err).NotTo(HaveOccurred())
				req := &runtimehooksv1.GeneratePatchesRequest{Variables: global, Items: []runtimehooksv1.GeneratePatchesRequestItem{{
					UID:             "pool",
					HolderReference: runtimehooksv1.HolderReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment", Name: "tenant-pool", FieldPath: "spec.template.spec.infrastructureRef"},
					Object:          runtime.RawExtension{Object: template},
					Variables:       []runtimehooksv1.Variable{{Name: "builtin", Value: apiextensionsv1.JSON{Raw: builtin}}},
				}}}
				for _, patch := range class.Spec.Patches {
					resp, err := inline.NewGenerator(&patch).Generate(t.Context(), nil, req)
					g.Expect(err).NotTo(HaveOccurred(), "patch %s", patch.Name)
					for _, item := range resp.Items {
						applyJSONPatch(t, template, patch.Name, item.Patch)
					}
				}

				typed := &infrav1.KubeVirtMachineTemplate{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(template.Object, typed, true)).To(Succeed(),
					"the patched template of worker class %s has only fields of our API", md.Class)
				selection := typed.Spec.Template.Spec.WorkerClass
				g.Expect(selection).NotTo(BeNil())
				g.Expect(selection.Name).To(Equal(poolClass), "the workerClass variable")
				g.Expect(selection.Version).To(Equal(poolMinor), "the minor of the pool's version")
				webhook := &infraadmission.KubeVirtMachineTemplate{}
				g.Expect(webhook.Default(t.Context(), typed)).To(Succeed())
				g.Expect(typed.Labels).To(HaveKeyWithValue(infrav1.WorkerClassLabel, poolClass), "the webhook relabels the clone with its class")
				_, err = webhook.ValidateCreate(t.Context(), typed)
				g.Expect(err).NotTo(HaveOccurred(), "our webhook accepts the patched template of worker class %s", md.Class)
			}
		})
	}
}

// applyJSONPatch applies the add and replace operations Cluster API
// generates for the shipped classes, whose paths name object fields only;
// a replace needs the field to exist, as in RFC 6902.
func applyJSONPatch(t *testing.T, obj *unstructured.Unstructured, patchName string, patch []byte) {
	t.Helper()
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patchName, err)
	}
	for _, op := range ops {
		fields := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		for i, f := range fields {
			fields[i] = strings.ReplaceAll(strings.ReplaceAll(f, "~1", "/"), "~0", "~")
		}
		switch op.Op {
		case "replace":
			if _, found, err := unstructured.NestedFieldNoCopy(obj.Object, fields...); err != nil || !found {
				t.Fatalf("patch %s replaces %s, which %s %s does not have: topology would fail", patchName, op.Path, obj.GetKind(), obj.GetName())
			}
		case "add":
		default:
			t.Fatalf("patch %s: operation %s on %s: extend applyJSONPatch", patchName, op.Op, op.Path)
		}
		if err := unstructured.SetNestedField(obj.Object, runtime.DeepCopyJSONValue(op.Value), fields...); err != nil {
			t.Fatalf("patch %s: %s %s: %v", patchName, op.Op, op.Path, err)
		}
	}
}
