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

package kubevirtmachine

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
)

// The machine's watches map events to the machines they concern: its
// Machine and Cluster (Cluster API's mappers), the VM, instance and
// DataVolume labelled with its name (predicates.go filters their updates),
// the template it was cloned from once resolved, and a shared import the
// template waits for.

// clonedFromTemplateIndex indexes KubeVirtMachines by the
// KubeVirtMachineTemplate they were cloned from.
const clonedFromTemplateIndex = "infrastructure.cozystack.io/cloned-from-template"

var templateGroupKind = infrav1.GroupVersion.WithKind("KubeVirtMachineTemplate").GroupKind().String()

// clonedFromTemplate indexes a machine by the KubeVirtMachineTemplate named in
// the annotations Cluster API sets when it clones a template.
func clonedFromTemplate(o client.Object) []string {
	a := o.GetAnnotations()
	if a[clusterv1.TemplateClonedFromGroupKindAnnotation] != templateGroupKind || a[clusterv1.TemplateClonedFromNameAnnotation] == "" {
		return nil
	}
	return []string{a[clusterv1.TemplateClonedFromNameAnnotation]}
}

func machineForLabelledObject(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[infrav1.MachineNameLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

func (r *Reconciler) templateToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	machines := &infrav1.KubeVirtMachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(o.GetNamespace()), client.MatchingFields{clonedFromTemplateIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list the KubeVirtMachines of a template", "KubeVirtMachineTemplate", klog.KObj(o))
		return nil
	}
	requests := make([]reconcile.Request, 0, len(machines.Items))
	for i := range machines.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&machines.Items[i])})
	}
	return requests
}

// sharedImportToMachines maps a shared import to the machines of the
// templates that own it: they wait for it.
func (r *Reconciler) sharedImportToMachines(ctx context.Context, dv client.Object) []reconcile.Request {
	templates := sharedimage.TemplatesOf(dv)
	requests := make([]reconcile.Request, 0, len(templates))
	for _, t := range templates {
		requests = append(requests, r.templateToMachines(ctx, &infrav1.KubeVirtMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: t.Name}})...)
	}
	return requests
}

// templateResolved passes template events that make a resolved image
// available: machines only wait for that.
func templateResolved() predicate.Funcs {
	resolved := func(o client.Object) bool {
		t, ok := o.(*infrav1.KubeVirtMachineTemplate)
		return ok && t.Status.Resolved != nil
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return resolved(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !resolved(e.ObjectOld) && resolved(e.ObjectNew) },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool {
			return false
		},
	}
}
