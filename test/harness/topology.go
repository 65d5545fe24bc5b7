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
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/clusterclass"
	topologycluster "sigs.k8s.io/cluster-api/core/reconcilers/topology/cluster"
	topologymachinedeployment "sigs.k8s.io/cluster-api/core/reconcilers/topology/machinedeployment"
	topologymachineset "sigs.k8s.io/cluster-api/core/reconcilers/topology/machineset"
	"sigs.k8s.io/cluster-api/feature"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// HostedControlPlaneTemplateGVK is the template of the hosted control plane
// stand-in, which the harness's ClusterClasses name in place of Kamaji's.
var HostedControlPlaneTemplateGVK = HostedControlPlaneGVK.GroupVersion().WithKind("HostedControlPlaneTemplate")

// kamajiControlPlaneTemplate is the control plane template the shipped
// ClusterClasses name.
var kamajiControlPlaneTemplate = schema.GroupKind{Group: "controlplane.cluster.x-k8s.io", Kind: "KamajiControlPlaneTemplate"}

// enableTopology turns Cluster API's ClusterTopology feature gate on, as
// CLUSTER_TOPOLOGY=true does for its manager: its Cluster and ClusterClass
// webhooks refuse topologies and ClusterClasses while it is off. The gate is
// process-wide; it only lets more through those webhooks.
func enableTopology() error {
	if feature.Gates.Enabled(feature.ClusterTopology) {
		return nil
	}
	return feature.MutableGates.Set(string(feature.ClusterTopology) + "=true")
}

// setupTopology adds Cluster API's ClusterClass and topology reconcilers to
// its manager, as Cluster API's main.go wires them with the ClusterTopology
// gate on and the RuntimeSDK gate off (no runtime extensions, so no runtime
// client), at its default concurrencies.
func setupTopology(ctx context.Context, mgr ctrl.Manager, caches clustercache.ClusterCache) error {
	for name, setup := range map[string]func() error{
		"ClusterClass": func() error {
			return (&clusterclass.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, concurrency(10))
		},
		"ClusterTopology": func() error {
			return (&topologycluster.Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: caches,
			}).SetupWithManager(ctx, mgr, concurrency(50))
		},
		"MachineDeploymentTopology": func() error {
			return (&topologymachinedeployment.Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			}).SetupWithManager(ctx, mgr, concurrency(25))
		},
		"MachineSetTopology": func() error {
			return (&topologymachineset.Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			}).SetupWithManager(ctx, mgr, concurrency(25))
		},
	} {
		if err := setup(); err != nil {
			return fmt.Errorf("setting up the Cluster API %s controller: %w", name, err)
		}
	}
	return nil
}

// ClusterClassTemplate returns the path of a shipped ClusterClass,
// templates/clusterclass-<name>.yaml.
func ClusterClassTemplate(name string) string {
	return filepath.Join(envtest.RepoRoot(), "templates", "clusterclass-"+name+".yaml")
}

// TopologyTemplate returns the path of a shipped topology flavor,
// templates/cluster-template-topology-<flavor>.yaml.
func TopologyTemplate(flavor string) string {
	return filepath.Join(envtest.RepoRoot(), "templates", "cluster-template-topology-"+flavor+".yaml")
}

