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

package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	pooladmission "github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

func ptr(s string) *string { return &s }

func TestWorkerClassWebhook(t *testing.T) {
	w := &WorkerClass{}
	ctx := context.Background()
	valid := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos-example-r1"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos, Talos: &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}}}}

	if _, err := w.ValidateCreate(ctx, valid); err != nil {
		t.Errorf("valid class rejected: %v", err)
	}
	invalid := valid.DeepCopy()
	invalid.Spec.Bootstrap = workerclassv1.BootstrapKairos
	if _, err := w.ValidateCreate(ctx, invalid); err == nil || !strings.Contains(err.Error(), "Talos settings are not Kairos configuration") {
		t.Errorf("Kairos class with Talos settings: %v", err)
	}

	t.Run("the webhook refuses any spec change", func(t *testing.T) {
		changed := valid.DeepCopy()
		changed.Spec.CloudInitDatasource = workerclassv1.CloudInitConfigDrive
		_, err := w.ValidateUpdate(ctx, valid, changed)
		if err == nil || !strings.Contains(err.Error(), "spec: Forbidden: the spec is immutable") {
			t.Errorf("spec change: %v", err)
		}
		relabelled := valid.DeepCopy()
		relabelled.Labels = map[string]string{"a": "b"}
		if _, err := w.ValidateUpdate(ctx, valid, relabelled); err != nil {
			t.Errorf("metadata change rejected: %v", err)
		}
	})
	t.Run("a stored class today's rules refuse can still lose its finalizer", func(t *testing.T) {
		stored := invalid.DeepCopy()
		stored.Finalizers = []string{"cozystack.io/in-use"}
		released := stored.DeepCopy()
		released.Finalizers = nil
		if _, err := w.ValidateUpdate(ctx, stored, released); err != nil {
			t.Errorf("finalizer removal from a stored invalid class rejected: %v", err)
		}
	})
	t.Run("deletion is allowed; the finalizer protects classes in use", func(t *testing.T) {
		if _, err := w.ValidateDelete(ctx, valid); err != nil {
			t.Error(err)
		}
	})
	t.Run("built-in names keep their family", func(t *testing.T) {
		for name, family := range map[string]workerclassv1.BootstrapFamily{"talos": workerclassv1.BootstrapKairos, "kairos": workerclassv1.BootstrapTalos} {
			c := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: family}}
			if _, err := w.ValidateCreate(ctx, c); err == nil || !strings.Contains(err.Error(), "built-in class") {
				t.Errorf("%s with %s: %v", name, family, err)
			}
		}
	})
}

func TestWorkerPlatformWebhook(t *testing.T) {
	w := &WorkerPlatform{}
	ctx := context.Background()
	p := &workerclassv1.WorkerPlatform{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: workerclassv1.WorkerPlatformSpec{DefaultClass: "talos"}}
	if _, err := w.ValidateCreate(ctx, p); err != nil {
		t.Errorf("valid platform rejected: %v", err)
	}
	bad := p.DeepCopy()
	bad.Spec.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.34.2"}}
	if _, err := w.ValidateUpdate(ctx, p, bad); err == nil || !strings.Contains(err.Error(), "the patch must belong to minor v1.35") {
		t.Errorf("bad patch: %v", err)
	}
	// A stored configuration today's rules refuse can still change its
	// metadata.
	labelled := bad.DeepCopy()
	labelled.Labels = map[string]string{"a": "b"}
	if _, err := w.ValidateUpdate(ctx, bad, labelled); err != nil {
		t.Errorf("metadata change of a stored invalid platform rejected: %v", err)
	}
	if _, err := w.ValidateDelete(ctx, p); err != nil {
		t.Error(err)
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := workerclassv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func testReader(t *testing.T, funcs *interceptor.Funcs) client.Client {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(
		&workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}},
		&workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "kairos"}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}},
		&workerclassv1.WorkerPlatform{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass:       "talos",
			KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
			TalosFactory:       workerclassv1.TalosFactoryDefaults{Version: "v1.13.6", SchematicID: strings.Repeat("a", 64)},
			KairosImages:       []workerclassv1.KairosImage{{Minor: "v1.35", Reference: "ghcr.io/x/kairos@sha256:" + strings.Repeat("1", 64)}},
		}},
	)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

func poolRequest(t *testing.T, op admissionv1.Operation, obj, old string) admission.Request {
	t.Helper()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op,
		Object:    runtime.RawExtension{Raw: []byte(obj)},
	}}
	if old != "" {
		req.OldObject = runtime.RawExtension{Raw: []byte(old)}
	}
	return req
}

