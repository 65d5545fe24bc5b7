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

package kairosconfig

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// TestRenderWaitsForTheInfrastructureName covers a Machine whose
// infrastructureRef has no name yet (the v1beta2 schema requires one, so
// only objects from elsewhere can get here): hostname and providerID are
// unknown, so nothing may be rendered. No client is touched before the wait.
func TestRenderWaitsForTheInfrastructureName(t *testing.T) {
	g := NewWithT(t)
	r := &Reconciler{TokenTTL: time.Hour, now: time.Now}
	s := &scope{
		config:  &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
		machine: &clusterv1.Machine{},
		cluster: &clusterv1.Cluster{
			Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}},
			Status: clusterv1.ClusterStatus{Initialization: clusterv1.ClusterInitializationStatus{
				InfrastructureProvisioned: ptr.To(true), ControlPlaneInitialized: ptr.To(true),
			}},
		},
	}
	res, err := r.reconcileBootstrapData(context.Background(), s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsZero()).To(BeTrue())
	c := conditions.Get(s.config, bootstrapv1.DataSecretAvailableCondition)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(bootstrapv1.WaitingForInfrastructureNameReason))
}

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		name, machine, image, match string
		wantMismatch, wantErr       bool
	}{
		{name: "exact: same patch", machine: "v1.35.6", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact)},
		{name: "exact: same patch without v prefix", machine: "1.35.6", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact)},
		{name: "exact: other patch", machine: "v1.35.5", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact), wantMismatch: true},
		{name: "exact: other minor", machine: "v1.36.6", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact), wantMismatch: true},
		{name: "minor: other patch", machine: "v1.35.1", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchMinor)},
		{name: "minor: other minor", machine: "v1.34.6", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchMinor), wantMismatch: true},
		{name: "minor is the default", machine: "v1.35.0", image: "v1.35.6", match: ""},
		{name: "unknown match", machine: "v1.35.6", image: "v1.35.6", match: "Fuzzy", wantErr: true},
		{name: "machine version unparsable", machine: "latest", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact), wantErr: true},
		{name: "image version unparsable", machine: "v1.35.6", image: "stable", match: string(workerclassv1.KubernetesVersionMatchExact), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			msg, err := checkVersion(tt.machine, imageVersion{Version: tt.image, Match: workerclassv1.KubernetesVersionMatch(tt.match), Source: "TestMachineTemplate t"})
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tt.wantMismatch {
				g.Expect(msg).To(ContainSubstring(vPrefixed(tt.machine)))
				g.Expect(msg).To(ContainSubstring(tt.image))
			} else {
				g.Expect(msg).To(BeEmpty())
			}
		})
	}
}

func TestTokenHelpers(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tok, err := generateToken(now, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tok.ID).To(HaveLen(6))
	g.Expect(tok.Secret).To(HaveLen(16))
	g.Expect(tok.Expiration).To(Equal(now.Add(time.Hour)))
	parsed, err := parseToken(tok.String())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed.ID).To(Equal(tok.ID))
	_, err = parseToken("nope")
	g.Expect(err).To(HaveOccurred())

	// Refresh once a third of the TTL has passed, never earlier.
	g.Expect(needsRefresh(now.Add(time.Hour), now, time.Hour)).To(BeFalse())
	g.Expect(needsRefresh(now.Add(41*time.Minute), now, time.Hour)).To(BeFalse())
	g.Expect(needsRefresh(now.Add(39*time.Minute), now, time.Hour)).To(BeTrue())
	g.Expect(refreshInterval(time.Hour)).To(Equal(20 * time.Minute))

	// Names stay deterministic and within the object name limit.
	g.Expect(tokenRecordName("worker-0")).To(Equal("worker-0-bootstrap-token"))
	long := make([]byte, 253)
	for i := range long {
		long[i] = 'a'
	}
	name := tokenRecordName(string(long))
	g.Expect(len(name)).To(BeNumerically("<=", 253))
	g.Expect(name).To(Equal(tokenRecordName(string(long))))
	g.Expect(name).To(HaveSuffix(TokenSecretSuffix))
}

// unreachableClusterCache is a ClusterCache whose workload cluster is not
// connected.
type unreachableClusterCache struct{ clustercache.ClusterCache }

func (unreachableClusterCache) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return nil, clustercache.ErrClusterNotConnected
}

