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

// Package ownwrites lets a controller that reads its objects from a cache
// tell a stale cache apart from a current one. A reconcile that runs
// before the cache has seen the previous reconcile's writes would repeat
// them (add a finalizer again, render again, patch the same conditions
// against an old resourceVersion and conflict); the event of the last
// write reconciles the object again once the cache has it, so a reconcile
// on a version our own writes replaced can do nothing.
// (kube-controller-manager's ControllerExpectations solve the same
// problem.)
//
// Why not Cluster API v1.14's own guard (util/controller's consistency
// store, behind the ReconcilerRateLimiting gate), which covers the same
// case for objects in the manager's cache: it only holds a stale
// reconcile back, requeueing it every 100 ms until the cache has the
// write, so each step of a reconcile still waits for its watch event,
// while a Recorder lets the reconcile that wrote go on from its own last
// write (the scale round trips, docs/benchmarks.md). It also sees only
// the manager's cache: the VMs in a remote infrastructure cluster live in
// another cache, and the token-record Secrets are read through a
// label-selected one, for which the guard would open an informer on every
// Secret.
package ownwrites

import (
	"context"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Versions remembers, per object, the resourceVersions our last writes to
// it replaced, from one reconcile's writes until the cache moved past
// them. The zero of *Versions (nil) remembers nothing, so a reconciler
// built without its controller treats every version as current.
type Versions struct {
	mu    sync.Mutex
	stale map[types.NamespacedName]sets.Set[string]
}

// New returns an empty record.
func New() *Versions {
	return &Versions{stale: map[types.NamespacedName]sets.Set[string]{}}
}

// Wrote records the writes of one reconcile to an object read at version
// before; written are the versions the writes returned, in order. Every
// version but the last is stale.
func (v *Versions) Wrote(key types.NamespacedName, before string, written []string) {
	if v == nil || len(written) == 0 {
		return
	}
	last := written[len(written)-1]
	// A write that changed nothing returns the version it was sent
	// against, and no event follows it: that version is current.
	stale := sets.New(before).Insert(written...).Delete(last)
	v.mu.Lock()
	defer v.mu.Unlock()
	if stale.Len() == 0 {
		delete(v.stale, key)
		return
	}
	v.stale[key] = stale
}

// CacheBehind reports whether the cached version of an object precedes our
// last write to it. Once the cache has moved on, the record is dropped.
func (v *Versions) CacheBehind(key types.NamespacedName, cached string) bool {
	if v == nil {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	stale, ok := v.stale[key]
	if !ok {
		return false
	}
	if stale.Has(cached) {
		return true
	}
	delete(v.stale, key)
	return false
}

// Forget drops an object that is gone.
func (v *Versions) Forget(key types.NamespacedName) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.stale, key)
}

// Recorder is the client a reconcile writes its object through: it notes
// the resourceVersion each update or patch returns, object and status,
// for Versions.Wrote. It also lets the reconcile read its own writes: a
// Get that the cache answers with a version this recorder's writes
// replaced returns the object as the last write left it, so that a
// reconcile can go on after a write instead of ending and waiting for the
// write's event (Cluster API's patch helper reads the object before it
// patches conditions, against that object's resourceVersion).
type Recorder struct {
	client.Client
	written []string
	// replaced are the versions the writes were sent against.
	replaced sets.Set[string]
	// last is, per object, what its last write returned.
	last map[recordedKey]client.Object
}

// recordedKey tells objects of different types with the same name apart.
type recordedKey struct {
	t   reflect.Type
	key client.ObjectKey
}

// NewRecorder writes through c.
func NewRecorder(c client.Client) *Recorder {
	return &Recorder{Client: c, replaced: sets.New[string](), last: map[recordedKey]client.Object{}}
}

// Written are the versions the writes returned, in order.
func (r *Recorder) Written() []string {
	return r.written
}

// Get reads through the client; where that returns a version of obj that
// the recorder's writes replaced (the cache has not seen them yet), obj is
// set to what the last write returned instead.
func (r *Recorder) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	last, ok := r.last[recordedKey{reflect.TypeOf(obj), key}]
	if !ok || !r.replaced.Has(obj.GetResourceVersion()) || obj.GetResourceVersion() == last.GetResourceVersion() {
		return nil
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(last.DeepCopyObject()).Elem())
	return nil
}

// write sends one write of obj and records it.
func (r *Recorder) write(obj client.Object, send func() error) error {
	sent := obj.GetResourceVersion()
	if err := send(); err != nil {
		return err
	}
	r.written = append(r.written, obj.GetResourceVersion())
	if sent != "" {
		r.replaced.Insert(sent)
	}
	if copied, ok := obj.DeepCopyObject().(client.Object); ok {
		r.last[recordedKey{reflect.TypeOf(obj), client.ObjectKeyFromObject(obj)}] = copied
	}
	return nil
}

// Patch patches obj and records its new version.
func (r *Recorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return r.write(obj, func() error { return r.Client.Patch(ctx, obj, patch, opts...) })
}

// Update updates obj and records its new version.
func (r *Recorder) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return r.write(obj, func() error { return r.Client.Update(ctx, obj, opts...) })
}

// Status writes the status subresource, recording each new version.
func (r *Recorder) Status() client.SubResourceWriter {
	return statusRecorder{SubResourceWriter: r.Client.Status(), recorder: r}
}

type statusRecorder struct {
	client.SubResourceWriter
	recorder *Recorder
}

func (s statusRecorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.recorder.write(obj, func() error { return s.SubResourceWriter.Patch(ctx, obj, patch, opts...) })
}

func (s statusRecorder) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.recorder.write(obj, func() error { return s.SubResourceWriter.Update(ctx, obj, opts...) })
}

// Children remembers, per object, the one child a reconcile of it last
// created or deleted, until the cache shows that write: a reconcile that
// finds the cache disagreeing reads the API server or skips, instead of
// repeating a create that can only fail or a deletion already done
// (kube-controller-manager's ControllerExpectations, for one child). The
// zero value is ready to use.
type Children struct {
	mu      sync.Mutex
	written map[types.NamespacedName]string
}

// Wrote records that a reconcile of owner created or deleted its child
// name.
func (c *Children) Wrote(owner types.NamespacedName, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written == nil {
		c.written = map[types.NamespacedName]string{}
	}
	c.written[owner] = name
}

// Pending reports whether owner's last recorded write was to its child
// name and the cache has not been seen to show it yet.
func (c *Children) Pending(owner types.NamespacedName, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	written, ok := c.written[owner]
	return ok && written == name
}

// Seen drops owner's record: the cache shows the write, or owner is gone.
func (c *Children) Seen(owner types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.written, owner)
}
