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
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// HostedControlPlaneGVK is the harness's stand-in control plane kind.
var HostedControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.harness.cozystack.io", Version: "v1alpha1", Kind: "HostedControlPlane"}

// WorkloadCluster is a Cluster whose control plane is a workload apiserver
// run by the harness.
type WorkloadCluster struct {
	// Key is the Cluster's namespace and name.
	Key client.ObjectKey
	// API is the workload apiserver; API.Client is an admin client.
	API *envtest.Workload
	// Endpoint is the control plane endpoint, host:port.
	Endpoint string

	controllerManager *envtest.ControllerManager
	// borrowed is a workload cluster another harness started and stops (a
	// Cluster moved here with clusterctl); this harness only reads it.
	borrowed bool
}

// ClusterOptions shape a workload cluster.
type ClusterOptions struct {
	// FailureDomains are passed through the KubeVirtCluster.
	FailureDomains []clusterv1.FailureDomain
	// ControlPlanes, when set, starts the workload control plane in place
	// of the harness's own (an envtest apiserver seeded with what `kubeadm
	// init` leaves, and kube-controller-manager's bootstrap signer and
	// token cleaner), for example test/qemu's kubeadm-prepared control
	// plane that real guests join.
	ControlPlanes ControlPlanes
}

// ControlPlanes start workload control planes that are ready for worker
// joins on their own: kubeadm's objects uploaded, and the bootstrap signer,
// token cleaner and CSR approval and signing running. The harness only
// fronts them with the Cluster's objects.
type ControlPlanes interface {
	// StartControlPlane starts the control plane of a cluster. The
	// Workload's Endpoint is what nodes dial, the Cluster's
	// controlPlaneEndpoint; its Config is admin access from this process,
	// which the <cluster>-kubeconfig Secret carries; Stop stops it.
	StartControlPlane(ctx context.Context, cluster client.ObjectKey) (*envtest.Workload, error)
}

// CreateCluster starts a workload apiserver (or the control plane
// opts.ControlPlanes starts) and creates the Cluster that fronts it: a hosted control plane object (initialized, externally
// managed) with the kubeconfig and CA Secrets it owns, a KubeVirtCluster,
// and the Cluster. It returns once Cluster API reports the control plane
// initialized and the infrastructure provisioned.
func (h *Harness) CreateCluster(ctx context.Context, key client.ObjectKey, opts ClusterOptions) (_ *WorkloadCluster, rerr error) {
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

	controlPlane := &unstructured.Unstructured{}
	controlPlane.SetGroupVersionKind(HostedControlPlaneGVK)
	controlPlane.SetNamespace(key.Namespace)
	controlPlane.SetName(key.Name)
	controlPlane.SetLabels(map[string]string{clusterv1.ClusterNameLabel: key.Name})
	controlPlane.Object["spec"] = map[string]any{
		"version":              ControlPlaneKubernetesVersion,
		"controlPlaneEndpoint": map[string]any{"host": api.Host(), "port": int64(api.Port())},
	}
	if err := h.Client.Create(ctx, controlPlane); err != nil {
		return nil, fmt.Errorf("creating the hosted control plane of %s: %w", key, err)
	}
	if err := h.runControlPlane(ctx, key, controlPlane, api); err != nil {
		return nil, err
	}
	if err := h.Client.Create(ctx, &infrav1.KubeVirtCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{clusterv1.ClusterNameLabel: key.Name}},
		Spec:       infrav1.KubeVirtClusterSpec{FailureDomains: opts.FailureDomains},
	}); err != nil {
		return nil, fmt.Errorf("creating the KubeVirtCluster of %s: %w", key, err)
	}
	if err := h.Client.Create(ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: HostedControlPlaneGVK.Group, Kind: HostedControlPlaneGVK.Kind, Name: key.Name},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtCluster", Name: key.Name},
		},
	}); err != nil {
		return nil, fmt.Errorf("creating Cluster %s: %w", key, err)
	}
	h.mu.Lock()
	h.workloads[key] = w
	h.mu.Unlock()
	return w, h.waitForClusterInitialized(ctx, key)
}

