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
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/restore"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

type options struct {
	pool, old, classes, platform, substrate, controlPlaneVersion string
	legacy                                                       bool
}

// rejectedError is a refusal of the inputs, as opposed to a usage or I/O
// problem.
type rejectedError struct {
	msg string
	// errs are the field errors of the refusal, when it has them.
	errs field.ErrorList
}

func (e *rejectedError) Error() string { return e.msg }

func rejected(what string, errs field.ErrorList) error {
	lines := make([]string, 0, len(errs)+1)
	lines = append(lines, what+":")
	for _, e := range errs {
		lines = append(lines, "  "+e.Error())
	}
	return &rejectedError{msg: strings.Join(lines, "\n"), errs: errs}
}

// resolveCommand evaluates the pool file as pool admission would: a CREATE,
// or with opts.old an UPDATE of that stored pool, through
// admission.AdmitObjects as the webhooks call it. It returns the output
// and the warnings admission reported.
func resolveCommand(opts options) (string, []string, error) {
	substrate, err := resolve.ParseSubstrate(opts.substrate)
	if err != nil {
		return "", nil, fmt.Errorf("--substrate %w", err)
	}
	if v := opts.controlPlaneVersion; v != "" {
		if _, _, ok := validation.ParseSemver(v); !ok {
			return "", nil, fmt.Errorf("--control-plane-version must be a Kubernetes release such as v1.35.6, not %q", v)
		}
	}
	if opts.legacy && opts.old != "" {
		return "", nil, errors.New("--legacy prints one pool's legacy layout; it takes no --old")
	}
	platform, err := readPlatform(opts.platform)
	if err != nil {
		return "", nil, err
	}
	classes, err := readClasses(opts.classes)
	if err != nil {
		return "", nil, err
	}
	poolObj, err := readPool(opts.pool)
	if err != nil {
		return "", nil, err
	}
	req := admission.Request{
		Operation: admission.Create,
		Substrate: substrate,
		Classes: func(name string) (*workerclassv1.WorkerClass, error) {
			if c, ok := classes[name]; ok {
				return c, nil
			}
			return nil, fmt.Errorf("class %s is not in %s: %w", name, opts.classes, admission.ErrNotFound)
		},
		Platform: func() (*workerclassv1.WorkerPlatformSpec, error) { return &platform.Spec, nil },
	}
	if v := opts.controlPlaneVersion; v != "" {
		req.ControlPlaneVersion = func(string) (string, error) { return v, nil }
	}
	var old map[string]any
	if opts.old != "" {
		stored, err := readPool(opts.old)
		if err != nil {
			return "", nil, err
		}
		if stored.GetNamespace() != poolObj.GetNamespace() || stored.GetName() != poolObj.GetName() {
			return "", nil, fmt.Errorf("--old is %s, not the pool %s", poolRef(stored), poolRef(poolObj))
		}
		req.Operation, old = admission.Update, stored.Object
	}
	if opts.legacy {
		if pool, errs := admission.PoolFromObject(poolObj.Object); len(errs) == 0 && pool.ClassName == "" {
			return "# " + poolRef(poolObj) + " is already classless: no class restoration is needed.\n" + mustYAML(poolObj.Object), nil, nil
		}
	}

	decision, errs := admission.AdmitObjects(req, poolObj.Object, old)
	if len(errs) > 0 {
		return "", decision.Warnings, rejected("pool "+poolRef(poolObj)+" is rejected", errs)
	}

	if opts.legacy {
		legacy, err := restore.LegacyPool(poolObj, decision.Result, &platform.Spec, decision.Substrate)
		if err != nil {
			return "", decision.Warnings, &rejectedError{msg: fmt.Sprintf("pool %s cannot be restored to the legacy layout: %v", poolRef(poolObj), err)}
		}
		header := fmt.Sprintf("# Legacy (classless) layout of %s, restored from class %s.\n"+
			"# Apply it with hoster authorization, then verify the old chart's resources and\n"+
			"# template hashes: remaining Talos is not proof of no rollout.\n", poolRef(poolObj), decision.ClassName)
		return header + mustYAML(legacy.Object), decision.Warnings, nil
	}
	return mustYAML(outputOf(poolRef(poolObj), req.Operation, decision)), decision.Warnings, nil
}

