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
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// inventoryVersion is the version the harness records for every provider
// in clusterctl's inventory: clusterctl only compares the versions of two
// inventories (a move's source and target), and every harness records the
// same.
const inventoryVersion = "v0.0.0-harness"

// clusterctlProvider is one provider as `clusterctl init` records it.
type clusterctlProvider struct {
	// label is the provider's `cluster.x-k8s.io/provider` label and the
	// name of its inventory entry.
	label, name, namespace string
	typ                    clusterctlv1.ProviderType
	// groups are the API groups of the provider's CRDs.
	groups []string
}

// clusterctlProviders are the providers of the harness's management
// cluster, as a clusterctl-initialized one would list them.
func (h *Harness) clusterctlProviders() []clusterctlProvider {
	providers := []clusterctlProvider{
		{label: "cluster-api", name: "cluster-api", namespace: "capi-system", typ: clusterctlv1.CoreProviderType,
			groups: []string{"cluster.x-k8s.io", "addons.cluster.x-k8s.io", "ipam.cluster.x-k8s.io", "runtime.cluster.x-k8s.io"}},
		{label: "infrastructure-kubevirt-workers", name: "kubevirt-workers", namespace: "kubevirt-workers-system", typ: clusterctlv1.InfrastructureProviderType,
			groups: []string{"infrastructure.cozystack.io", "cozystack.io"}},
		{label: "control-plane-harness", name: "harness", namespace: "harness-control-plane-system", typ: clusterctlv1.ControlPlaneProviderType,
			groups: []string{"controlplane.harness.cozystack.io"}},
	}
	if h.opts.Bootstrap == BootstrapKubeadm {
		return append(providers, clusterctlProvider{label: "bootstrap-kubeadm", name: "kubeadm", namespace: "capi-kubeadm-bootstrap-system",
			typ: clusterctlv1.BootstrapProviderType, groups: []string{"bootstrap.cluster.x-k8s.io"}})
	}
	return append(providers, clusterctlProvider{label: "bootstrap-kairos-kubeadm", name: "kairos-kubeadm", namespace: "kairos-bootstrap-system",
		typ: clusterctlv1.BootstrapProviderType, groups: []string{"bootstrap.cozystack.io"}})
}

// ClusterctlProviderCRDPath is clusterctl's inventory CRD (Provider), from
// the Cluster API module go.mod pins.
func ClusterctlProviderCRDPath() (string, error) {
	dir, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "cmd", "clusterctl", "config", "crd", "bases", "clusterctl.cluster.x-k8s.io_providers.yaml"), nil
}

// registerWithClusterctl leaves the management cluster as `clusterctl
// init` leaves one: every CRD of a provider carries clusterctl's label (a
// move discovers the kinds of labelled CRDs only) and the provider's, and
// clusterctl's inventory lists the providers.
func (h *Harness) registerWithClusterctl(ctx context.Context) error {
	providers := h.clusterctlProviders()
	byGroup := map[string]clusterctlProvider{}
	for _, p := range providers {
		for _, g := range p.groups {
			byGroup[g] = p
		}
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := h.Management.Client.List(ctx, crds); err != nil {
		return fmt.Errorf("listing CRDs: %w", err)
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		p, ok := byGroup[crd.Spec.Group]
		if !ok {
			continue
		}
		patch := client.MergeFrom(crd.DeepCopy())
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[clusterctlv1.ClusterctlLabel] = ""
		crd.Labels["cluster.x-k8s.io/provider"] = p.label
		if err := h.Management.Client.Patch(ctx, crd, patch); err != nil {
			return fmt.Errorf("labelling CRD %s: %w", crd.Name, err)
		}
	}
	for _, p := range providers {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace}}
		if err := h.Management.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", p.namespace, err)
		}
		entry := &unstructured.Unstructured{}
		entry.SetGroupVersionKind(schema.GroupVersionKind{Group: clusterctlv1.GroupVersion.Group, Version: clusterctlv1.GroupVersion.Version, Kind: "Provider"})
		entry.SetNamespace(p.namespace)
		entry.SetName(p.label)
		entry.SetLabels(map[string]string{clusterctlv1.ClusterctlLabel: "", "cluster.x-k8s.io/provider": p.label})
		entry.Object["providerName"] = p.name
		entry.Object["type"] = string(p.typ)
		entry.Object["version"] = inventoryVersion
		if err := h.Management.Client.Create(ctx, entry); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("recording provider %s in clusterctl's inventory: %w", p.label, err)
		}
	}
	return nil
}