// runControlPlane does what a hosted control plane provider does once the
// workload API server runs: it reports the control plane initialized and
// creates the cluster's Secrets, owned by the control plane.
func (h *Harness) runControlPlane(ctx context.Context, key client.ObjectKey, controlPlane *unstructured.Unstructured, api *envtest.Workload) error {
	if err := h.reportControlPlane(ctx, key, controlPlane); err != nil {
		return err
	}
	secrets, err := api.ClusterSecrets(key)
	if err != nil {
		return err
	}
	for _, s := range secrets {
		s.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: HostedControlPlaneGVK.GroupVersion().String(), Kind: HostedControlPlaneGVK.Kind,
			Name: controlPlane.GetName(), UID: controlPlane.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
		if err := h.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	return nil
}

// reportControlPlane writes what a hosted control plane provider reports
// once its API server runs. A merge patch, not an update: under topology
// Cluster API's controllers write the same object meanwhile, and the status
// is ours alone.
func (h *Harness) reportControlPlane(ctx context.Context, key client.ObjectKey, controlPlane *unstructured.Unstructured) error {
	base := controlPlane.DeepCopy()
	controlPlane.Object["status"] = map[string]any{
		"version":                     ControlPlaneKubernetesVersion,
		"externalManagedControlPlane": true,
		"initialization":              map[string]any{"controlPlaneInitialized": true},
	}
	if err := h.Client.Status().Patch(ctx, controlPlane, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("reporting the hosted control plane of %s initialized: %w", key, err)
	}
	return nil
}

// waitForClusterInitialized waits until Cluster API reports the Cluster's
// control plane initialized and its infrastructure provisioned.
func (h *Harness) waitForClusterInitialized(ctx context.Context, key client.ObjectKey) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		c := &clusterv1.Cluster{}
		if err := h.Client.Get(ctx, key, c); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition) &&
			ptr.Deref(c.Status.Initialization.InfrastructureProvisioned, false), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Cluster %s to report its control plane initialized and infrastructure provisioned: %w", key, err)
	}
	return nil
}

// startControlPlane starts the workload control plane: the given one, or
// an envtest apiserver prepared as `kubeadm init` leaves one, with the
// controllers a join needs.
func (h *Harness) startControlPlane(ctx context.Context, key client.ObjectKey, external ControlPlanes) (_ *WorkloadCluster, rerr error) {
	if external != nil {
		api, err := external.StartControlPlane(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("starting the control plane of %s: %w", key, err)
		}
		return &WorkloadCluster{Key: key, API: api, Endpoint: api.Endpoint}, nil
	}
	api, err := envtest.StartWorkload()
	if err != nil {
		return nil, err
	}
	w := &WorkloadCluster{Key: key, API: api, Endpoint: api.Endpoint}
	defer func() {
		if rerr != nil {
			_ = w.stop()
		}
	}()
	if err := api.SeedKubeadmObjects(ctx, envtest.KubeadmSeed{KubernetesVersion: ControlPlaneKubernetesVersion, ClusterName: key.Name}); err != nil {
		return nil, err
	}
	if w.controllerManager, err = api.StartControllerManager(envtest.WorkloadControllers...); err != nil {
		return nil, err
	}
	return w, nil
}

// Workload returns the workload cluster of a Cluster the harness created.
func (h *Harness) Workload(key client.ObjectKey) *WorkloadCluster {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.workloads[key]
}

// DeleteCluster deletes the Cluster and waits until Cluster API has deleted
// it and everything it owns. The workload apiserver keeps running, so what
// is left in it can be inspected; Stop stops it.
func (h *Harness) DeleteCluster(ctx context.Context, key client.ObjectKey, timeout time.Duration) error {
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := h.Client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := h.Client.Get(ctx, key, &clusterv1.Cluster{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// ReleaseCluster deletes a Cluster in the background and stops its
// workload apiserver once it is gone, so a suite that makes many clusters
// does not keep idle apiservers running. Stop waits for releases in flight.
func (h *Harness) ReleaseCluster(key client.ObjectKey) {
	h.releases.Add(1)
	go func() {
		defer h.releases.Done()
		ctx, cancel := context.WithTimeout(h.releaseCtx, 5*time.Minute)
		defer cancel()
		if err := h.DeleteCluster(ctx, key, 5*time.Minute); err != nil {
			h.log.Info("Releasing a workload cluster: the Cluster was not deleted", "Cluster", key.String(), "reason", err.Error())
		}
		h.mu.Lock()
		w := h.workloads[key]
		delete(h.workloads, key)
		h.mu.Unlock()
		if w != nil {
			if h.Nodes != nil {
				h.Nodes.RemoveCluster(w.Endpoint)
			}
			if err := w.stop(); err != nil {
				h.log.Info("Releasing a workload cluster: its apiserver did not stop cleanly", "Cluster", key.String(), "reason", err.Error())
			}
		}
	}()
}

func (h *Harness) ensureNamespace(ctx context.Context, name string) error {
	err := h.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

func (w *WorkloadCluster) stop() error {
	if w.borrowed {
		return nil
	}
	if w.controllerManager != nil {
		w.controllerManager.Stop()
	}
	return w.API.Stop()
}

// startWorkload starts the workload control plane of a Cluster to be
// created in key's namespace and registers it with the node simulator; a
// Cluster creator stops it if it fails later.
func (h *Harness) startWorkload(ctx context.Context, key client.ObjectKey, opts ClusterOptions) (*WorkloadCluster, error) {
	if err := h.ensureNamespace(ctx, key.Namespace); err != nil {
		return nil, err
	}
	w, err := h.startControlPlane(ctx, key, opts.ControlPlanes)
	if err != nil {
		return nil, err
	}
	if h.Nodes != nil {
		if err := h.Nodes.AddCluster(w.API.Endpoint, w.API.Config); err != nil {
			_ = w.stop()
			return nil, err
		}
	}
	return w, nil
}
