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

package setup

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// Cluster API registers informer names process-wide; -count=N reruns need
// new ones.
var names atomic.Int32

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, names.Add(1)) }

func TestManagerCacheOptionsCacheOnlyClusterSecretsWithTheDataTheReconcilerReads(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(AddToScheme(scheme)).To(Succeed())
	opts := ManagerCacheOptions(scheme, uniqueName("kairos-cache-test"), "ns", time.Minute)
	g.Expect(opts.DefaultNamespaces).To(HaveKey("ns"))
	g.Expect(*opts.SyncPeriod).To(Equal(time.Minute))

	var secrets []ctrlcache.ByObject
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			secrets = append(secrets, by)
		}
	}
	g.Expect(secrets).To(HaveLen(1), "Secrets must be restricted, by one entry")
	g.Expect(secrets[0].Label.Matches(labels.Set{clusterv1.ClusterNameLabel: "c"})).To(BeTrue())
	g.Expect(secrets[0].Label.Matches(labels.Set{clusterv1.ClusterNameLabel: "c"})).To(BeTrue())
	g.Expect(secrets[0].Label.Matches(labels.Set{"other": "c"})).To(BeFalse())

	owned := []metav1.OwnerReference{*metav1.NewControllerRef(
		&bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "u"}}, bootstrapv1.GroupVersion.WithKind("KairosConfig"))}
	cluster := map[string]string{clusterv1.ClusterNameLabel: "c"}
	tests := []struct {
		name   string
		secret *corev1.Secret
		kept   []string
	}{
		{name: "the cluster CA keeps its certificate, never its key",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-ca", Labels: cluster}}, kept: []string{"tls.crt"}},
		{name: "the kubeconfig keeps its value",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-kubeconfig", Labels: cluster}}, kept: []string{"value"}},
		{name: "another cluster's CA name keeps nothing",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "d-ca", Labels: cluster}}},
		{name: "the service account keys are never cached",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-sa", Labels: cluster}}},
		{name: "the etcd CA is never cached",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-etcd", Labels: cluster}}},
		{name: "our token record keeps the keys the reconciler reads of it",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w-bootstrap-token", Labels: cluster, OwnerReferences: owned}},
			kept:   []string{"token", "expiration", "ended"}},
		{name: "a token-named Secret of someone else loses its data",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w-bootstrap-token", Labels: cluster}}},
		{name: "bootstrap data loses its data",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: cluster, OwnerReferences: owned}}},
		{name: "another provider's Secret loses its data",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vm-userdata", Labels: cluster}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tt.secret.Data = map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k"), "value": []byte("v"), "token-id": []byte("t"),
				"token": []byte("abcdef.0123456789abcdef"), "expiration": []byte("2026-12-07T10:00:00Z"), "ended": []byte("NodeJoined")}
			tt.secret.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
			out, err := secrets[0].Transform(tt.secret)
			g.Expect(err).NotTo(HaveOccurred())
			s := out.(*corev1.Secret)
			g.Expect(s.ManagedFields).To(BeEmpty())
			if len(tt.kept) == 0 {
				g.Expect(s.Data).To(BeNil())
				return
			}
			g.Expect(s.Data).To(HaveLen(len(tt.kept)))
			for _, k := range tt.kept {
				g.Expect(s.Data).To(HaveKey(k))
			}
		})
	}
}

func TestManagerClientOptionsReadSecretsDirectly(t *testing.T) {
	g := NewWithT(t)
	opts := ManagerClientOptions()
	g.Expect(opts.Cache).NotTo(BeNil())
	g.Expect(opts.Cache.DisableFor).To(ContainElement(BeAssignableToTypeOf(&corev1.Secret{})))
	g.Expect(opts.Cache.Unstructured).To(BeTrue(), "infrastructure objects and their templates are read from the cache")
}

func TestReconcilers(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(AddToScheme(scheme)).To(Succeed())
	// The manager is never started and maps kinds from the scheme: setup
	// must not need an API server.
	mapper := meta.NewDefaultRESTMapper(nil)
	for gvk := range scheme.AllKnownTypes() {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 scheme,
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  ManagerCacheOptions(scheme, uniqueName("kairos-setup-test"), "", time.Minute),
		Client:                 ManagerClientOptions(),
	})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(Reconcilers(context.Background(), mgr, Options{})).To(MatchError(ContainSubstring("ControllerName is required")))
	g.Expect(Reconcilers(context.Background(), mgr, Options{ControllerName: "x", TokenTTL: -time.Second})).To(MatchError(ContainSubstring("TokenTTL")))
	g.Expect(Reconcilers(context.Background(), mgr, Options{ControllerName: uniqueName("kairos-setup-test")})).To(Succeed())
	g.Expect(Webhooks(mgr)).To(Succeed())
}

