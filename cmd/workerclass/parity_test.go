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

package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/webhooks"
)

// answer is what admission says about one request: admitted, or refused
// with these field errors ("<path>: <detail>"); and its warnings.
type answer struct {
	admitted bool
	causes   []string
	warnings []string
}

// The command and the pool webhooks give the same answer to the same
// request: every pool of testdata, as a CREATE and as UPDATEs of stored
// pools, runs through `workerclass resolve` and through the webhooks (the
// mutating one, then the validating one on its result, as the apiserver
// calls them) with the same classes, platform, substrate and control-plane
// version.
func TestCommandAgreesWithWebhooks(t *testing.T) {
	type request struct {
		name, old, pool string
		substrate       resolve.Substrate
		controlPlane    string
	}
	var cases []request
	pools, err := filepath.Glob(filepath.Join("testdata", "pools", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range pools {
		if strings.HasSuffix(pool, "duplicate-key.yaml") {
			continue // a file error: the apiserver decodes requests itself
		}
		name := strings.TrimSuffix(filepath.Base(pool), ".yaml")
		cases = append(cases,
			request{name: "CREATE " + name, pool: pool},
			request{name: "CREATE " + name + " on Proxmox by default", pool: pool, substrate: resolve.Proxmox},
			request{name: "CREATE " + name + " under a v1.34 control plane", pool: pool, controlPlane: "v1.34.9"})
	}
	update := func(old, pool string) (string, string) {
		return filepath.Join("testdata", "updates", old+".yaml"), filepath.Join("testdata", "updates", pool+".yaml")
	}
	for _, pair := range [][2]string{
		{"stored-talos", "scaled"}, {"stored-talos", "class-omitted"}, {"stored-talos", "switch-to-kairos"},
		{"legacy-stored", "legacy-scaled"}, {"legacy-stored", "switch-to-kairos"}, {"legacy-stored", "class-omitted"},
	} {
		old, pool := update(pair[0], pair[1])
		cases = append(cases,
			request{name: "UPDATE " + pair[0] + " to " + pair[1], old: old, pool: pool},
			request{name: "UPDATE " + pair[0] + " to " + pair[1] + " under a v1.34 control plane", old: old, pool: pool, controlPlane: "v1.34.9"})
	}

	classesDir, platformFile := filepath.Join("testdata", "classes"), filepath.Join("testdata", "platform.yaml")
	classes, err := readClasses(classesDir)
	if err != nil {
		t.Fatal(err)
	}
	platform, err := readPlatform(platformFile)
	if err != nil {
		t.Fatal(err)
	}
	answers := map[bool]int{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			substrate := tc.substrate
			if substrate == "" {
				substrate = resolve.KubeVirt
			}
			cli := commandAnswer(t, options{pool: tc.pool, old: tc.old, classes: classesDir, platform: platformFile,
				substrate: string(substrate), controlPlaneVersion: tc.controlPlane})
			hook := webhookAnswer(t, tc.pool, tc.old, classes, platform, tc.substrate, tc.controlPlane)
			if !reflect.DeepEqual(cli, hook) {
				t.Errorf("the command answers %+v, the webhooks %+v", cli, hook)
			}
			answers[cli.admitted]++
		})
	}
	if answers[true] == 0 || answers[false] == 0 {
		t.Errorf("the cases must admit and refuse: %v", answers)
	}
}

// The built-in names keep their family in the command as in the class
// webhook, with the same field errors.
func TestCommandAgreesWithClassWebhook(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad-classes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("testdata", "classes", "builtin.yaml"), filepath.Join("testdata", "classes", "seed-examples.yaml"))
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			docs, err := readDocuments(file)
			if err != nil {
				t.Fatal(err)
			}
			var hook []string
			for _, doc := range docs {
				c := &workerclassv1.WorkerClass{}
				if err := decodeStrict(doc, c); err != nil {
					t.Skipf("not a class the apiserver would store: %v", err)
				}
				_, err := (&webhooks.WorkerClass{}).ValidateCreate(context.Background(), c)
				hook = append(hook, statusCauses(err)...)
			}
			var cli []string
			_, err = readClasses(file)
			if rejected := (*rejectedError)(nil); errors.As(err, &rejected) {
				for _, e := range rejected.errs {
					cli = append(cli, e.Error())
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cli, hook) {
				t.Errorf("the command refuses with %q, the class webhook with %q", cli, hook)
			}
			if strings.Contains(file, "builtin-family") && len(cli) == 0 {
				t.Error("a built-in name with another family was accepted")
			}
		})
	}
}

