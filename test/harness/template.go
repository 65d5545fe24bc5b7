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

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// KairosPoolTemplate is the example Kairos pool the sandbox applies: a pool
// of fixed size, its replicas set by WORKER_MACHINE_COUNT.
func KairosPoolTemplate() string {
	return filepath.Join(envtest.RepoRoot(), "templates", "cluster-template-kairos.yaml")
}

// ScaleFromZeroPoolTemplate is the autoscaled Kairos pool: the autoscaler's
// bounds WORKER_MIN_COUNT and WORKER_MAX_COUNT and no replicas, which
// Cluster API sets to the lower bound when the MachineDeployment is created.
func ScaleFromZeroPoolTemplate() string {
	return filepath.Join(envtest.RepoRoot(), "templates", "cluster-template-scale-from-zero.yaml")
}

// KubeadmPoolTemplate is the scale benchmark's peer pool: the Kairos pool's
// shape bootstrapped by Cluster API's kubeadm provider (Options.Bootstrap
// BootstrapKubeadm). It needs WORKER_IMAGE, a disk the node simulator boots
// with cloud-init.
func KubeadmPoolTemplate() string {
	return filepath.Join(envtest.RepoRoot(), "test", "harness", "templates", "kubeadm-pool.yaml")
}

// RenderTemplate renders a clusterctl template with clusterctl's own
// variable processor: a variable without a value and without a default is
// an error, as `clusterctl generate cluster` reports it.
func RenderTemplate(path string, vars map[string]string) ([]unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path) //nolint:gosec // A file of the repository or one the harness wrote.
	if err != nil {
		return nil, err
	}
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(name string) (string, error) {
		if v, ok := vars[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s is not set", name)
	})
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", filepath.Base(path), err)
	}
	objs, err := utilyaml.ToUnstructured(out)
	if err != nil {
		return nil, fmt.Errorf("parsing the rendered %s: %w", filepath.Base(path), err)
	}
	return objs, nil
}

// EditMachineTemplates calls edit with every KubeVirtMachineTemplate among
// a rendered pool's objects and its machine spec (spec.template.spec), for
// a scenario that changes what the example template renders.
func EditMachineTemplates(objs []unstructured.Unstructured, edit func(template *unstructured.Unstructured, machine map[string]any)) {
	for i := range objs {
		if objs[i].GetKind() != "KubeVirtMachineTemplate" {
			continue
		}
		spec, _ := objs[i].Object["spec"].(map[string]any)
		template, _ := spec["template"].(map[string]any)
		machine, _ := template["spec"].(map[string]any)
		edit(&objs[i], machine)
	}
}

// ClasslessImport is an edit of a KubeVirtMachineTemplate (for
// EditMachineTemplates) that makes it classless, with its root disk of
// size imported over HTTP from url (the DataVolume path: a shared import
// each machine clones) and attached with the cloud-init datasource: a
// class-based Kairos template always boots a container disk.
func ClasslessImport(url, size, datasource string) func(template *unstructured.Unstructured, machine map[string]any) {
	return func(template *unstructured.Unstructured, machine map[string]any) {
		labels := template.GetLabels()
		delete(labels, "cozystack.io/worker-class")
		template.SetLabels(labels)
		delete(machine, "workerClass")
		machine["image"] = map[string]any{"httpImport": map[string]any{"url": url}}
		machine["rootDisk"] = map[string]any{"size": size}
		machine["cloudInitDatasource"] = datasource
	}
}

// ClasslessClone is ClasslessImport for a root disk of size cloned from
// source (a DataSource or a PersistentVolumeClaim, in namespace, the
// machine's when empty): no shared import, each machine's DataVolume
// clones the source.
func ClasslessClone(source infrav1.CloneSource, size, datasource string) func(template *unstructured.Unstructured, machine map[string]any) {
	return func(template *unstructured.Unstructured, machine map[string]any) {
		ClasslessImport("", size, datasource)(template, machine)
		clone := map[string]any{"kind": string(source.Kind), "name": source.Name}
		if source.Namespace != "" {
			clone["namespace"] = source.Namespace
		}
		machine["image"] = map[string]any{"clone": clone}
	}
}

// Edited applies each edit to every object, in order, and returns objs.
func Edited(objs []unstructured.Unstructured, edits ...func(*unstructured.Unstructured)) []unstructured.Unstructured {
	for i := range objs {
		for _, edit := range edits {
			edit(&objs[i])
		}
	}
	return objs
}

// Apply creates the objects with strict field validation, so a field the
// API does not know is an error. Admission webhooks run as in a cluster.
func (h *Harness) Apply(ctx context.Context, objs []unstructured.Unstructured) error {
	for i := range objs {
		o := objs[i].DeepCopy()
		if err := h.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}
