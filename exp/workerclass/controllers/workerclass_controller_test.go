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

package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

func labelledPool(namespace, name, class string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		Labels: map[string]string{workerclassv1.WorkerClassLabel: class}}}
	m.SetGroupVersionKind(workerclassv1.PoolGroupVersionKind)
	return m
}

func condition(class *workerclassv1.WorkerClass, t string) metav1.Condition {
	for _, c := range class.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// poolsAsMetadata are a scheme and a mapper with which the fake client
// stores pools as metadata only, as the controller reads them, and no
// template kind.
func poolsAsMetadata(t *testing.T) (*runtime.Scheme, *meta.DefaultRESTMapper) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := workerclassv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	scheme.AddKnownTypeWithName(workerclassv1.PoolGroupVersionKind, &metav1.PartialObjectMetadata{})
	scheme.AddKnownTypeWithName(workerclassv1.PoolGroupVersionKind.GroupVersion().WithKind("KubernetesNodesList"), &metav1.PartialObjectMetadataList{})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(workerclassv1.PoolGroupVersionKind, meta.RESTScopeNamespace)
	return scheme, mapper
}

// Users are found by label through metadata-only lists; a user kind that
// is not installed (here KubeVirtMachineTemplate) counts as no users.
func TestListUsersToleratesMissingKinds(t *testing.T) {
	scheme, mapper := poolsAsMetadata(t)
	c := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(
		labelledPool("a", "p1", "gold"), labelledPool("b", "p2", "gold"), labelledPool("a", "p3", "silver"),
	).Build()
	r := &WorkerClassReconciler{Client: c, UserReader: c}
	users, err := r.listUsers(context.Background(), c, "gold")
	if err != nil {
		t.Fatalf("a missing kind must not fail the listing: %v", err)
	}
	if users.pools != 2 || users.templates != 0 || users.namespaces.Len() != 2 {
		t.Errorf("users = %+v, want the two gold pools in two namespaces", users)
	}
}

func TestSetUsersCountsWithoutNaming(t *testing.T) {
	users := classUsers{pools: 37, templates: 1, namespaces: sets.New("tenant-a", "tenant-b")}
	class := &workerclassv1.WorkerClass{}
	setUsers(class, users)
	if class.Status.PoolCount != 37 || class.Status.TemplateCount != 1 || class.Status.NamespaceCount != 2 {
		t.Errorf("counts %d/%d/%d", class.Status.PoolCount, class.Status.TemplateCount, class.Status.NamespaceCount)
	}
	if c := condition(class, workerclassv1.InUseCondition); c.Status != metav1.ConditionTrue || c.Message != "Used by 37 pool(s) and 1 template(s)" {
		t.Errorf("InUse = %+v", c)
	}
	if c := condition(class, workerclassv1.ReadyCondition); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}

	setUsers(class, classUsers{namespaces: sets.New[string]()})
	if class.Status.NamespaceCount != 0 || class.Status.PoolCount != 0 {
		t.Errorf("an unused class still lists users: %+v", class.Status)
	}
	if c := condition(class, workerclassv1.InUseCondition); c.Status != metav1.ConditionFalse || c.Reason != workerclassv1.NotInUseReason {
		t.Errorf("InUse = %+v", c)
	}
}

func TestClassOfUser(t *testing.T) {
	if got := classOfUser(context.Background(), labelledPool("a", "p", "gold")); len(got) != 1 || got[0].Name != "gold" {
		t.Errorf("requests %v", got)
	}
	var unlabelled client.Object = &unstructured.Unstructured{}
	if got := classOfUser(context.Background(), unlabelled); len(got) != 0 {
		t.Errorf("an unlabelled object maps to %v", got)
	}
}

func TestOnlyAClassLabelChangeOfAUserReconcilesClasses(t *testing.T) {
	gold, silver := labelledPool("a", "p", "gold"), labelledPool("a", "p", "silver")
	touched := gold.DeepCopy()
	touched.Annotations = map[string]string{"touched": "true"}
	touched.ResourceVersion = "2"
	for name, tc := range map[string]struct {
		old, new client.Object
		want     bool
	}{
		"another change": {gold, touched, false},
		"a new class":    {gold, silver, true},
		"a class added":  {&metav1.PartialObjectMetadata{}, gold, true},
	} {
		if got := classLabelChanged.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if !classLabelChanged.Create(event.CreateEvent{Object: gold}) || !classLabelChanged.Delete(event.DeleteEvent{Object: gold}) {
		t.Error("a user's creation and deletion change its class's counts")
	}
}

// countingReader counts the lists it serves.
type countingReader struct {
	client.Reader
	lists int
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists++
	return c.Reader.List(ctx, list, opts...)
}

// TestUsersAreListedLiveOnlyBeforeTheFinalizerGoes: counts come from the
// cache; the live reader is asked only when a class being deleted would
// lose its finalizer, and a user the cache has not seen yet keeps it.
func TestUsersAreListedLiveOnlyBeforeTheFinalizerGoes(t *testing.T) {
	scheme, mapper := poolsAsMetadata(t)
	mapper.Add(workerclassv1.GroupVersion.WithKind("WorkerClass"), meta.RESTScopeRoot)
	now := metav1.Now()
	class := func(name string, deleting bool) *workerclassv1.WorkerClass {
		c := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{workerclassv1.WorkerClassInUseFinalizer}}}
		if deleting {
			c.DeletionTimestamp = &now
		}
		return c
	}
	// The cache has seen one gold pool; live, a silver pool exists too.
	cached := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).
		WithStatusSubresource(&workerclassv1.WorkerClass{}).
		WithObjects(class("gold", false), class("silver", true), class("bronze", true), labelledPool("a", "p1", "gold")).Build()
	live := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).
		WithObjects(labelledPool("a", "p1", "gold"), labelledPool("a", "p2", "silver")).Build()}
	r := &WorkerClassReconciler{Client: cached, UserReader: live, Recorder: events.NewFakeRecorder(10)}
	reconcileClass := func(name string) *workerclassv1.WorkerClass {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := &workerclassv1.WorkerClass{}
		if err := cached.Get(context.Background(), client.ObjectKey{Name: name}, got); err != nil {
			if name == "bronze" {
				return nil
			}
			t.Fatalf("%s: %v", name, err)
		}
		return got
	}

	if got := reconcileClass("gold"); got.Status.PoolCount != 1 || live.lists != 0 {
		t.Errorf("gold: %d pools counted with %d live lists, want 1 from the cache", got.Status.PoolCount, live.lists)
	}
	got := reconcileClass("silver")
	if live.lists == 0 || got.Status.PoolCount != 1 || !controllerutil.ContainsFinalizer(got, workerclassv1.WorkerClassInUseFinalizer) {
		t.Errorf("silver: %d live lists, %d pools, finalizers %v: a user only the live list sees must keep the finalizer",
			live.lists, got.Status.PoolCount, got.Finalizers)
	}
	if got := reconcileClass("bronze"); got != nil && controllerutil.ContainsFinalizer(got, workerclassv1.WorkerClassInUseFinalizer) {
		t.Errorf("bronze: an unused class keeps its finalizer")
	}
}
