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

// Package watchview filters a watch's update events down to those that
// change what a reconciler reads of the object: a view of it. Cluster API
// and KubeVirt rewrite their objects' status many times over a machine's
// life (a Machine's conditions mirror every provider's, a
// VirtualMachineInstance reports its guest), and each update that reached
// a reconciler cost a reconcile: reads, and Cluster API's patch helper's
// conversions and diffs, for nothing (the scale profiles,
// docs/benchmarks.md). Creates and deletes always pass, and the reconciled
// object's own events and resync still read everything afresh. For the
// Machine, which both providers watch, it also holds the cache transform
// that keeps of it only what they read (CachedMachine), and for Secrets
// the transform that both providers' own call with the one key they read
// (CachedSecret).
package watchview

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Changed passes updates whose view differs between the old and the new
// object; an update of another type than T passes.
func Changed[T client.Object](view func(T) any) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(T)
		after, okAfter := e.ObjectNew.(T)
		if !okBefore || !okAfter {
			return true
		}
		return !equality.Semantic.DeepEqual(view(before), view(after))
	}}
}

// Machine is what a provider reads of its Machine apart from the status:
// the spec (the bootstrap data Secret's name, the infrastructure
// reference, the version, the failure domain), the labels and annotations,
// and whether it is being deleted. Cluster API's rewrites of the Machine's
// status (its phase, addresses and conditions, which mirror the providers'
// own) leave it unchanged; a provider that reads a status field adds it to
// its own view.
type Machine struct {
	Spec        clusterv1.MachineSpec
	Labels      map[string]string
	Annotations map[string]string
	Deleting    bool
}

// OfMachine is m's Machine view.
func OfMachine(m *clusterv1.Machine) Machine {
	return Machine{Spec: m.Spec, Labels: m.Labels, Annotations: m.Annotations, Deleting: !m.DeletionTimestamp.IsZero()}
}

// CachedMachine is a cache transform for Machines: it keeps the metadata
// (without managedFields), the spec and status.nodeRef, the only status
// field a provider reads, and drops the rest of the status. Cluster API
// rewrites a Machine's status about fifteen times on its way to Running
// (its conditions, addresses and node info), and a provider's cache held
// each Machine whole for nothing (memory per machine, docs/benchmarks.md). A
// provider that reads another status field keeps it here and adds it to
// its view.
func CachedMachine(in any) (any, error) {
	if m, ok := in.(*clusterv1.Machine); ok {
		m.SetManagedFields(nil)
		m.Status = clusterv1.MachineStatus{NodeRef: m.Status.NodeRef}
	}
	return in, nil
}

// CachedSecret is the cache transform for Secrets that a provider's own
// transform calls with its rule of which key it reads of a Secret: it keeps
// the metadata (without managedFields) and the data under that one key,
// none when read says "", and drops stringData, which only a write
// carries. A provider's cache selects Secrets by label, and lets in many
// whose keys it never reads (a cluster's CA key and admin kubeconfig,
// other providers' Secrets); it must not hold them. Any other object
// passes unchanged.
func CachedSecret(in any, read func(*corev1.Secret) string) (any, error) {
	s, ok := in.(*corev1.Secret)
	if !ok {
		return in, nil
	}
	s.SetManagedFields(nil)
	key := read(s)
	for k := range s.Data {
		if k != key {
			delete(s.Data, k)
		}
	}
	if len(s.Data) == 0 {
		s.Data = nil
	}
	s.StringData = nil
	return s, nil
}
