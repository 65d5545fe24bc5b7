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
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectations remember the controller's own writes until the cache shows
// them. The reconciler reads from the cache, and a reconcile that runs
// before the cache has seen the previous reconcile's writes would repeat
// them: add the finalizer again, render again, revoke again. Each entry
// lives from a write to the next reconcile of the same config, which the
// write's own watch event triggers. (kube-controller-manager's
// ControllerExpectations solve the same problem.)
type expectations struct {
	mu sync.Mutex
	// staleVersions maps a config to the resourceVersions it went through
	// before our last write to it landed: while the cache holds one of
	// them, the cache is behind.
	staleVersions map[types.NamespacedName]sets.Set[string]
	// revoked maps a config to the ID of the token whose record we
	// deleted: a cached record with that ID is already gone.
	revoked map[types.NamespacedName]string
}

func newExpectations() *expectations {
	return &expectations{staleVersions: map[types.NamespacedName]sets.Set[string]{}, revoked: map[types.NamespacedName]string{}}
}

// wroteConfig records our writes to a config that had resourceVersion
// before: written are the versions the writes returned, in order. Every
// version but the last is stale.
func (e *expectations) wroteConfig(config types.NamespacedName, before string, written []string) {
	if len(written) == 0 {
		return
	}
	last := written[len(written)-1]
	// A write that changed nothing returns the version it started from;
	// no event follows it, so that version must not count as stale.
	stale := sets.New(before).Insert(written...).Delete(last)
	e.mu.Lock()
	defer e.mu.Unlock()
	if stale.Len() == 0 {
		delete(e.staleVersions, config)
		return
	}
	e.staleVersions[config] = stale
}

// cacheBehind reports whether the cached config predates our last write to
// it; once the cache has moved past that write, the entry is dropped.
func (e *expectations) cacheBehind(config types.NamespacedName, cached string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	stale, ok := e.staleVersions[config]
	if !ok {
		return false
	}
	if stale.Has(cached) {
		return true
	}
	delete(e.staleVersions, config)
	return false
}

// revokedToken records that the record of token id was deleted.
func (e *expectations) revokedToken(config types.NamespacedName, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.revoked[config] = id
}

// tokenRevoked reports whether a cached record of token id was already
// deleted by us.
func (e *expectations) tokenRevoked(config types.NamespacedName, id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.revoked[config] == id
}

// tokenRecordGone drops the revocation once the cache has no record.
func (e *expectations) tokenRecordGone(config types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.revoked, config)
}

// forget drops everything about a config that is gone.
func (e *expectations) forget(config types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.staleVersions, config)
	delete(e.revoked, config)
}

// versionRecorder is a client that notes the resourceVersions its writes
// to one object return, for wroteConfig.
type versionRecorder struct {
	client.Client
	written []string
}

func (v *versionRecorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := v.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	v.written = append(v.written, obj.GetResourceVersion())
	return nil
}

func (v *versionRecorder) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := v.Client.Update(ctx, obj, opts...); err != nil {
		return err
	}
	v.written = append(v.written, obj.GetResourceVersion())
	return nil
}

func (v *versionRecorder) Status() client.SubResourceWriter {
	return &statusVersionRecorder{SubResourceWriter: v.Client.Status(), recorder: v}
}

type statusVersionRecorder struct {
	client.SubResourceWriter
	recorder *versionRecorder
}

func (s *statusVersionRecorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	s.recorder.written = append(s.recorder.written, obj.GetResourceVersion())
	return nil
}

func (s *statusVersionRecorder) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.SubResourceWriter.Update(ctx, obj, opts...); err != nil {
		return err
	}
	s.recorder.written = append(s.recorder.written, obj.GetResourceVersion())
	return nil
}
