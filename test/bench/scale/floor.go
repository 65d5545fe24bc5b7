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

package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// FloorReport is how long a bare apiserver took to accept the objects the
// pipeline wrote for the pool's machines.
type FloorReport struct {
	// Objects by kind.
	Objects map[string]int `json:"objects"`
	Total   int            `json:"total"`
	Workers int            `json:"workers"`
	// Duration is from the first create to the last one accepted.
	Duration time.Duration `json:"duration"`
}

// pipelineObjects are the per-machine objects the pipeline wrote into the
// management cluster, as they are at the end of the run (final size),
// stripped to what a create takes: the MachineSet, and per machine its
// Machine, bootstrap config (KairosConfig, or KubeadmConfig for the peer),
// KubeVirtMachine, VirtualMachine and Secrets (bootstrap data, cloud-init
// user data). Objects that live only for a
// while (bootstrap token Secrets) and the workload cluster's are not in.
func pipelineObjects(ctx context.Context, h *harness.Harness, w *harness.WorkloadCluster, bootstrap harness.Bootstrap) ([]*unstructured.Unstructured, error) {
	var configs client.ObjectList = &bootstrapv1.KairosConfigList{}
	if bootstrap == harness.BootstrapKubeadm {
		configs = &kubeadmv1.KubeadmConfigList{}
	}
	lists := []client.ObjectList{
		&clusterv1.MachineSetList{}, &clusterv1.MachineList{}, configs,
		&infrav1.KubeVirtMachineList{}, &kubevirtv1.VirtualMachineList{}, &corev1.SecretList{},
	}
	clusterSecrets := map[string]bool{w.Key.Name + "-kubeconfig": true, w.Key.Name + "-ca": true}
	var out []*unstructured.Unstructured
	for _, list := range lists {
		if err := h.Client.List(ctx, list, client.InNamespace(w.Key.Namespace)); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			o := item.(client.Object)
			if _, isSecret := o.(*corev1.Secret); isSecret && clusterSecrets[o.GetName()] {
				continue
			}
			u, err := bare(o, h.Scheme)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
		}
	}
	return out, nil
}

// bare keeps what a client sends on create: metadata the apiserver does not
// set, and the spec (or data).
func bare(o client.Object, scheme *runtime.Scheme) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(o, scheme)
	if err != nil {
		return nil, err
	}
	// Through JSON, as a client would send it: the converter keeps Go
	// types (such as Secret data bytes) that unstructured cannot copy.
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	// The error never quotes the object: Secrets hold bootstrap data.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	u := &unstructured.Unstructured{}
	if err := dec.Decode(&u.Object); err != nil {
		return nil, fmt.Errorf("decoding %s %s", gvk.Kind, client.ObjectKeyFromObject(o))
	}
	u.SetGroupVersionKind(gvk)
	delete(u.Object, "status")
	u.SetResourceVersion("")
	u.SetUID("")
	u.SetCreationTimestamp(metav1.Time{})
	u.SetGeneration(0)
	u.SetManagedFields(nil)
	u.SetDeletionTimestamp(nil)
	// The owners do not exist on the bare apiserver; without a garbage
	// collector the references are only bytes, which they keep.
	return u, nil
}

// measureFloor starts a bare apiserver (the same CRDs, no webhooks, no
// controllers) and creates the objects with a few parallel clients.
func measureFloor(ctx context.Context, objs []*unstructured.Unstructured, workers int) (FloorReport, error) {
	report := FloorReport{Objects: map[string]int{}, Total: len(objs), Workers: workers}
	scheme, err := harness.Scheme()
	if err != nil {
		return report, err
	}
	kubeadmCRDs, err := harness.KubeadmCRDPath()
	if err != nil {
		return report, err
	}
	env, err := envtest.Start(ctx, envtest.Options{
		Scheme:   scheme,
		CRDPaths: append(envtest.ExternalCRDPaths(), harness.CRDPath(), envtest.PoolCRDPath, kubeadmCRDs),
	})
	if err != nil {
		return report, fmt.Errorf("starting the bare apiserver: %w", err)
	}
	defer func() { _ = env.Stop() }()
	namespaces := map[string]bool{}
	for _, o := range objs {
		report.Objects[o.GetKind()]++
		namespaces[o.GetNamespace()] = true
	}
	for ns := range namespaces {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return report, err
		}
	}
	// Owners first, as the pipeline creates them.
	order := map[string]int{"MachineSet": 0, "KairosConfig": 1, "KubeadmConfig": 1, "KubeVirtMachine": 1, "Machine": 2, "Secret": 3, "VirtualMachine": 3}
	sort.SliceStable(objs, func(i, j int) bool { return order[objs[i].GetKind()] < order[objs[j].GetKind()] })

	// Resolve every kind before the clock starts: discovery is the
	// client's cost, not the apiserver's.
	for _, o := range objs {
		if _, err := env.Client.RESTMapper().RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version); err != nil {
			return report, err
		}
	}
	queue := make(chan *unstructured.Unstructured)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range queue {
				if err := env.Client.Create(ctx, o.DeepCopy()); err != nil {
					// The first error is reported; the queue is still
					// drained so the feeder never blocks.
					select {
					case errs <- fmt.Errorf("creating %s %s on the bare apiserver: %w", o.GetKind(), o.GetName(), err):
					default:
					}
				}
			}
		}()
	}
	go func() {
		defer close(queue)
		for _, o := range objs {
			select {
			case queue <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	report.Duration = time.Since(start)
	select {
	case err := <-errs:
		return report, err
	default:
	}
	return report, ctx.Err()
}
