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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConditionHistory is every state of one condition type that the objects
// of one kind showed while a test watched them, so a state that lasted an
// instant (a verdict until the object is deleted, a status written and
// overwritten within a second) is not missed, as polling would miss it.
type ConditionHistory struct {
	conditionType string
	mu            sync.Mutex
	states        map[types.UID][]metav1.Condition
	keys          map[types.UID]client.ObjectKey
}

// WatchConditions records the states of conditionType on the objects that
// list and opts select, from now until the test ends (Watch).
func WatchConditions(tb testing.TB, c client.WithWatch, list client.ObjectList, conditionType string, opts ...client.ListOption) *ConditionHistory {
	tb.Helper()
	hist, stop := watchConditions(c, list, conditionType, opts...)
	tb.Cleanup(stop)
	return hist
}

// watchConditions is WatchConditions until stop is called.
func watchConditions(c client.WithWatch, list client.ObjectList, conditionType string, opts ...client.ListOption) (_ *ConditionHistory, stop func()) {
	hist := &ConditionHistory{conditionType: conditionType, states: map[types.UID][]metav1.Condition{}, keys: map[types.UID]client.ObjectKey{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := Watch(ctx, c, list, func(_ watch.EventType, o client.Object) { hist.observe(o) }, opts...)
	return hist, func() { cancel(); <-done }
}

// Watch calls observe with every change to the objects that list and opts
// select, from a first listing until ctx ends, and returns a channel closed
// once it has stopped; observe runs on one goroutine, one call at a time.
// As client-go's reflector does, it resumes a watch the API server ended
// where it stopped, and lists afresh when the API server no longer has that
// point, reporting the objects gone meanwhile as deleted; while the API
// server cannot be reached, it tries again every second. This is the one
// watcher of the test tiers: a state that lasts an instant (a verdict until
// the object is deleted, a status written and overwritten within a second)
// is not missed, as polling would miss it.
func Watch(ctx context.Context, c client.WithWatch, list client.ObjectList, observe func(watch.EventType, client.Object), opts ...client.ListOption) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		known := map[types.UID]client.Object{}
		resourceVersion := ""
		for ctx.Err() == nil {
			if resourceVersion == "" {
				listed := list.DeepCopyObject().(client.ObjectList)
				if err := c.List(ctx, listed, opts...); err != nil {
					pause(ctx)
					continue
				}
				resourceVersion = listed.GetResourceVersion()
				known = relisted(known, listed, observe)
			}
			w, err := c.Watch(ctx, list.DeepCopyObject().(client.ObjectList),
				append(append([]client.ListOption{}, opts...), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})...)
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					resourceVersion = ""
				}
				pause(ctx)
				continue
			}
			resourceVersion = follow(ctx, w, resourceVersion, known, observe)
			w.Stop()
		}
	}()
	return done
}

// follow reports the events of w until it ends or ctx does, and returns
// the resourceVersion to resume from: the last event's, or none when the
// watch ended on an error.
func follow(ctx context.Context, w watch.Interface, resourceVersion string, known map[types.UID]client.Object, observe func(watch.EventType, client.Object)) string {
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return resourceVersion
		case ev, open = <-w.ResultChan():
		}
		if !open {
			return resourceVersion
		}
		o, ok := ev.Object.(client.Object)
		if ev.Type == watch.Error || !ok {
			// Most often the point the watch resumed from is gone.
			return ""
		}
		resourceVersion = o.GetResourceVersion()
		if ev.Type == watch.Deleted {
			delete(known, o.GetUID())
		} else {
			known[o.GetUID()] = o
		}
		observe(ev.Type, o)
	}
}

// relisted reports a fresh listing to observe against the objects known
// before it, and returns the objects it lists.
func relisted(known map[types.UID]client.Object, listed client.ObjectList, observe func(watch.EventType, client.Object)) map[types.UID]client.Object {
	current := map[types.UID]client.Object{}
	_ = meta.EachListItem(listed, func(item runtime.Object) error {
		if o, ok := item.(client.Object); ok {
			current[o.GetUID()] = o
		}
		return nil
	})
	for uid, o := range known {
		if _, ok := current[uid]; !ok {
			observe(watch.Deleted, o)
		}
	}
	for uid, o := range current {
		event := watch.Added
		if _, ok := known[uid]; ok {
			event = watch.Modified
		}
		observe(event, o)
	}
	return current
}

// pause waits a second, or until ctx ends.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// conditionsGetter is what Cluster API's v1beta2 objects and ours have.
type conditionsGetter interface {
	GetConditions() []metav1.Condition
}

func (hist *ConditionHistory) observe(o client.Object) {
	getter, ok := o.(conditionsGetter)
	if !ok {
		return
	}
	hist.mu.Lock()
	defer hist.mu.Unlock()
	hist.keys[o.GetUID()] = client.ObjectKeyFromObject(o)
	for _, c := range getter.GetConditions() {
		if c.Type != hist.conditionType {
			continue
		}
		seen := hist.states[o.GetUID()]
		if n := len(seen); n > 0 && seen[n-1].Status == c.Status && seen[n-1].Reason == c.Reason && seen[n-1].Message == c.Message {
			return
		}
		hist.states[o.GetUID()] = append(seen, c)
	}
}

// Reasons are the reasons an object's condition showed with status, in
// order, each once per stretch.
func (hist *ConditionHistory) Reasons(uid types.UID, status metav1.ConditionStatus) []string {
	hist.mu.Lock()
	defer hist.mu.Unlock()
	var reasons []string
	for _, c := range hist.states[uid] {
		if c.Status == status && (len(reasons) == 0 || reasons[len(reasons)-1] != c.Reason) {
			reasons = append(reasons, c.Reason)
		}
	}
	return reasons
}

// With lists, as "<object>: <reason>: <message>", every state any object
// showed with status.
func (hist *ConditionHistory) With(status metav1.ConditionStatus) []string {
	return hist.WithIn("", status)
}

// WithIn is With for the objects of one namespace (all when empty).
func (hist *ConditionHistory) WithIn(namespace string, status metav1.ConditionStatus) []string {
	hist.mu.Lock()
	defer hist.mu.Unlock()
	uids := make([]types.UID, 0, len(hist.states))
	for uid := range hist.states {
		if namespace == "" || hist.keys[uid].Namespace == namespace {
			uids = append(uids, uid)
		}
	}
	// By object, and in the order each object showed its states.
	slices.SortFunc(uids, func(a, b types.UID) int { return strings.Compare(hist.keys[a].String(), hist.keys[b].String()) })
	var out []string
	for _, uid := range uids {
		for _, c := range hist.states[uid] {
			if c.Status == status {
				out = append(out, fmt.Sprintf("%s: %s: %s", hist.keys[uid].Name, c.Reason, c.Message))
			}
		}
	}
	return out
}

// Objects counts the objects seen with the condition.
func (hist *ConditionHistory) Objects() int {
	hist.mu.Lock()
	defer hist.mu.Unlock()
	return len(hist.states)
}
