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

package kairosconfig

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/predicates"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/contract"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// machineToKairosConfig maps a Machine to the KairosConfig it references.
func machineToKairosConfig(_ context.Context, o client.Object) []ctrl.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return nil
	}
	ref := m.Spec.Bootstrap.ConfigRef
	if ref.APIGroup != bootstrapv1.GroupVersion.Group || ref.Kind != "KairosConfig" || ref.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: ref.Name}}}
}

// machineView is what a config's reconcile reads of its Machine: its
// watchview.Machine and, of the status, only the nodeRef (the node joined:
// the token is revoked). Cluster API's other rewrites of the Machine's
// status reconcile no config.
func machineView(m *clusterv1.Machine) any {
	return struct {
		watchview.Machine
		NodeRef clusterv1.MachineNodeReference
	}{watchview.OfMachine(m), m.Status.NodeRef}
}

// clusterToKairosConfigs maps a Cluster to the KairosConfigs of its
// Machines.
func (r *Reconciler) clusterToKairosConfigs(ctx context.Context, o client.Object) []ctrl.Request {
	return r.configsOfCluster(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()})
}

// clusterEvents passes the Cluster events a config can wait for, as Cluster
// API's KubeadmConfig controller filters its Cluster watch: the Cluster's
// pause transitions and its infrastructure provisioned
// (ClusterPausedTransitionsOrInfrastructureProvisioned), its control plane
// initialized, and, because a config waits for them too where Cluster API
// polls instead, the Cluster appearing or going and any change of its spec
// (spec.controlPlaneEndpoint set). The rest of the Cluster's status, which
// changes as its Machines come and go, reconciles none of its configs.
func clusterEvents(scheme *runtime.Scheme, log logr.Logger) predicate.Funcs {
	return predicates.Any(scheme, log,
		predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(scheme, log),
		predicates.ClusterControlPlaneInitialized(scheme, log),
		predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return true },
			UpdateFunc:  predicate.GenerationChangedPredicate{}.Update,
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})
}

// secretToKairosConfigs maps a cluster-labelled Secret (the only kind the
// cache holds) to the KairosConfigs waiting for it: the <cluster>-ca
// Secret to every config of the cluster, any other Secret to the configs
// whose files read it. File Secrets without the label are picked up by
// the periodic retry instead.
func (r *Reconciler) secretToKairosConfigs(ctx context.Context, o client.Object) []ctrl.Request {
	clusterName := o.GetLabels()[clusterv1.ClusterNameLabel]
	if clusterName == "" {
		return nil
	}
	if o.GetName() == secret.Name(clusterName, secret.ClusterCA) {
		return r.configsOfCluster(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: clusterName})
	}
	// The index finds the few configs reading this Secret without copying
	// every config of the cluster on each of the cluster's Secret events.
	configs := &bootstrapv1.KairosConfigList{}
	if err := r.Client.List(ctx, configs, client.InNamespace(o.GetNamespace()),
		client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}, client.MatchingFields{configFileSecretsField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the KairosConfigs that read a Secret failed", "Cluster", clusterName, "Secret", o.GetName())
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(configs.Items))
	for _, c := range configs.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs
}

// configFileSecretsField indexes KairosConfigs by the Secrets their files
// read.
const configFileSecretsField = "kairosconfig.spec.files.contentFrom.secret.name" //nolint:gosec // An index name, not a credential.

