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

package ownwrites

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestVersionsTellAStaleCacheApart(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	for _, tt := range []struct {
		name    string
		before  string
		written []string
		cached  string
		behind  bool
	}{
		{"the version a write replaced is behind", "1", []string{"2"}, "1", true},
		{"a version between two writes of one reconcile is behind", "1", []string{"2", "3"}, "2", true},
		{"the last write's version is current", "1", []string{"2", "3"}, "3", false},
		{"a version after our writes (someone else's) is current", "1", []string{"2"}, "7", false},
		{"a write that changed nothing leaves its version current", "1", []string{"1"}, "1", false},
		{"a reconcile without writes records nothing", "1", nil, "1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v := New()
			v.Wrote(key, tt.before, tt.written)
			g.Expect(v.CacheBehind(key, tt.cached)).To(Equal(tt.behind))
			if !tt.behind {
				g.Expect(v.stale).To(BeEmpty(), "a current cache ends the record")
			}
		})
	}

	t.Run("once the cache moved on, the record is dropped", func(t *testing.T) {
		g := NewWithT(t)
		v := New()
		v.Wrote(key, "1", []string{"2"})
		g.Expect(v.CacheBehind(key, "2")).To(BeFalse())
		g.Expect(v.CacheBehind(key, "1")).To(BeFalse(), "a version seen after the cache caught up")
	})
	t.Run("an object that is gone is forgotten", func(t *testing.T) {
		g := NewWithT(t)
		v := New()
		v.Wrote(key, "1", []string{"2"})
		v.Forget(key)
		g.Expect(v.CacheBehind(key, "1")).To(BeFalse())
	})
	t.Run("a nil record treats every version as current", func(t *testing.T) {
		var v *Versions
		v.Wrote(key, "1", []string{"2"})
		v.Forget(key)
		NewWithT(t).Expect(v.CacheBehind(key, "1")).To(BeFalse())
	})
}

func TestRecorderNotesTheVersionOfEveryWrite(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).WithStatusSubresource(pod).Build()
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())

	r := NewRecorder(c)
	base := pod.DeepCopy()
	pod.Labels = map[string]string{"a": "b"}
	g.Expect(r.Patch(ctx, pod, client.MergeFrom(base))).To(Succeed())
	afterPatch := pod.ResourceVersion
	pod.Status.Message = "m"
	g.Expect(r.Status().Update(ctx, pod)).To(Succeed())
	afterStatus := pod.ResourceVersion
	pod.Annotations = map[string]string{"x": "y"}
	g.Expect(r.Update(ctx, pod)).To(Succeed())
	afterUpdate := pod.ResourceVersion
	base = pod.DeepCopy()
	pod.Status.Message = "n"
	g.Expect(r.Status().Patch(ctx, pod, client.MergeFrom(base))).To(Succeed())
	g.Expect(r.Written()).To(Equal([]string{afterPatch, afterStatus, afterUpdate, pod.ResourceVersion}))

	stale := pod.DeepCopy()
	stale.ResourceVersion = afterPatch
	g.Expect(r.Update(ctx, stale)).NotTo(Succeed(), "a conflict")
	g.Expect(r.Written()).To(HaveLen(4), "a failed write records nothing")
}

func TestChildrenRememberTheLastWriteUntilSeen(t *testing.T) {
	g := NewWithT(t)
	owner := types.NamespacedName{Namespace: "ns", Name: "m"}
	var c Children
	g.Expect(c.Pending(owner, "vm")).To(BeFalse(), "the zero value remembers nothing")
	c.Wrote(owner, "vm")
	g.Expect(c.Pending(owner, "vm")).To(BeTrue())
	g.Expect(c.Pending(owner, "other")).To(BeFalse(), "another child was not written")
	g.Expect(c.Pending(types.NamespacedName{Namespace: "ns", Name: "n"}, "vm")).To(BeFalse(), "another owner's record")
	c.Wrote(owner, "other")
	g.Expect(c.Pending(owner, "vm")).To(BeFalse(), "only the last write is remembered")
	c.Seen(owner)
	g.Expect(c.Pending(owner, "other")).To(BeFalse())
}

// frozenReads answers every Get with the object as it was when it was
// made, as a cache that has seen none of the writes since.
type frozenReads struct {
	client.Client
	seen *corev1.Pod
}

func (f frozenReads) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	f.seen.DeepCopyInto(obj.(*corev1.Pod))
	return nil
}

func TestRecorderReadsItsOwnWrites(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(corev1.AddToScheme(scheme)).To(Succeed())
	setup := func(g Gomega) (client.Client, *corev1.Pod) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).WithStatusSubresource(pod).Build()
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		return c, pod
	}

	t.Run("a cache behind the writes reads as the last write left the object", func(t *testing.T) {
		g := NewWithT(t)
		c, pod := setup(g)
		r := NewRecorder(frozenReads{Client: c, seen: pod.DeepCopy()})
		base := pod.DeepCopy()
		pod.Finalizers = []string{"f"}
		g.Expect(r.Patch(ctx, pod, client.MergeFrom(base))).To(Succeed())
		base = pod.DeepCopy()
		pod.Status.Message = "m"
		g.Expect(r.Status().Patch(ctx, pod, client.MergeFrom(base))).To(Succeed())

		got := &corev1.Pod{}
		g.Expect(r.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got.ResourceVersion).To(Equal(pod.ResourceVersion))
		g.Expect(got.Finalizers).To(Equal([]string{"f"}))
		g.Expect(got.Status.Message).To(Equal("m"))

		// A patch with an optimistic lock against what Get returned goes
		// through: it is the server's current version.
		base = got.DeepCopy()
		got.Status.Reason = "r"
		g.Expect(r.Status().Patch(ctx, got, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	})

	t.Run("a version written by someone else is read as the cache has it", func(t *testing.T) {
		g := NewWithT(t)
		c, pod := setup(g)
		r := NewRecorder(c)
		base := pod.DeepCopy()
		pod.Finalizers = []string{"f"}
		g.Expect(r.Patch(ctx, pod, client.MergeFrom(base))).To(Succeed())
		theirs := pod.DeepCopy()
		theirs.Labels = map[string]string{"by": "them"}
		g.Expect(c.Update(ctx, theirs)).To(Succeed())

		got := &corev1.Pod{}
		g.Expect(r.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got.ResourceVersion).To(Equal(theirs.ResourceVersion))
		g.Expect(got.Labels).To(HaveKeyWithValue("by", "them"))
	})

	t.Run("an object the recorder did not write is read as the cache has it", func(t *testing.T) {
		g := NewWithT(t)
		c, pod := setup(g)
		seen := pod.DeepCopy()
		r := NewRecorder(frozenReads{Client: c, seen: seen})
		got := &corev1.Pod{}
		g.Expect(r.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got).To(Equal(seen))
	})
}
