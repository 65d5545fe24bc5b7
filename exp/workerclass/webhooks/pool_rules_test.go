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
	"errors"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

var (
	kamajiGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha1", Kind: "KamajiControlPlane"}
	// unmappedGVK is a control-plane kind the REST mapper does not know.
	unmappedGVK = schema.GroupVersionKind{Group: "controlplane.example.com", Version: "v1", Kind: "Unserved"}
)

func clusterObject(name string, mutate func(c *clusterv1.Cluster)) *clusterv1.Cluster {
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name}}
	if mutate != nil {
		mutate(c)
	}
	return c
}

func controlPlaneRef(gvk schema.GroupVersionKind, name string) func(c *clusterv1.Cluster) {
	return func(c *clusterv1.Cluster) {
		c.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{APIGroup: gvk.Group, Kind: gvk.Kind, Name: name}
	}
}

func kamaji(name string, spec, status string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(kamajiGVK)
	u.SetNamespace("t")
	u.SetName(name)
	if spec != "" {
		u.Object["spec"] = map[string]any{"version": spec}
	}
	if status != "" {
		u.Object["status"] = map[string]any{"version": status}
	}
	return u
}

// clusterPool returns a pool webhook whose reader holds the test classes,
// the platform and the given Clusters and control planes.
func clusterPool(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *Pool {
	t.Helper()
	s := testScheme(t)
	if err := clusterv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{kamajiGVK.GroupVersion(), clusterv1.GroupVersion})
	mapper.Add(kamajiGVK, meta.RESTScopeNamespace)
	mapper.Add(clusterv1.GroupVersion.WithKind("Cluster"), meta.RESTScopeNamespace)
	base := testReader(t, nil)
	b := fake.NewClientBuilder().WithScheme(s).WithRESTMapper(mapper).WithObjects(objs...)
	for _, name := range []string{"talos", "kairos"} {
		c := &workerclassv1.WorkerClass{}
		if err := base.Get(context.Background(), client.ObjectKey{Name: name}, c); err != nil {
			t.Fatal(err)
		}
		c.ResourceVersion = ""
		b = b.WithObjects(c)
	}
	platform := &workerclassv1.WorkerPlatform{}
	if err := base.Get(context.Background(), client.ObjectKey{Name: workerclassv1.PlatformName}, platform); err != nil {
		t.Fatal(err)
	}
	platform.ResourceVersion = ""
	b = b.WithObjects(platform)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return &Pool{Reader: b.Build(), RESTMapper: mapper}
}

// admitted runs a CREATE through both webhooks as the apiserver would: the
// mutating one, its patch, then the validating one on the result.
func admitted(t *testing.T, p *Pool, spec string) admission.Response {
	t.Helper()
	ctx := context.Background()
	obj := poolJSON("", spec)
	resp := p.Mutate(ctx, poolRequest(t, admissionv1.Create, obj, ""))
	if !resp.Allowed {
		return resp
	}
	if len(resp.Warnings) > 0 {
		t.Errorf("the mutating webhook repeats warnings: %q", resp.Warnings)
	}
	patched := applyPatches(t, obj, resp)
	u := &unstructured.Unstructured{Object: patched}
	raw, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return p.Validate(ctx, poolRequest(t, admissionv1.Create, string(raw), ""))
}

