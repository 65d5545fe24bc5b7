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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestControllerManagerCollectsDependents proves the management helper's
// garbage collector removes an object whose controller owner is deleted,
// which envtest alone never does.
func TestControllerManagerCollectsDependents(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := Start(ctx, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	kcm, err := env.StartControllerManager(ManagementControllers...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(kcm.Stop)

	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "owner"}}
	g.Expect(env.Client.Create(ctx, owner)).To(Succeed())
	dependent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: metav1.NamespaceDefault, Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}},
	}}
	g.Expect(env.Client.Create(ctx, dependent)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, owner)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.Secret{}))
	}, time.Minute, 100*time.Millisecond).Should(BeTrue(), "the garbage collector did not delete the dependent; log:\n%s", kcm.Log())
}

// TestControllerManagerSignsClusterInfoAndCleansTokens proves the workload
// helper signs cluster-info for a new signing token, as kubeadm discovery
// needs, and removes an expired token.
func TestControllerManagerSignsClusterInfoAndCleansTokens(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w, err := StartWorkload()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = w.Stop() })
	g.Expect(w.SeedKubeadmObjects(ctx, KubeadmSeed{KubernetesVersion: "v1.36.3", ClusterName: "signed"})).To(Succeed())
	kcm, err := w.StartControllerManager(WorkloadControllers...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(kcm.Stop)

	live := bootstrapTokenSecret("abcdef", "0123456789abcdef", time.Now().Add(time.Hour))
	expired := bootstrapTokenSecret("zyxwvu", "fedcba9876543210", time.Now().Add(-time.Minute))
	g.Expect(w.Client.Create(ctx, live)).To(Succeed())
	g.Expect(w.Client.Create(ctx, expired)).To(Succeed())

	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(w.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm)).To(Succeed())
		sig, ok := cm.Data[bootstrapapi.JWSSignatureKeyPrefix+"abcdef"]
		g.Expect(ok).To(BeTrue(), "cluster-info is not signed for the live token")
		g.Expect(jws.DetachedTokenIsValid(sig, cm.Data[bootstrapapi.KubeConfigKey], "abcdef", "0123456789abcdef")).To(BeTrue())
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "log:\n%s", kcm.Log())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(w.Client.Get(ctx, client.ObjectKeyFromObject(expired), &corev1.Secret{}))
	}, time.Minute, 100*time.Millisecond).Should(BeTrue(), "the token cleaner did not remove the expired token; log:\n%s", kcm.Log())
}

func bootstrapTokenSecret(id, secret string, expires time.Time) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			bootstrapapi.BootstrapTokenIDKey:               []byte(id),
			bootstrapapi.BootstrapTokenSecretKey:           []byte(secret),
			bootstrapapi.BootstrapTokenExpirationKey:       []byte(expires.UTC().Format(time.RFC3339)),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
			bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
			bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(NodeBootstrapTokenGroup),
		},
	}
}
