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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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

// Users are found by label through metadata-only lists; a user kind that
// is not installed (here KubeVirtMachineTemplate) counts as no users.
func TestListUsersToleratesMissingKinds(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := workerclassv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The fake client stores pools as metadata only, as the controller
	// reads them.
	scheme.AddKnownTypeWithName(workerclassv1.PoolGroupVersionKind, &metav1.PartialObjectMetadata{})
	scheme.AddKnownTypeWithName(workerclassv1.PoolGroupVersionKind.GroupVersion().WithKind("KubernetesNodesList"), &metav1.PartialObjectMetadataList{})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(workerclassv1.PoolGroupVersionKind, meta.RESTScopeNamespace)
	c := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(
		labelledPool("a", "p1", "gold"), labelledPool("b", "p2", "gold"), labelledPool("a", "p3", "silver"),
	).Build()
	r := &WorkerClassReconciler{Client: c, UserReader: c}
	users, err := r.listUsers(context.Background(), "gold")
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
