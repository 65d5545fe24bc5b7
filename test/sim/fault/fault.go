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

// Package fault picks the objects a stand-in's injected fault applies to,
// and counts how many more it may claim. Faults are injected through the
// stand-ins' Go APIs, never through annotations on the objects under test.
package fault

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Selector picks the objects a fault applies to.
type Selector func(client.Object) bool

// Named selects one object.
func Named(key client.ObjectKey) Selector {
	return func(o client.Object) bool { return o.GetNamespace() == key.Namespace && o.GetName() == key.Name }
}

// InNamespace selects the objects of one namespace.
func InNamespace(namespace string) Selector {
	return func(o client.Object) bool { return o.GetNamespace() == namespace }
}

// WithLabels selects objects carrying all the given labels.
func WithLabels(set map[string]string) Selector {
	selector := labels.SelectorFromSet(set)
	return func(o client.Object) bool { return selector.Matches(labels.Set(o.GetLabels())) }
}

// Fault applies to the next Remaining objects its selector picks, or to
// all of them when Remaining is negative. Duration parameterizes faults
// that take time (a slow import).
type Fault struct {
	Selector  Selector
	Remaining int
	Duration  time.Duration
	// Message is what the fault reports, where it reports something.
	Message string
}

// Set holds faults waiting for objects to claim them.
type Set struct {
	mu     sync.Mutex
	faults []*Fault
}

// Add queues a fault; one with Remaining zero applies to nothing.
func (s *Set) Add(f Fault) {
	if f.Remaining == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// Claim returns the first fault that selects obj and uses it up, or nil.
// An object should claim a fault once, when it is first seen, and keep
// its fate.
func (s *Set) Claim(obj client.Object) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Selector != nil && !f.Selector(obj) {
			continue
		}
		claimed := *f
		if f.Remaining > 0 {
			f.Remaining--
			if f.Remaining == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return &claimed
	}
	return nil
}

// Clear drops the faults no object has claimed yet.
func (s *Set) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}