const poolHead = `{"apiVersion":"apps.cozystack.io/v1alpha1","kind":"KubernetesNodes","metadata":{"name":"p","namespace":"t"%s},"spec":%s}`

func poolJSON(labels, spec string) string {
	if labels != "" {
		labels = `,"labels":` + labels
	}
	return strings.Replace(strings.Replace(poolHead, "%s", labels, 1), "%s", spec, 1)
}

// applyPatches applies a response's JSON patch to obj and returns the result.
func applyPatches(t *testing.T, obj string, resp admission.Response) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(obj), &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Patches {
		if p.Operation != "add" && p.Operation != "replace" {
			t.Fatalf("unexpected patch %v", p)
		}
		parts := strings.Split(strings.TrimPrefix(p.Path, "/"), "/")
		node := doc
		for _, part := range parts[:len(parts)-1] {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			next, ok := node[part].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[part] = next
			}
			node = next
		}
		last := strings.ReplaceAll(strings.ReplaceAll(parts[len(parts)-1], "~1", "/"), "~0", "~")
		node[last] = p.Value
	}
	return doc
}

func TestPoolMutatingWebhook(t *testing.T) {
	ctx := context.Background()
	p := &Pool{Reader: testReader(t, nil)}

	t.Run("CREATE without a class stores the platform default and labels the pool", func(t *testing.T) {
		obj := poolJSON("", `{"cluster":"c","version":"v1.35"}`)
		resp := p.Mutate(ctx, poolRequest(t, admissionv1.Create, obj, ""))
		if !resp.Allowed {
			t.Fatalf("denied: %v", resp.Result)
		}
		doc := applyPatches(t, obj, resp)
		spec := doc["spec"].(map[string]any)
		labels := doc["metadata"].(map[string]any)["labels"].(map[string]any)
		if spec["workerClassName"] != "talos" || labels[workerclassv1.WorkerClassLabel] != "talos" {
			t.Errorf("patched object %v", doc)
		}
	})
	t.Run("UPDATE of a classified pool without a class restores it", func(t *testing.T) {
		old := poolJSON(`{"cozystack.io/worker-class":"kairos"}`, `{"cluster":"c","workerClassName":"kairos","version":"v1.35"}`)
		obj := poolJSON("", `{"cluster":"c","version":"v1.35"}`)
		resp := p.Mutate(ctx, poolRequest(t, admissionv1.Update, obj, old))
		doc := applyPatches(t, obj, resp)
		if !resp.Allowed || doc["spec"].(map[string]any)["workerClassName"] != "kairos" {
			t.Errorf("response %v, object %v", resp.Result, doc)
		}
	})
	t.Run("UPDATE of a classless pool is allowed unchanged", func(t *testing.T) {
		obj := poolJSON("", `{"cluster":"c"}`)
		resp := p.Mutate(ctx, poolRequest(t, admissionv1.Update, obj, obj))
		if !resp.Allowed || len(resp.Patches) > 0 {
			t.Errorf("response %+v", resp)
		}
	})
	t.Run("UPDATE of a classless pool loses a class label", func(t *testing.T) {
		obj := poolJSON(`{"cozystack.io/worker-class":"kairos","team":"a"}`, `{"cluster":"c"}`)
		resp := p.Mutate(ctx, poolRequest(t, admissionv1.Update, obj, poolJSON("", `{"cluster":"c"}`)))
		if !resp.Allowed || len(resp.Patches) != 1 || resp.Patches[0].Operation != "remove" ||
			resp.Patches[0].Path != "/metadata/labels/cozystack.io~1worker-class" {
			t.Errorf("response %v, patches %+v", resp.Result, resp.Patches)
		}
	})
	t.Run("a refusal is a 422 with field causes", func(t *testing.T) {
		resp := p.Mutate(ctx, poolRequest(t, admissionv1.Create, poolJSON("", `{"cluster":"c","workerClassName":"kairos","version":"v1.35","talos":{"version":"v1.13.5"}}`), ""))
		if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity || len(resp.Result.Details.Causes) == 0 {
			t.Errorf("response %+v", resp.Result)
		}
	})
	t.Run("a lookup failure is a 500, not a refusal of the pool", func(t *testing.T) {
		failing := &Pool{Reader: testReader(t, &interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		}})}
		resp := failing.Mutate(ctx, poolRequest(t, admissionv1.Create, poolJSON("", `{"cluster":"c","version":"v1.35"}`), ""))
		if resp.Allowed || resp.Result.Code != http.StatusInternalServerError {
			t.Errorf("response %+v", resp.Result)
		}
	})
	t.Run("a classless UPDATE never looks anything up", func(t *testing.T) {
		failing := &Pool{Reader: testReader(t, &interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			t.Error("a classless pool looked up a class or the platform")
			return errors.New("unexpected lookup")
		}})}
		obj := poolJSON("", `{"cluster":"c","workerClassName":""}`)
		if resp := failing.Validate(ctx, poolRequest(t, admissionv1.Update, obj, poolJSON("", `{"cluster":"c"}`))); !resp.Allowed {
			t.Errorf("response %+v", resp.Result)
		}
	})
}