// RenderClusterClass renders a shipped ClusterClass into a namespace, with
// the hosted control plane stand-in's template in place of Kamaji's: the
// class names a HostedControlPlaneTemplate, the Kamaji template is
// replaced by one, and the patches of the Kamaji template are dropped
// (their selectors would match no template). Everything the workers get is
// as shipped.
func RenderClusterClass(name, namespace string) ([]unstructured.Unstructured, error) {
	objs, err := RenderTemplate(ClusterClassTemplate(name), nil)
	if err != nil {
		return nil, err
	}
	out := make([]unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		// The file sets no namespace; clusterctl puts its objects into
		// the target namespace.
		o.SetNamespace(namespace)
		switch o.GroupVersionKind().GroupKind() {
		case kamajiControlPlaneTemplate:
			stand := unstructured.Unstructured{}
			stand.SetGroupVersionKind(HostedControlPlaneTemplateGVK)
			stand.SetNamespace(namespace)
			stand.SetName(o.GetName())
			stand.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{}}}
			out = append(out, stand)
			continue
		case clusterv1.GroupVersion.WithKind("ClusterClass").GroupKind():
			if err := unstructured.SetNestedField(o.Object, HostedControlPlaneTemplateGVK.GroupVersion().String(), "spec", "controlPlane", "templateRef", "apiVersion"); err != nil {
				return nil, err
			}
			if err := unstructured.SetNestedField(o.Object, HostedControlPlaneTemplateGVK.Kind, "spec", "controlPlane", "templateRef", "kind"); err != nil {
				return nil, err
			}
			patches, _, err := unstructured.NestedSlice(o.Object, "spec", "patches")
			if err != nil {
				return nil, err
			}
			kept := make([]any, 0, len(patches))
			for _, p := range patches {
				if !patchesKamaji(p) {
					kept = append(kept, p)
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, kept, "spec", "patches"); err != nil {
				return nil, err
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// patchesKamaji tells whether a ClusterClass patch selects Kamaji's template.
func patchesKamaji(patch any) bool {
	p, _ := patch.(map[string]any)
	definitions, _, _ := unstructured.NestedSlice(p, "definitions")
	for _, d := range definitions {
		def, _ := d.(map[string]any)
		kind, _, _ := unstructured.NestedString(def, "selector", "kind")
		if kind == kamajiControlPlaneTemplate.Kind {
			return true
		}
	}
	return false
}

// CreateTopologyCluster creates a Cluster managed through a ClusterClass
// (already applied) and runs its hosted control plane: it starts a workload
// control plane as CreateCluster does, creates the Cluster, waits for
// topology to create the HostedControlPlane from the class, and then does
// what a hosted control plane provider does (the endpoint, the status, the
// Secrets). The stand-in has no replicas, so a control plane replica count
// in the topology is dropped. It returns once Cluster API reports the
// control plane initialized and the infrastructure provisioned.
func (h *Harness) CreateTopologyCluster(ctx context.Context, cluster *unstructured.Unstructured, opts ClusterOptions) (_ *WorkloadCluster, rerr error) {
	key := client.ObjectKeyFromObject(cluster)
	w, err := h.startWorkload(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	api := w.API
	defer func() {
		if rerr != nil {
			_ = w.stop()
		}
	}()
	c := cluster.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "spec", "topology", "controlPlane", "replicas")
	if cp, _, _ := unstructured.NestedMap(c.Object, "spec", "topology", "controlPlane"); len(cp) == 0 {
		unstructured.RemoveNestedField(c.Object, "spec", "topology", "controlPlane")
	}
	if err := h.Client.Create(ctx, c); err != nil {
		return nil, fmt.Errorf("creating Cluster %s: %w", key, err)
	}

	controlPlane := &unstructured.Unstructured{}
	controlPlane.SetGroupVersionKind(HostedControlPlaneGVK)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		current := &clusterv1.Cluster{}
		if err := h.Client.Get(ctx, key, current); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !current.Spec.ControlPlaneRef.IsDefined() {
			return false, nil
		}
		err := h.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: current.Spec.ControlPlaneRef.Name}, controlPlane)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for topology to create the control plane of Cluster %s: %w", key, err)
	}
	// The endpoint is the provider's to write; topology does not own it.
	base := controlPlane.DeepCopy()
	if err := unstructured.SetNestedMap(controlPlane.Object, map[string]any{"host": api.Host(), "port": int64(api.Port())}, "spec", "controlPlaneEndpoint"); err != nil {
		return nil, err
	}
	if err := h.Client.Patch(ctx, controlPlane, client.MergeFrom(base)); err != nil {
		return nil, fmt.Errorf("writing the endpoint of the control plane of %s: %w", key, err)
	}
	if err := h.runControlPlane(ctx, key, controlPlane, api); err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.workloads[key] = w
	h.mu.Unlock()
	return w, h.waitForClusterInitialized(ctx, key)
}
