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
	"fmt"
	"slices"
	"strings"

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

// KeptKey is a data key a provider reads of a Secret, and the largest
// value it reads there: a value larger than any the key legitimately holds
// is not kept either.
type KeptKey struct {
	Name    string
	MaxSize int
}

// TooLargeAnnotation lists, on the cache's copy of a Secret, the kept keys
// whose values CachedSecret dropped for being larger than their MaxSize,
// sorted and comma-separated, so that a reader can say "too large" rather
// than "missing". The transform sets and clears it from what it sees: a
// Secret's writer can set it too, but only for a key the Secret lacks, so
// it says nothing false of another's Secret.
const TooLargeAnnotation = "watchview.cozystack.io/dropped-too-large"

// CachedSecret is the cache transform for Secrets that a provider's own
// transform calls with its rule of which keys it reads of a Secret: it
// keeps the metadata (without managedFields) and the data under those
// keys, each only up to its MaxSize, none when keep says none, and drops
// stringData, which only a write carries. A provider's cache selects
// Secrets by label, and lets in many whose keys it never reads (a
// cluster's CA key and admin kubeconfig, other providers' Secrets, a
// tenant's Secret made to look like one of ours, with extra or huge keys);
// it must not hold them. A kept key's value over its MaxSize is dropped
// and named in TooLargeAnnotation. It is idempotent, as informers require:
// a key already dropped stays named while it is absent. Any other object
// passes unchanged.
func CachedSecret(in any, keep func(*corev1.Secret) []KeptKey) (any, error) {
	s, ok := in.(*corev1.Secret)
	if !ok {
		return in, nil
	}
	s.SetManagedFields(nil)
	named := strings.Split(s.Annotations[TooLargeAnnotation], ",")
	kept := map[string]bool{}
	var tooLarge []string
	for _, k := range keep(s) {
		v, present := s.Data[k.Name]
		switch {
		case present && len(v) > k.MaxSize:
			delete(s.Data, k.Name)
			tooLarge = append(tooLarge, k.Name)
		case present:
			kept[k.Name] = true
		case slices.Contains(named, k.Name):
			tooLarge = append(tooLarge, k.Name)
		}
	}
	for k := range s.Data {
		if !kept[k] {
			delete(s.Data, k)
		}
	}
	if len(s.Data) == 0 {
		s.Data = nil
	}
	s.StringData = nil
	delete(s.Annotations, TooLargeAnnotation)
	if len(tooLarge) > 0 {
		slices.Sort(tooLarge)
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[TooLargeAnnotation] = strings.Join(slices.Compact(tooLarge), ",")
	} else if len(s.Annotations) == 0 {
		s.Annotations = nil
	}
	return s, nil
}

// DroppedTooLarge says whether the cache dropped s's value under key for
// being larger than the most it is read at.
func DroppedTooLarge(s *corev1.Secret, key string) bool {
	_, present := s.Data[key]
	return !present && slices.Contains(strings.Split(s.Annotations[TooLargeAnnotation], ","), key)
}

// TooLargeError is a reader's error for a value the cache dropped for its
// size: it names the Secret, the key and the limit, never the value.
type TooLargeError struct {
	Secret, Key string
	MaxSize     int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the Secret %s holds a %s larger than %d bytes, more than any value it is read for: not read", e.Secret, e.Key, e.MaxSize)
}
