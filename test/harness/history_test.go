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
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// events records what Watch reported, as "<type> <name>".
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) observe(event watch.EventType, o client.Object) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, fmt.Sprintf("%s %s", event, o.GetName()))
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

func secret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
}

func TestWatchReportsWhatExistsThenEachChange(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := fake.NewClientBuilder().WithObjects(secret("first"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "elsewhere"}}).Build()
	seen := &events{}
	done := Watch(ctx, c, &corev1.SecretList{}, seen.observe, client.InNamespace("ns"))
	defer func() { cancel(); <-done }()

	g.Eventually(seen.list).Should(Equal([]string{"ADDED first"}))
	g.Expect(c.Create(ctx, secret("second"))).To(Succeed())
	g.Eventually(seen.list).Should(Equal([]string{"ADDED first", "ADDED second"}))
	g.Expect(c.Delete(ctx, secret("first"))).To(Succeed())
	g.Eventually(seen.list).Should(Equal([]string{"ADDED first", "ADDED second", "DELETED first"}))
}

func TestRelistedReportsTheObjectsGoneMeanwhileAsDeleted(t *testing.T) {
	g := NewWithT(t)
	seen := &events{}
	known := map[types.UID]client.Object{"gone": secret("gone"), "kept": secret("kept")}
	listed := &corev1.SecretList{Items: []corev1.Secret{*secret("kept"), *secret("new")}}

	current := relisted(known, listed, seen.observe)

	g.Expect(seen.list()).To(ConsistOf("DELETED gone", "MODIFIED kept", "ADDED new"))
	g.Expect(seen.list()[0]).To(Equal("DELETED gone"), "what is gone is reported first")
	g.Expect(current).To(HaveLen(2))
	g.Expect(current).To(HaveKey(types.UID("kept")))
	g.Expect(current).To(HaveKey(types.UID("new")))
}