func TestPoolValidatingWebhook(t *testing.T) {
	ctx := context.Background()
	p := &Pool{Reader: testReader(t, nil)}
	cases := []struct {
		name, obj, old string
		op             admissionv1.Operation
		want           string
	}{
		{"a stored, labelled class passes", poolJSON(`{"cozystack.io/worker-class":"kairos"}`, `{"cluster":"c","workerClassName":"kairos","version":"v1.35"}`), "", admissionv1.Create, ""},
		{"a CREATE without a class means the mutating webhook did not run", poolJSON("", `{"cluster":"c","version":"v1.35"}`), "", admissionv1.Create, "the pool's mutating webhook did not run"},
		{"a classless pool carries no class label", poolJSON(`{"cozystack.io/worker-class":"kairos"}`, `{"cluster":"c"}`),
			poolJSON("", `{"cluster":"c"}`), admissionv1.Update, "a classless pool uses no class"},
		{"the label must name the class", poolJSON(`{"cozystack.io/worker-class":"talos"}`, `{"cluster":"c","workerClassName":"kairos","version":"v1.35"}`), "", admissionv1.Create, "must name the pool's class kairos"},
		{"an in-place family switch is refused", poolJSON(`{"cozystack.io/worker-class":"kairos"}`, `{"cluster":"c","workerClassName":"kairos","version":"v1.35"}`),
			poolJSON(`{"cozystack.io/worker-class":"talos"}`, `{"cluster":"c","workerClassName":"talos","version":"v1.35"}`), admissionv1.Update, "in place is refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := p.Validate(ctx, poolRequest(t, tc.op, tc.obj, tc.old))
			if tc.want == "" {
				if !resp.Allowed {
					t.Fatalf("denied: %v", resp.Result)
				}
				return
			}
			if resp.Allowed || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("response %+v, want %q", resp.Result, tc.want)
			}
		})
	}
	if resp := p.Validate(ctx, poolRequest(t, admissionv1.Delete, "{}", "")); !resp.Allowed {
		t.Error("DELETE is not ours to judge")
	}
}

// The pool test CRD must carry every PoolSettings field and the pool API
// fields admission reads, or envtest would prune fields admission reads;
// and, like the real pool API, it must prune nothing inside them, or
// envtest could not show admission refusing unknown fields.
func TestPoolTestCRDCoversPoolSettings(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "crds", "pool", "apps.cozystack.io_kubernetesnodes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, missing := range missingFields(reflect.TypeFor[workerclassv1.PoolSettings](), spec, "spec") {
		t.Errorf("the pool test CRD lacks %s", missing)
	}
	for _, name := range []string{pooladmission.ClassNameField, pooladmission.ClusterField, pooladmission.SubstrateField} {
		if spec.Properties[name].Type != "string" {
			t.Errorf("the pool test CRD lacks spec.%s", name)
		}
	}
}

func missingFields(typ reflect.Type, schema apiextensionsv1.JSONSchemaProps, path string) []string {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if schema.Items != nil && schema.Items.Schema != nil {
			schema = *schema.Items.Schema
		}
	}
	if typ.Kind() == reflect.Map {
		if schema.AdditionalProperties == nil || schema.AdditionalProperties.Schema == nil {
			return []string{path + " (map values)"}
		}
		return missingFields(typ.Elem(), *schema.AdditionalProperties.Schema, path+"[*]")
	}
	if typ.Kind() != reflect.Struct {
		return nil
	}
	var missing []string
	if schema.XPreserveUnknownFields == nil || !*schema.XPreserveUnknownFields {
		missing = append(missing, path+" (x-kubernetes-preserve-unknown-fields: true)")
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			for _, m := range missingFields(f.Type, schema, path) {
				if !slices.Contains(missing, m) {
					missing = append(missing, m)
				}
			}
			continue
		}
		sub, ok := schema.Properties[name]
		if !ok {
			missing = append(missing, path+"."+name)
			continue
		}
		missing = append(missing, missingFields(f.Type, sub, path+"."+name)...)
	}
	return missing
}