// The pool webhooks refuse a minor newer than the control plane of the
// pool's Cluster, read from the Cluster's topology version and its control
// plane object's spec.version and status.version, whichever is oldest.
func TestPoolWebhookControlPlaneMinor(t *testing.T) {
	const pool135 = `{"cluster":"example","workerClassName":"talos","version":"v1.35"}`
	const refusal = `spec.version: Invalid value: "v1.35": upgrade the parent control-plane minor first: cluster example's control plane runs Kubernetes `
	cases := []struct {
		name        string
		objs        []client.Object
		funcs       *interceptor.Funcs
		clusterName func(string) string
		spec        string
		want        string // a refusal's cause; "" admits
		warning     string
	}{
		{name: "the control plane's status.version is older: refused",
			objs: []client.Object{clusterObject("example", controlPlaneRef(kamajiGVK, "example")), kamaji("example", "v1.35.6", "v1.34.9")},
			spec: pool135, want: refusal + "v1.34.9"},
		{name: "the control plane's spec.version is older: refused",
			objs: []client.Object{clusterObject("example", controlPlaneRef(kamajiGVK, "example")), kamaji("example", "v1.34.2", "")},
			spec: pool135, want: refusal + "v1.34.2"},
		{name: "the Cluster's topology version is older: refused",
			objs: []client.Object{clusterObject("example", func(c *clusterv1.Cluster) {
				c.Spec.Topology = clusterv1.Topology{ClassRef: clusterv1.ClusterClassRef{Name: "cc"}, Version: "v1.34.0"}
			})},
			spec: pool135, want: refusal + "v1.34.0"},
		{name: "an upgraded control plane admits the minor",
			objs: []client.Object{clusterObject("example", controlPlaneRef(kamajiGVK, "example")), kamaji("example", "v1.35.6", "v1.35.6")},
			spec: pool135},
		{name: "the pool's cluster maps to its Cluster API Cluster's name",
			objs:        []client.Object{clusterObject("kubernetes-example", controlPlaneRef(kamajiGVK, "kubernetes-example")), kamaji("kubernetes-example", "v1.34.9", "")},
			clusterName: func(c string) string { return "kubernetes-" + c },
			spec:        pool135, want: refusal + "v1.34.9"},
		{name: "no such Cluster: not checked, no warning", spec: pool135},
		{name: "a Cluster without a version: not checked, a warning",
			objs: []client.Object{clusterObject("example", nil)}, spec: pool135,
			warning: "the Cluster has no spec.topology.version, and its control plane reports no spec.version or status.version"},
		{name: "a control plane that does not exist: a warning",
			objs: []client.Object{clusterObject("example", controlPlaneRef(kamajiGVK, "gone"))}, spec: pool135,
			warning: "its control plane KamajiControlPlane t/gone does not exist"},
		{name: "a control-plane kind that is not served: a warning",
			objs: []client.Object{clusterObject("example", controlPlaneRef(unmappedGVK, "example"))}, spec: pool135,
			warning: "the kind Unserved.controlplane.example.com is not served"},
		{name: "a control plane the webhook may not read: a warning",
			objs: []client.Object{clusterObject("example", controlPlaneRef(kamajiGVK, "example")), kamaji("example", "v1.34.9", "")},
			funcs: &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*unstructured.Unstructured); ok {
					return apierrors.NewForbidden(schema.GroupResource{Group: kamajiGVK.Group, Resource: "kamajicontrolplanes"}, key.Name, errors.New("RBAC"))
				}
				return c.Get(ctx, key, obj, opts...)
			}},
			spec: pool135, warning: "the webhook may not get it"},
		{name: "a failed Cluster read is a 500, not a refusal",
			funcs: &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*clusterv1.Cluster); ok {
					return errors.New("connection refused")
				}
				return c.Get(ctx, key, obj, opts...)
			}},
			spec: pool135, want: "500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := clusterPool(t, tc.funcs, tc.objs...)
			p.ClusterName = tc.clusterName
			resp := admitted(t, p, tc.spec)
			switch {
			case tc.want == "500":
				if resp.Allowed || resp.Result.Code != http.StatusInternalServerError {
					t.Errorf("response %+v", resp.Result)
				}
			case tc.want != "":
				if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity || !hasCause(resp, tc.want) {
					t.Errorf("response %+v, want a cause %q", resp.Result, tc.want)
				}
			default:
				if !resp.Allowed {
					t.Fatalf("denied: %+v", resp.Result)
				}
				if tc.warning == "" && len(resp.Warnings) > 0 || tc.warning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tc.warning)) {
					t.Errorf("warnings %q, want %q", resp.Warnings, tc.warning)
				}
			}
		})
	}
}

// hasCause reports whether a refusal carries the field error want (a
// prefix of "<field>: <message>").
func hasCause(resp admission.Response, want string) bool {
	if resp.Result == nil || resp.Result.Details == nil {
		return false
	}
	for _, c := range resp.Result.Details.Causes {
		if strings.HasPrefix(c.Field+": "+c.Message, want) {
			return true
		}
	}
	return false
}

// The pool webhooks refuse, with field paths, class-relevant fields they
// cannot read as written, and enforce the substrate a pool names.
func TestPoolWebhookStrictFieldsAndSubstrate(t *testing.T) {
	p := &Pool{Reader: testReader(t, nil)}
	cases := []struct {
		name, spec string
		substrate  resolve.Substrate
		want       string
	}{
		{"a GPU in a VirtualMachine's shape", `{"cluster":"c","workerClassName":"talos","version":"v1.35","gpus":[{"name":"gpu1","deviceName":"nvidia.com/X"}]}`, "",
			"spec.gpus[0].deviceName: Forbidden: unknown field"},
		{"a value of the wrong type", `{"cluster":"c","workerClassName":"talos","version":"v1.35","registryMirrors":[]}`, "",
			"spec.registryMirrors: Invalid value: must be an object, not a list"},
		{"a pool naming proxmox gets Proxmox's rows", `{"cluster":"c","substrate":"proxmox","workerClassName":"kairos","version":"v1.35"}`, "",
			"workerclasses[kairos].spec.bootstrap: Forbidden: Kairos supports KubeVirt only, not Proxmox"},
		{"a pool naming kubevirt on a Proxmox default gets KubeVirt's", `{"cluster":"c","substrate":"kubevirt","workerClassName":"kairos","version":"v1.35"}`, resolve.Proxmox, ""},
		{"an unknown substrate", `{"cluster":"c","substrate":"metal","workerClassName":"talos","version":"v1.35"}`, "",
			`spec.substrate: Unsupported value: "metal"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.Substrate = tc.substrate
			resp := admitted(t, p, tc.spec)
			if tc.want == "" {
				if !resp.Allowed {
					t.Fatalf("denied: %+v", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity || !hasCause(resp, tc.want) {
				t.Errorf("response %+v, want a cause %q", resp.Result, tc.want)
			}
		})
	}
}
