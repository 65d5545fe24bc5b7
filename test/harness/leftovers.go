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
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
)

// Leftovers lists what a Cluster's machines created that belongs to no
// current Machine: KairosConfigs, KubeVirtMachines, VirtualMachines,
// instances, DataVolumes, claims, Secrets and ConfigMaps in the Cluster's
// namespace, of the management and the infrastructure cluster (a current
// template's shared import is its template's), the volumes of that
// namespace's claims, and Nodes in its workload cluster. Empty is the "nothing left behind" half of every scenario.
func (h *Harness) Leftovers(ctx context.Context, key client.ObjectKey) ([]string, error) {
	s, err := h.State(ctx, key)
	if err != nil {
		return nil, err
	}
	in := client.InNamespace(key.Namespace)
	vms, configs, providerIDs, dataSecrets := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range s.Machines {
		vms[m.Spec.InfrastructureRef.Name] = true
		configs[m.Spec.Bootstrap.ConfigRef.Name] = true
		providerIDs["kubevirt://"+m.Spec.InfrastructureRef.Name] = true
		if m.Spec.Bootstrap.DataSecretName != nil {
			dataSecrets[*m.Spec.Bootstrap.DataSecretName] = true
		}
	}
	var left []string
	check := func(c client.Client, kind string, list client.ObjectList, owned func(name string) bool) error {
		if err := c.List(ctx, list, in); err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, item := range items {
			o := item.(client.Object)
			if !owned(o.GetName()) {
				left = append(left, kind+" "+o.GetName())
			}
		}
		return nil
	}
	// The VM side is in the infrastructure cluster, in the namespace of the
	// same name; Secrets and ConfigMaps are on both sides.
	management, vmSide, both := []client.Client{h.Client}, []client.Client{h.infrastructure().Client}, []client.Client{h.Client}
	if h.infrastructure() != h {
		both = append(both, h.infrastructure().Client)
	}
	// A template's shared import belongs to it while it resolves to it,
	// whether or not a Machine clones it.
	templates := &infrav1.KubeVirtMachineTemplateList{}
	if err := h.Client.List(ctx, templates, in); err != nil {
		return nil, err
	}
	sharedImports := map[string]bool{}
	for i := range templates.Items {
		if t := &templates.Items[i]; sharedimage.Shared(t) {
			sharedImports[sharedimage.Name(t)] = true
		}
	}
	isVM := func(name string) bool { return vms[name] }
	isRootDisk := func(n string) bool {
		return sharedImports[n] || (vms[strings.TrimSuffix(n, "-root")] && strings.HasSuffix(n, "-root"))
	}
	for _, c := range []struct {
		in    []client.Client
		kind  string
		list  client.ObjectList
		owned func(string) bool
	}{
		{management, "KairosConfig", &bootstrapv1.KairosConfigList{}, func(n string) bool { return configs[n] }},
		{management, "KubeVirtMachine", &infrav1.KubeVirtMachineList{}, isVM},
		{vmSide, "VirtualMachine", &kubevirtv1.VirtualMachineList{}, isVM},
		{vmSide, "VirtualMachineInstance", &kubevirtv1.VirtualMachineInstanceList{}, isVM},
		{vmSide, "DataVolume", &cdiv1.DataVolumeList{}, isRootDisk},
		{vmSide, "PersistentVolumeClaim", &corev1.PersistentVolumeClaimList{}, isRootDisk},
		{both, "Secret", &corev1.SecretList{}, func(n string) bool {
			switch {
			case n == key.Name+"-kubeconfig", n == key.Name+"-ca", dataSecrets[n]:
				return true
			case strings.HasSuffix(n, "-userdata"):
				return vms[strings.TrimSuffix(n, "-userdata")]
			case strings.HasSuffix(n, "-bootstrap-token"):
				// Kept only until the Machine's node joins.
				return configs[strings.TrimSuffix(n, "-bootstrap-token")]
			}
			return false
		}},
		{both, "ConfigMap", &corev1.ConfigMapList{}, func(n string) bool {
			return n == "kube-root-ca.crt" || (strings.HasSuffix(n, "-import-ca") && vms[strings.TrimSuffix(n, "-import-ca")]) ||
				(strings.HasSuffix(n, "-ca") && sharedImports[strings.TrimSuffix(n, "-ca")])
		}},
	} {
		for _, cl := range c.in {
			if err := check(cl, c.kind, c.list, c.owned); err != nil {
				return nil, err
			}
		}
	}
	// Volumes are cluster-scoped: those of the namespace's claims.
	volumes := &corev1.PersistentVolumeList{}
	if err := h.infrastructure().Client.List(ctx, volumes); err != nil {
		return nil, err
	}
	for _, pv := range volumes.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == key.Namespace && !isRootDisk(ref.Name) {
			left = append(left, "PersistentVolume "+pv.Name+" of claim "+ref.Name)
		}
	}
	for _, n := range s.Nodes {
		if !providerIDs[n.Spec.ProviderID] {
			left = append(left, "Node "+n.Name)
		}
	}
	return left, nil
}

// JoinTokens maps each KairosConfig that has bootstrap tokens in the
// workload cluster to their Secrets' names; the Kairos bootstrap provider
// names the KairosConfig in a token's description.
func (h *Harness) JoinTokens(ctx context.Context, key client.ObjectKey) (map[string][]string, error) {
	w := h.Workload(key)
	if w == nil {
		return nil, fmt.Errorf("no workload cluster %s", key)
	}
	list := &corev1.SecretList{}
	if err := w.API.Client.List(ctx, list, client.InNamespace(metav1.NamespaceSystem)); err != nil {
		return nil, err
	}
	tokens := map[string][]string{}
	for i := range list.Items {
		if owner, ok := JoinTokenOwner(&list.Items[i]); ok {
			tokens[owner] = append(tokens[owner], list.Items[i].Name)
		}
	}
	for _, names := range tokens {
		sort.Strings(names)
	}
	return tokens, nil
}

// JoinTokenOwner reports whether s is a bootstrap token Secret and, if so,
// the namespace/name of the KairosConfig its description names, or "(no
// KairosConfig)".
func JoinTokenOwner(s *corev1.Secret) (string, bool) {
	if s.Type != bootstrapapi.SecretTypeBootstrapToken {
		return "", false
	}
	d := string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey])
	if f := strings.Fields(strings.TrimPrefix(d, joinTokenDescriptionPrefix)); strings.HasPrefix(d, joinTokenDescriptionPrefix) && len(f) > 0 {
		return strings.TrimSuffix(f[0], ","), true
	}
	return "(no KairosConfig)", true
}

// joinTokenDescriptionPrefix starts the description the Kairos bootstrap
// provider gives its tokens, followed by the KairosConfig's namespace/name.
const joinTokenDescriptionPrefix = "Join token of KairosConfig " //nolint:gosec // A token's description, not a credential.