func TestOptionDefaultsAreTheProductionDefaults(t *testing.T) {
	g := NewWithT(t)
	o := Options{}.withDefaults()
	g.Expect(o.ClusterCacheClientQPS).To(Equal(DefaultClusterCacheClientQPS))
	g.Expect(o.ClusterCacheClientBurst).To(Equal(DefaultClusterCacheClientBurst))
	g.Expect(o.ClusterCacheConcurrency).To(Equal(DefaultClusterCacheConcurrency))
	g.Expect(o.KairosConfigConcurrency).To(Equal(DefaultKairosConfigConcurrency))
	g.Expect(o.TokenTTL).To(BeNumerically(">", 0))
	// Explicit values are kept.
	o = Options{ClusterCacheClientQPS: 50, ClusterCacheClientBurst: 100, KairosConfigConcurrency: 3}.withDefaults()
	g.Expect(o.ClusterCacheClientQPS).To(Equal(float32(50)))
	g.Expect(o.ClusterCacheClientBurst).To(Equal(100))
	g.Expect(o.KairosConfigConcurrency).To(Equal(3))
}

func TestWorkloadNodesAreCachedWithOnlyTheirNameAndProviderID(t *testing.T) {
	g := NewWithT(t)
	opts := ClusterCacheCacheOptions()
	g.Expect(opts.DefaultTransform).NotTo(BeNil(), "managedFields are stripped from everything")
	var nodes []ctrlcache.ByObject
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, by)
		}
	}
	g.Expect(nodes).To(HaveLen(1))
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "vm-1", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
			Annotations:   map[string]string{"big": "value"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec:   corev1.NodeSpec{ProviderID: "kubevirt://vm-1", PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"registry/image:tag"}}}},
	}
	out, err := nodes[0].Transform(node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-1", ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.NodeSpec{ProviderID: "kubevirt://vm-1"},
	}))
}

func TestValidateTokenTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl time.Duration
		ok  bool
	}{
		{time.Hour, true},
		{time.Minute, true},
		{24 * time.Hour, true},
		{59 * time.Second, false},
		{0, false},
		{-time.Hour, false},
		{24*time.Hour + time.Second, false},
		{30 * 24 * time.Hour, false},
	} {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			err := ValidateTokenTTL(tc.ttl)
			if tc.ok {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError("--bootstrap-token-ttl must be between 1m0s and 24h0m0s, got " + tc.ttl.String()))
		})
	}
}

func TestValidateTokenKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		keepAlive, ttl time.Duration
		ok             bool
	}{
		{24 * time.Hour, time.Hour, true},
		{time.Hour, time.Hour, true},
		{7 * 24 * time.Hour, time.Hour, true},
		{59 * time.Minute, time.Hour, false},
		{0, time.Hour, false},
		{7*24*time.Hour + time.Second, time.Hour, false},
	} {
		t.Run(tc.keepAlive.String(), func(t *testing.T) {
			err := ValidateTokenKeepAlive(tc.keepAlive, tc.ttl)
			if tc.ok {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError("--bootstrap-token-keep-alive must be between --bootstrap-token-ttl (1h0m0s) and 168h0m0s, got " + tc.keepAlive.String()))
		})
	}
}

// TestCachedMachinesAreCutDown: the manager caches Machines through
// watchview.CachedMachine, which keeps the nodeRef the reconciler revokes
// the token on (its own test pins what is kept).
func TestCachedMachinesAreCutDown(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(AddToScheme(scheme)).To(Succeed())
	opts := ManagerCacheOptions(scheme, uniqueName("kairos-cache-test"), "", time.Minute)
	var transforms []uintptr
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*clusterv1.Machine); ok {
			transforms = append(transforms, reflect.ValueOf(by.Transform).Pointer())
		}
	}
	g.Expect(transforms).To(ConsistOf(reflect.ValueOf(watchview.CachedMachine).Pointer()))
}
