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
	"bytes"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/inlinekubeconfig"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// TestCachedSecretsKeepOnlyWhatTheControllerReads: of each Secret the
// cache lets in, the transform keeps the keys the controller reads, each
// up to the largest value it holds there, and names a value dropped for
// its size; a second transform changes nothing.
func TestCachedSecretsKeepOnlyWhatTheControllerReads(t *testing.T) {
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "uid"}}
	owned := []metav1.OwnerReference{*metav1.NewControllerRef(config, bootstrapv1.GroupVersion.WithKind("KairosConfig"))}
	record := map[string][]byte{tokenKey: []byte("abcdef.0123456789abcdef"), expirationKey: []byte("2026-12-07T10:00:00.123456789+01:00")}
	huge := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	for _, tc := range []struct {
		name     string
		secret   string
		owners   []metav1.OwnerReference
		data     map[string][]byte
		kept     []string
		tooLarge string
	}{
		{"the CA keeps its certificate, never its key", "c-ca", nil,
			map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")}, []string{"tls.crt"}, ""},
		{"a CA certificate over 64 KiB is dropped", "c-ca", nil,
			map[string][]byte{"tls.crt": huge(maxCACertificateBytes + 1), "tls.key": []byte("key")}, nil, "tls.crt"},
		{"the kubeconfig keeps its value", "c-kubeconfig", nil, map[string][]byte{"value": []byte("kubeconfig")}, []string{"value"}, ""},
		{"a kubeconfig over the inline limit is dropped", "c-kubeconfig", nil, map[string][]byte{"value": huge(inlinekubeconfig.MaxSize + 1)}, nil, "value"},
		{"a token record keeps its token and expiry", "w" + TokenSecretSuffix, owned, record, []string{tokenKey, expirationKey}, ""},
		{"a forged record keeps nothing extra", "w" + TokenSecretSuffix, owned,
			map[string][]byte{tokenKey: record[tokenKey], expirationKey: record[expirationKey], "stolen": []byte("another tenant's kubeconfig")},
			[]string{tokenKey, expirationKey}, ""},
		{"a record's oversized token is dropped", "w" + TokenSecretSuffix, owned,
			map[string][]byte{tokenKey: huge(24), expirationKey: record[expirationKey]}, []string{expirationKey}, tokenKey},
		{"a record's oversized expiry is dropped", "w" + TokenSecretSuffix, owned,
			map[string][]byte{tokenKey: record[tokenKey], expirationKey: huge(1 << 20)}, []string{tokenKey}, expirationKey},
		{"a record without a controller keeps nothing", "w" + TokenSecretSuffix, nil, record, nil, ""},
		{"bootstrap data keeps nothing", "w", owned, map[string][]byte{"value": []byte("#cloud-config"), "format": []byte("cloud-config")}, nil, ""},
		{"the service account keys keep nothing", "c-sa", nil, map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: tc.secret, OwnerReferences: tc.owners,
				Labels: map[string]string{clusterv1.ClusterNameLabel: "c"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
				Type: clusterv1.ClusterSecretType, Data: tc.data}
			out, err := stripUnreadSecretData(in.DeepCopy())
			g.Expect(err).NotTo(HaveOccurred())
			s := out.(*corev1.Secret)
			g.Expect(s.ManagedFields).To(BeEmpty())
			g.Expect(s.Data).To(HaveLen(len(tc.kept)))
			for _, k := range tc.kept {
				g.Expect(s.Data).To(HaveKeyWithValue(k, tc.data[k]))
			}
			g.Expect(s.Annotations[watchview.TooLargeAnnotation]).To(Equal(tc.tooLarge))
			again, err := stripUnreadSecretData(s.DeepCopy())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(Equal(s), "a second transform changes nothing")
		})
	}
}

// TestAForgedTokenRecordKeepsNothingExtraInTheCache: a tenant writes
// Secrets that look like token records (the name, the cluster label, a
// KairosConfig as controller) with extra keys, and one with a token far
// larger than a token: the manager's cache keeps only the token and its
// expiry of the first, nothing of the second, and reading the second
// says it is too large instead of that there is no token.
func TestAForgedTokenRecordKeepsNothingExtraInTheCache(t *testing.T) {
	cm := startIdleController(t)
	f := newFixture(t, readyCluster)
	g := f.g
	forge := func(configName string, data map[string][]byte) *bootstrapv1.KairosConfig {
		config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: configName}}
		g.Expect(mgmt.Client.Create(suiteCtx, config)).To(Succeed())
		record := tokenRecordSecret(config, f.cluster.Name, token{})
		record.Data = data
		g.Expect(mgmt.Client.Create(suiteCtx, record)).To(Succeed())
		return config
	}
	extra := forge("forged-extra", map[string][]byte{
		tokenKey: []byte("abcdef.0123456789abcdef"), expirationKey: []byte("2026-12-07T10:00:00Z"),
		"stolen": bytes.Repeat([]byte("k"), 512<<10), "note": []byte("another extra key"),
	})
	oversized := forge("forged-oversized", map[string][]byte{tokenKey: bytes.Repeat([]byte("t"), 900<<10)})

	cached := func(config *bootstrapv1.KairosConfig) func(g Gomega) *corev1.Secret {
		return func(g Gomega) *corev1.Secret {
			s := &corev1.Secret{}
			g.Expect(cm.reconciler.SecretCachingClient.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: tokenRecordName(config.Name)}, s)).To(Succeed())
			return s
		}
	}
	g.Eventually(cached(extra), eventually, 50*time.Millisecond).Should(HaveField("Data", Equal(map[string][]byte{
		tokenKey: []byte("abcdef.0123456789abcdef"), expirationKey: []byte("2026-12-07T10:00:00Z"),
	})))
	g.Eventually(cached(oversized), eventually, 50*time.Millisecond).Should(And(
		HaveField("Data", BeEmpty()),
		HaveField("Annotations", HaveKeyWithValue(watchview.TooLargeAnnotation, tokenKey)),
	))

	_, _, err := getTokenRecord(suiteCtx, cm.reconciler.SecretCachingClient, oversized)
	var tooLarge *watchview.TooLargeError
	g.Expect(errors.As(err, &tooLarge)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(Equal("the Secret forged-oversized-bootstrap-token holds a token larger than 23 bytes, more than any value it is read for: not read"))
}
