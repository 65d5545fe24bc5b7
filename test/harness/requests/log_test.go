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

package requests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestLogRecordsManagementRequests sends requests through a wrapped
// rest.Config to a server that answers every one with an empty object.
func TestLogRecordsManagementRequests(t *testing.T) {
	g := NewWithT(t)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`))
			return
		}
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{}}`))
	}))
	t.Cleanup(server.Close)

	managerLog := &Log{}
	cs, err := kubernetes.NewForConfig(managerLog.WrapConfig(&rest.Config{Host: server.URL}))
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "created"}}
	_, _ = cs.CoreV1().Secrets("ns").Create(ctx, secret, metav1.CreateOptions{})
	_, _ = cs.CoreV1().Secrets("ns").Patch(ctx, "patched", types.MergePatchType, []byte(`{"data":{}}`), metav1.PatchOptions{})
	_, _ = cs.CoreV1().Secrets("ns").List(ctx, metav1.ListOptions{})
	w, err := cs.CoreV1().Secrets("ns").Watch(ctx, metav1.ListOptions{})
	if err == nil {
		w.Stop()
	}

	// A request whose context carries a Log goes there, not to the
	// config's.
	reconcileLog := &Log{}
	_, _ = cs.CoreV1().Secrets("ns").Get(reconcileLog.Into(ctx), "read", metav1.GetOptions{})

	g.Expect(managerLog.Strings(nil)).To(Equal([]string{
		"management create secrets ns/created",
		"management patch secrets ns/patched",
		"management list secrets ns/",
	}), "a create is named from its body; watches are not logged")
	g.Expect(managerLog.Requests(Writes)[1].Body).To(Equal(`{"data":{}}`))
	g.Expect(reconcileLog.Strings(nil)).To(Equal([]string{"management get secrets ns/read"}))

	writesOnly := &Log{Keep: Writes}
	// JSON, as for custom resources.
	jsonConfig := &rest.Config{Host: server.URL, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeJSON}}
	cs, err = kubernetes.NewForConfig(writesOnly.WrapConfig(jsonConfig))
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = cs.CoreV1().Secrets("ns").Get(ctx, "read", metav1.GetOptions{})
	_ = cs.CoreV1().Secrets("ns").Delete(ctx, "deleted", metav1.DeleteOptions{})
	_, _ = cs.CoreV1().Secrets("ns").Create(ctx, secret, metav1.CreateOptions{})
	g.Expect(writesOnly.Strings(nil)).To(Equal([]string{"management delete secrets ns/deleted", "management create secrets ns/created"}))
	g.Expect(writesOnly.Requests(func(r Request) bool { return r.Failed })).To(HaveLen(1), "the delete was refused")
	g.Expect(managerLog.Requests(func(r Request) bool { return r.Failed })).To(BeEmpty())
}

// workloadClientCache hands out one client, as a ClusterCache would.
type workloadClientCache struct {
	clustercache.ClusterCache
	client client.Client
}

func (c workloadClientCache) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return c.client, nil
}

// TestLogRecordsWorkloadRequests logs a workload client's writes and its
// reads of uncached kinds, on contexts that carry a Log.
func TestLogRecordsWorkloadRequests(t *testing.T) {
	g := NewWithT(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef"}}
	cc := ClusterCache{
		ClusterCache: workloadClientCache{client: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node).Build()},
		Uncached:     []client.Object{&corev1.Secret{}},
	}
	log := &Log{}
	ctx := log.Into(context.Background())
	remote, err := cc.GetClient(ctx, client.ObjectKey{Namespace: "ns", Name: "cluster"})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(remote.Create(ctx, token)).To(Succeed())
	g.Expect(remote.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{})).To(Succeed())
	g.Expect(remote.Get(ctx, client.ObjectKeyFromObject(node), &corev1.Node{})).To(Succeed())
	g.Expect(remote.Patch(ctx, token, client.MergeFrom(token.DeepCopy()))).To(Succeed())
	g.Expect(remote.Update(ctx, token)).To(Succeed())
	g.Expect(remote.Delete(context.Background(), node)).To(Succeed())
	g.Expect(remote.Delete(ctx, token)).To(Succeed())
	g.Expect(remote.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{})).NotTo(Succeed())

	g.Expect(log.Strings(nil)).To(Equal([]string{
		"workload create secrets kube-system/bootstrap-token-abcdef",
		"workload get secrets kube-system/bootstrap-token-abcdef",
		"workload patch secrets kube-system/bootstrap-token-abcdef",
		"workload update secrets kube-system/bootstrap-token-abcdef",
		"workload delete secrets kube-system/bootstrap-token-abcdef",
		"workload get secrets kube-system/bootstrap-token-abcdef",
	}), "a cached read and a request on a context without a Log are not logged")
	g.Expect(log.Requests(func(r Request) bool { return r.Failed })).To(ConsistOf(HaveField("Verb", "get")), "the read after the delete failed")
}