func statusCauses(err error) []string {
	var status interface{ Status() metav1.Status }
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var causes []string
	for _, c := range status.Status().Details.Causes {
		causes = append(causes, c.Field+": "+c.Message)
	}
	return causes
}

func commandAnswer(t *testing.T, opts options) answer {
	t.Helper()
	_, warnings, err := resolveCommand(opts)
	a := answer{admitted: err == nil, warnings: warnings}
	if rejected := (*rejectedError)(nil); errors.As(err, &rejected) {
		for _, e := range rejected.errs {
			a.causes = append(a.causes, e.Error())
		}
	} else if err != nil {
		t.Fatalf("not an admission answer: %v", err)
	}
	return a
}

// webhookAnswer runs the request through the pool webhooks with a reader
// holding the classes, the platform and, for a known control-plane
// version, the pool's Cluster with that topology version.
func webhookAnswer(t *testing.T, poolFile, oldFile string, classes map[string]*workerclassv1.WorkerClass,
	platform *workerclassv1.WorkerPlatform, substrate resolve.Substrate, controlPlane string) answer {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{workerclassv1.AddToScheme, clusterv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{platform.DeepCopy()}
	for _, c := range classes {
		objs = append(objs, c.DeepCopy())
	}
	pool := rawPool(t, poolFile)
	if controlPlane != "" {
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Cluster string `json:"cluster"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(pool, &meta); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: meta.Metadata.Namespace, Name: meta.Spec.Cluster},
			Spec: clusterv1.ClusterSpec{Topology: clusterv1.Topology{ClassRef: clusterv1.ClusterClassRef{Name: "cc"}, Version: controlPlane}}})
	}
	p := &webhooks.Pool{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), Substrate: substrate}

	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: pool}}}
	if oldFile != "" {
		req.Operation, req.OldObject = admissionv1.Update, runtime.RawExtension{Raw: rawPool(t, oldFile)}
	}
	ctx := context.Background()
	resp := p.Mutate(ctx, req)
	if resp.Allowed {
		req.Object.Raw = patched(t, pool, resp)
		resp = p.Validate(ctx, req)
	}
	a := answer{admitted: resp.Allowed, warnings: resp.Warnings}
	if !resp.Allowed {
		if resp.Result == nil || resp.Result.Details == nil {
			t.Fatalf("not an admission answer: %+v", resp.Result)
		}
		for _, c := range resp.Result.Details.Causes {
			a.causes = append(a.causes, c.Field+": "+c.Message)
		}
	}
	return a
}

// rawPool reads a pool file as the apiserver sends it: JSON.
func rawPool(t *testing.T, file string) []byte {
	t.Helper()
	u, err := readPool(file)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// patched applies a mutating response's patch (add and replace of object
// members, all the pool webhook writes) to obj.
func patched(t *testing.T, obj []byte, resp admission.Response) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(obj, &doc); err != nil {
		t.Fatal(err)
	}
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	for _, op := range resp.Patches {
		if op.Operation != "add" && op.Operation != "replace" {
			t.Fatalf("unexpected patch %v", op)
		}
		parts := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		node := doc
		for _, part := range parts[:len(parts)-1] {
			next, ok := node[unescape.Replace(part)].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[unescape.Replace(part)] = next
			}
			node = next
		}
		node[unescape.Replace(parts[len(parts)-1])] = op.Value
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