// ClusterctlBackup runs Cluster API's own `clusterctl move --to-directory`
// on a namespace of the management cluster: clusterctl pauses its
// Clusters, writes every object a move would carry to dir, one file per
// object (<Kind>_<namespace>_<name>.yaml), and resumes them.
func (h *Harness) ClusterctlBackup(ctx context.Context, namespace, dir string) error {
	return h.clusterctlMove(ctx, namespace, "--to-directory", dir)
}

// ClusterctlMove runs Cluster API's own `clusterctl move` of a namespace to
// another harness's management cluster (one started with InfrastructureOf
// this harness, so that its infrastructure provider reaches the VMs left
// here). clusterctl does not carry status, so the target then does what
// the hosted control plane provider would once it runs against the moved
// objects: it reports each moved control plane initialized. The workload
// apiservers stay this harness's (it started them and Stop stops them);
// the target reads them (Workload) for its helpers.
func (h *Harness) ClusterctlMove(ctx context.Context, namespace string, to *Harness) error {
	home, err := os.MkdirTemp("", "harness-clusterctl-target-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(home) }()
	target := filepath.Join(home, "kubeconfig")
	if err := envtest.WriteKubeconfig(target, "target", to.Management.Config); err != nil {
		return err
	}
	if err := h.clusterctlMove(ctx, namespace, "--to-kubeconfig", target); err != nil {
		return err
	}
	h.mu.Lock()
	var moved []*WorkloadCluster
	for key, w := range h.workloads {
		if key.Namespace == namespace {
			moved = append(moved, w)
		}
	}
	h.mu.Unlock()
	for _, w := range moved {
		if err := to.adoptWorkload(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// adoptWorkload takes over the hosted control plane of a Cluster moved
// here: it reports the control plane initialized again, registers the
// workload cluster (borrowed: its owner stops it) and waits until Cluster
// API reports the Cluster initialized.
func (h *Harness) adoptWorkload(ctx context.Context, w *WorkloadCluster) error {
	c := &clusterv1.Cluster{}
	if err := h.Client.Get(ctx, w.Key, c); err != nil {
		return fmt.Errorf("reading the moved Cluster %s: %w", w.Key, err)
	}
	controlPlane := &unstructured.Unstructured{}
	controlPlane.SetGroupVersionKind(HostedControlPlaneGVK)
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: w.Key.Namespace, Name: c.Spec.ControlPlaneRef.Name}, controlPlane); err != nil {
		return fmt.Errorf("reading the moved hosted control plane of %s: %w", w.Key, err)
	}
	if err := h.reportControlPlane(ctx, w.Key, controlPlane); err != nil {
		return err
	}
	h.mu.Lock()
	h.workloads[w.Key] = &WorkloadCluster{Key: w.Key, API: w.API, Endpoint: w.Endpoint, borrowed: true}
	h.mu.Unlock()
	return h.waitForClusterInitialized(ctx, w.Key)
}

// clusterctlMove runs the pinned `clusterctl move` of a namespace of the
// management cluster with the destination flags given, offline and isolated
// from the user's clusterctl configuration; its combined output is in the
// error.
func (h *Harness) clusterctlMove(ctx context.Context, namespace string, destination ...string) error {
	bin, err := envtest.HackTool("clusterctl")
	if err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "harness-clusterctl-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(home) }()
	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "management", h.Management.Config); err != nil {
		return err
	}
	args := append([]string{"move", "--kubeconfig", kubeconfig, "--namespace", namespace}, destination...)
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // The pinned clusterctl with the harness's own arguments.
	cmd.Env = append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "HOME="+home, "XDG_CONFIG_HOME="+home, "KUBECONFIG="+kubeconfig)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("clusterctl move %s: %w: %s", destination[0], err, strings.TrimSpace(output.String()))
	}
	return nil
}
