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

package envtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRestartAPIServerKeepsDataAndClients: a killed and restarted apiserver
// is unreachable while down, then serves the same data on the same address
// to the same clients, twice in a row; Stop stops the replacement.
func TestRestartAPIServerKeepsDataAndClients(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w, err := StartWorkload()
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = w.Stop()
		}
	})
	kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kept"}, Data: map[string]string{"k": "v"}}
	g.Expect(w.Client.Create(ctx, kept)).To(Succeed())

	for range 2 {
		down := make(chan error, 1)
		go func() { down <- w.RestartAPIServer(ctx, 2*time.Second) }()
		g.Eventually(func() error {
			return w.Client.Get(ctx, client.ObjectKeyFromObject(kept), &corev1.ConfigMap{})
		}, time.Minute, 50*time.Millisecond).ShouldNot(Succeed(), func() string {
			select {
			case err := <-down:
				return fmt.Sprintf("the apiserver never went down; the restart returned %v", err)
			default:
				return "the apiserver never went down"
			}
		})
		g.Expect(<-down).To(Succeed())
		got := &corev1.ConfigMap{}
		g.Expect(w.Client.Get(ctx, client.ObjectKeyFromObject(kept), got)).To(Succeed())
		g.Expect(got.Data).To(Equal(kept.Data))
	}
	_, _, err = findAPIServer(w.Endpoint[len(w.Host())+1:])
	g.Expect(err).NotTo(HaveOccurred())
	stopped = true
	g.Expect(w.Stop()).To(Succeed())
	_, _, err = findAPIServer(w.Endpoint[len(w.Host())+1:])
	g.Expect(err).To(HaveOccurred(), "the restarted apiserver outlived Stop")
}
