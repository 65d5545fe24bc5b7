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
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownWrites (nil remembers nothing) remembers which resourceVersions of each KubeVirtMachine our own
// last writes replaced. The controller reads machines from the cache; an
// event of a VM, an instance or the Machine can reconcile a machine before
// the cache has seen the previous reconcile's patches, and that reconcile
// would send them again (the finalizer and providerID, or the same
// conditions against an old resourceVersion, which conflicts and retries).
// The watch event of our last write reconciles the machine once the cache
// has it, so a reconcile on a replaced version does nothing.
type ownWrites struct {
	mu sync.Mutex
	// replaced maps a machine to the versions that precede our last write
	// to it.
	replaced map[types.NamespacedName]sets.Set[string]
}

func newOwnWrites() *ownWrites {
	return &ownWrites{replaced: map[types.NamespacedName]sets.Set[string]{}}
}

// wrote records the writes of one reconcile to a machine read at version
// before; versions are what the writes returned, in order.
func (w *ownWrites) wrote(machine types.NamespacedName, before string, versions []string) {
	if w == nil || len(versions) == 0 {
		return
	}
	last := versions[len(versions)-1]
	// A patch that changed nothing returns the version it was sent
	// against, and no event follows it: that version is current.
	replaced := sets.New(versions[:len(versions)-1]...).Insert(before).Delete(last)
	w.mu.Lock()
	defer w.mu.Unlock()
	if replaced.Len() == 0 {
		delete(w.replaced, machine)
		return
	}
	w.replaced[machine] = replaced
}

// cacheBehind reports whether the cached version of a machine precedes our
// last write to it. Once the cache has moved on, the record is dropped.
func (w *ownWrites) cacheBehind(machine types.NamespacedName, cached string) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	replaced, ok := w.replaced[machine]
	if !ok {
		return false
	}
	if replaced.Has(cached) {
		return true
	}
	delete(w.replaced, machine)
	return false
}

// forget drops a machine that is gone.
func (w *ownWrites) forget(machine types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.replaced, machine)
}

// versionRecorder is the client a reconcile writes its machine through: it
// notes the resourceVersion each patch of the machine returns.
type versionRecorder struct {
	client.Client
	versions []string
}

func (v *versionRecorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := v.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	v.versions = append(v.versions, obj.GetResourceVersion())
	return nil
}

func (v *versionRecorder) Status() client.SubResourceWriter {
	return statusVersionRecorder{SubResourceWriter: v.Client.Status(), recorder: v}
}

type statusVersionRecorder struct {
	client.SubResourceWriter
	recorder *versionRecorder
}

func (s statusVersionRecorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	s.recorder.versions = append(s.recorder.versions, obj.GetResourceVersion())
	return nil
}