// TestAnUnreachableWorkloadClusterIsAnError: a workload cluster the
// ClusterCache has not connected is a transient error the reconcile
// returns, so controller-runtime retries it with backoff; before the data
// exists the condition says what the config waits for.
func TestAnUnreachableWorkloadClusterIsAnError(t *testing.T) {
	g := NewWithT(t)
	s := &scope{config: &bootstrapv1.KairosConfig{}}
	res, err := workloadUnavailable(s, clustercache.ErrClusterNotConnected)
	g.Expect(err).To(MatchError(clustercache.ErrClusterNotConnected))
	g.Expect(res.IsZero()).To(BeTrue())
	g.Expect(conditions.GetReason(s.config, bootstrapv1.DataSecretAvailableCondition)).To(Equal(bootstrapv1.WaitingForWorkloadClusterReason))

	// Rendered data stays available while the token cannot be refreshed.
	s.config.Status.Initialization.DataSecretCreated = ptr.To(true)
	markAvailable(s.config)
	_, err = workloadUnavailable(s, clustercache.ErrClusterNotConnected)
	g.Expect(err).To(MatchError(clustercache.ErrClusterNotConnected))
	g.Expect(conditions.IsTrue(s.config, bootstrapv1.DataSecretAvailableCondition)).To(BeTrue())
}

// TestRevokingWhileTheWorkloadClusterIsUnreachable: our record of a live
// token stays and the error is returned, to be retried; an expired token
// is forgotten, since it can no longer be used.
func TestRevokingWhileTheWorkloadClusterIsUnreachable(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "worker-0", UID: "config-uid"}}
	live, err := generateToken(now, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	record := tokenRecordSecret(config, "tenant", live)
	record.UID = "record-uid"
	live.recordUID = record.UID
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(record).Build()
	r := &Reconciler{Client: c, ClusterCache: unreachableClusterCache{}, TokenTTL: time.Hour, now: func() time.Time { return now }, expect: newExpectations()}
	s := &scope{config: config, cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tenant"}}}

	g.Expect(r.revokeAndForget(context.Background(), s, live)).To(MatchError(clustercache.ErrClusterNotConnected))
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(record), &corev1.Secret{})).To(Succeed(), "the record of a live token stays")

	r.now = func() time.Time { return live.Expiration.Add(time.Second) }
	g.Expect(r.revokeAndForget(context.Background(), s, live)).To(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKeyFromObject(record), &corev1.Secret{}))).To(BeTrue(), "an expired token is forgotten")
}

// TestMetadataReaderReadsAnInfrastructureMachineAsMetadata: the
// infrastructure machine reaches Cluster API's contract lookup as its
// metadata alone, read as PartialObjectMetadata (which the manager's cache
// serves from a metadata informer), and everything else is read as asked.
func TestMetadataReaderReadsAnInfrastructureMachineAsMetadata(t *testing.T) {
	g := NewWithT(t)
	gvk := schema.GroupVersionKind{Group: "infrastructure.example.com", Version: "v1", Kind: "TestMachine"}
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(gvk)
	stored.SetNamespace("ns")
	stored.SetName("vm")
	stored.SetAnnotations(map[string]string{clusterv1.TemplateClonedFromNameAnnotation: "worker-template"})
	g.Expect(unstructured.SetNestedField(stored.Object, "large", "spec", "field")).To(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}
	var asked []string
	c := interceptor.NewClient(fake.NewClientBuilder().WithObjects(stored, secret).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			asked = append(asked, fmt.Sprintf("%T", obj))
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := metadataReader{c}

	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	g.Expect(r.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "vm"}, got)).To(Succeed())
	g.Expect(got.GetAnnotations()).To(Equal(stored.GetAnnotations()))
	g.Expect(got.GroupVersionKind()).To(Equal(gvk))
	g.Expect(got.Object).NotTo(HaveKey("spec"))
	g.Expect(r.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "s"}, &corev1.Secret{})).To(Succeed())
	g.Expect(asked).To(Equal([]string{"*v1.PartialObjectMetadata", "*v1.Secret"}))

	missing := &unstructured.Unstructured{}
	missing.SetGroupVersionKind(gvk)
	g.Expect(apierrors.IsNotFound(r.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "gone"}, missing))).To(BeTrue())
}