func poolRef(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// mustYAML encodes values built from decoded YAML or plain structs, which
// always encode.
func mustYAML(v any) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("# encoding failed: %v\n", err)
	}
	return string(data)
}

// readDocuments splits a YAML file into its documents.
func readDocuments(path string) ([][]byte, error) {
	data, err := os.ReadFile(path) //nolint:gosec // The file the user names is what the command reads.
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 && !onlyComments(doc) {
			docs = append(docs, doc)
		}
	}
}

func onlyComments(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func kindOf(doc []byte) (string, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return "", err
	}
	return meta.APIVersion + "/" + meta.Kind, nil
}

// decodeStrict decodes a YAML document into a WorkerClass API object as
// the apiserver's strict field validation does: an unknown or duplicate
// field is an error that names its path.
func decodeStrict(doc []byte, into runtime.Object) error {
	scheme := runtime.NewScheme()
	if err := workerclassv1.AddToScheme(scheme); err != nil {
		return err
	}
	decoder := serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme,
		serializerjson.SerializerOptions{Yaml: true, Strict: true})
	_, _, err := decoder.Decode(doc, nil, into)
	return err
}

func readPlatform(path string) (*workerclassv1.WorkerPlatform, error) {
	docs, err := readDocuments(path)
	if err != nil {
		return nil, err
	}
	want := workerclassv1.GroupVersion.String() + "/WorkerPlatform"
	if len(docs) != 1 {
		return nil, fmt.Errorf("%s: want exactly one %s document, found %d", path, want, len(docs))
	}
	if kind, err := kindOf(docs[0]); err != nil || kind != want {
		return nil, fmt.Errorf("%s: want a %s document, found %q (%v)", path, want, kind, err)
	}
	p := &workerclassv1.WorkerPlatform{}
	if err := decodeStrict(docs[0], p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if errs := validation.ValidatePlatform(p); len(errs) > 0 {
		return nil, rejected(path+": the platform configuration is invalid", errs)
	}
	return p, nil
}

func readClasses(path string) (map[string]*workerclassv1.WorkerClass, error) {
	files := []string{path}
	if info, err := os.Stat(path); err != nil {
		return nil, err
	} else if info.IsDir() {
		files = nil
		for _, pattern := range []string{"*.yaml", "*.yml", "*.json"} {
			matches, _ := filepath.Glob(filepath.Join(path, pattern))
			files = append(files, matches...)
		}
		slices.Sort(files)
	}
	want := workerclassv1.GroupVersion.String() + "/WorkerClass"
	classes := map[string]*workerclassv1.WorkerClass{}
	for _, file := range files {
		docs, err := readDocuments(file)
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			if kind, err := kindOf(doc); err != nil || kind != want {
				return nil, fmt.Errorf("%s: want %s documents, found %q (%v)", file, want, kind, err)
			}
			c := &workerclassv1.WorkerClass{}
			if err := decodeStrict(doc, c); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if _, dup := classes[c.Name]; dup {
				return nil, fmt.Errorf("%s: class %s is defined twice", file, c.Name)
			}
			if errs := validation.ValidateClass(c); len(errs) > 0 {
				return nil, rejected(fmt.Sprintf("%s: class %s is invalid", file, c.Name), errs)
			}
			classes[c.Name] = c
		}
	}
	return classes, nil
}

func readPool(path string) (*unstructured.Unstructured, error) {
	docs, err := readDocuments(path)
	if err != nil {
		return nil, err
	}
	want := workerclassv1.PoolGroupVersionKind.GroupVersion().String() + "/" + workerclassv1.PoolGroupVersionKind.Kind
	if len(docs) != 1 {
		return nil, fmt.Errorf("%s: want exactly one %s document, found %d", path, want, len(docs))
	}
	if kind, err := kindOf(docs[0]); err != nil || kind != want {
		return nil, fmt.Errorf("%s: want a %s document, found %q (%v)", path, want, kind, err)
	}
	// Strict YAML: a key written twice is an error, not "the last wins".
	// Pool admission then reads the class-relevant fields strictly.
	obj := map[string]any{}
	if err := yaml.UnmarshalStrict(docs[0], &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}