func configFileSecrets(o client.Object) []string {
	c, ok := o.(*bootstrapv1.KairosConfig)
	if !ok {
		return nil
	}
	var names []string
	for _, f := range c.Spec.Files {
		if n := f.ContentFrom.Secret.Name; n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// machineInfrastructureField indexes Machines by the name of their
// infrastructure machine, which is the VM's and so the Node's name.
const machineInfrastructureField = "machine.spec.infrastructureRef.name"

func machineInfrastructureName(o client.Object) []string {
	m, ok := o.(*clusterv1.Machine)
	if !ok || m.Spec.InfrastructureRef.Name == "" {
		return nil
	}
	return []string{m.Spec.InfrastructureRef.Name}
}

// indexFields registers the indexes the event mappers look objects up by.
func indexFields(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &bootstrapv1.KairosConfig{}, configFileSecretsField, configFileSecrets); err != nil {
		return fmt.Errorf("indexing KairosConfigs by file Secret: %w", err)
	}
	if err := indexer.IndexField(ctx, &clusterv1.Machine{}, machineInfrastructureField, machineInfrastructureName); err != nil {
		return fmt.Errorf("indexing Machines by infrastructure machine: %w", err)
	}
	return nil
}

func (r *Reconciler) configsOfCluster(ctx context.Context, cluster client.ObjectKey) []ctrl.Request {
	machines := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(cluster.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the Cluster's Machines failed", "Cluster", cluster)
		return nil
	}
	var reqs []ctrl.Request
	for i := range machines.Items {
		reqs = append(reqs, machineToKairosConfig(ctx, &machines.Items[i])...)
	}
	return reqs
}

// nodeToKairosConfig maps a workload Node to the KairosConfig of the
// Machine whose VM it is (node name or providerID kubevirt://<vm>).
func (r *Reconciler) nodeToKairosConfig(cluster client.ObjectKey) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		node, ok := o.(*corev1.Node)
		if !ok {
			return nil
		}
		vm := node.Name
		if id, found := strings.CutPrefix(node.Spec.ProviderID, contract.ProviderIDPrefix); found && id != "" {
			vm = id
		}
		machines := &clusterv1.MachineList{}
		if err := r.Client.List(ctx, machines, client.InNamespace(cluster.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}, client.MatchingFields{machineInfrastructureField: vm}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the Machine of a Node failed", "Cluster", cluster, "node", node.Name)
			return nil
		}
		var reqs []ctrl.Request
		for i := range machines.Items {
			reqs = append(reqs, machineToKairosConfig(ctx, &machines.Items[i])...)
		}
		return reqs
	}
}

// nodeRegistered passes what can tell a node has joined: a Node's
// creation, and a change of its providerID. The kubelet's status reports
// (the cache keeps only name and providerID, so they change nothing the
// reconciler reads) and deletions do not.
func nodeRegistered() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, ok1 := e.ObjectOld.(*corev1.Node)
			after, ok2 := e.ObjectNew.(*corev1.Node)
			return ok1 && ok2 && before.Spec.ProviderID != after.Spec.ProviderID
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// watchTemplates makes templates of the given template's kind reconcile,
// once they resolve, the KairosConfigs that have not rendered yet in their
// namespace. The watch is added once per kind; the cache already holds the
// kind, since the template was read from it. Without a running controller
// (a Reconciler built by hand) there is nothing to watch with.
func (r *Reconciler) watchTemplates(ctx context.Context, template *unstructured.Unstructured) error {
	if r.templates == nil {
		return nil
	}
	kind := &unstructured.Unstructured{}
	kind.SetGroupVersionKind(template.GroupVersionKind())
	return r.templates.Watch(ctrl.LoggerFrom(ctx), kind, handler.EnqueueRequestsFromMapFunc(r.templateToKairosConfigs), templateResolved())
}

// templateResolved passes a template's first status.resolved: its update,
// or a template that is resolved when the watch starts or is created.
func templateResolved() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isResolved(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return !isResolved(e.ObjectOld) && isResolved(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func isResolved(o client.Object) bool {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	resolved, found, err := unstructured.NestedFieldNoCopy(u.Object, contract.ResolvedField...)
	return err == nil && found && resolved != nil
}

// templateToKairosConfigs maps a resolved template to the KairosConfigs in
// its namespace that have no bootstrap data yet. Which of them wait for
// this template is not known without reading their infrastructure
// machines, and a config that has not rendered is in that state from its
// creation, so no config whose wait began just now is missed. Templates
// resolve once, so this runs about once per template.
func (r *Reconciler) templateToKairosConfigs(ctx context.Context, o client.Object) []ctrl.Request {
	configs := &bootstrapv1.KairosConfigList{}
	if err := r.Client.List(ctx, configs, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the KairosConfigs of a resolved template's namespace failed", "namespace", o.GetNamespace())
		return nil
	}
	var reqs []ctrl.Request
	for _, c := range configs.Items {
		if ptr.Deref(c.Status.Initialization.DataSecretCreated, false) {
			continue
		}
		// The watch filter selects the configs, not the templates, which
		// need not carry the label.
		if r.WatchFilterValue != "" && c.Labels[clusterv1.WatchLabel] != r.WatchFilterValue {
			continue
		}
		reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs
}
