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

package inlinekubeconfig_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/internal/inlinekubeconfig"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// TestKubeconfigSecretPolicy feeds the corpus to the admission policy on a
// real kube-apiserver as the value of a <cluster>-kubeconfig Secret and
// checks each verdict; the message never echoes the value. It then checks
// what the policy leaves alone (other Secrets, a kubeconfig Cluster API
// writes, a stored value an UPDATE keeps) and what it catches beside data
// (stringData, oversized values).
func TestKubeconfigSecretPolicy(t *testing.T) {
	SetDefaultEventuallyTimeout(time.Minute)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	g := NewWithT(t)
	ctx := context.Background()
	env, err := envtest.Start(ctx, envtest.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	kubeconfigSecret := func(name string, value []byte) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name,
				Labels: map[string]string{clusterv1.ClusterNameLabel: strings.TrimSuffix(name, "-kubeconfig")}},
			Type: clusterv1.ClusterSecretType,
			Data: map[string][]byte{secret.KubeconfigDataName: value},
		}
	}
	tokenFile := []byte("users: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n")

	// Stored before the policy exists, as by a tenant before the upgrade
	// that brought it.
	stored := kubeconfigSecret("stored-kubeconfig", tokenFile)
	stored.Finalizers = []string{"example.com/keep"}
	g.Expect(c.Create(ctx, stored)).To(Succeed())

	g.Expect(env.CreateManifests(ctx, []string{envtest.RepoRoot() + "/" + policyPath})).To(Succeed())
	g.Eventually(func() error {
		return c.Create(ctx, kubeconfigSecret("probe-kubeconfig", tokenFile), client.DryRunAll)
	}).Should(MatchError(ContainSubstring("Forbidden")), "the policy is in force")

	for _, e := range corpus(t) {
		err := c.Create(ctx, kubeconfigSecret("demo-kubeconfig", e.data(t)), client.DryRunAll)
		verdict := admitted
		if err != nil {
			verdict = refused
			g.Expect(err.Error()).To(ContainSubstring("data.value"), e.Name)
			for _, line := range strings.Split(string(e.data(t)), "\n") {
				if len(line) > 8 {
					g.Expect(err.Error()).NotTo(ContainSubstring(line), "%s: the refusal echoes the value", e.Name)
				}
			}
		}
		g.Expect(verdict).To(Equal(e.Policy), "%s: %v", e.Name, err)
	}

	// stringData is data by the time admission runs.
	viaStringData := kubeconfigSecret("string-kubeconfig", nil)
	viaStringData.Data = nil
	viaStringData.StringData = map[string]string{secret.KubeconfigDataName: string(tokenFile)}
	g.Expect(c.Create(ctx, viaStringData, client.DryRunAll)).To(MatchError(ContainSubstring("Forbidden")))

	// Only the value of a Secret named like a kubeconfig is checked.
	other := kubeconfigSecret("demo-ca", tokenFile)
	g.Expect(c.Create(ctx, other, client.DryRunAll)).To(Succeed())
	otherKey := kubeconfigSecret("demo-kubeconfig", nil)
	otherKey.Data = map[string][]byte{"notes": tokenFile}
	g.Expect(c.Create(ctx, otherKey, client.DryRunAll)).To(Succeed())

	// A kubeconfig as Cluster API writes it passes, up to the size limit.
	capi := clusterAPIKubeconfig(t, "demo")
	g.Expect(inlinekubeconfig.Check(capi)).To(Succeed())
	g.Expect(c.Create(ctx, kubeconfigSecret("demo-kubeconfig", capi), client.DryRunAll)).To(Succeed())
	padded := append(append([]byte{}, capi...), []byte("#"+strings.Repeat(" ", inlinekubeconfig.MaxSize-len(capi)-2)+"\n")...)
	g.Expect(padded).To(HaveLen(inlinekubeconfig.MaxSize))
	g.Expect(inlinekubeconfig.Check(padded)).To(Succeed())
	g.Expect(c.Create(ctx, kubeconfigSecret("demo-kubeconfig", padded), client.DryRunAll)).To(Succeed(),
		"the checks stay within the apiserver's cost limit at the size limit")
	g.Expect(c.Create(ctx, kubeconfigSecret("demo-kubeconfig", append(padded, '\n')), client.DryRunAll)).
		To(MatchError(ContainSubstring("data.value: Too long")))

	// A stored value is not checked again: its finalizer goes and labels
	// change; a new value naming a file does not pass.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(stored), stored)).To(Succeed())
	replaced := stored.DeepCopy()
	replaced.Data[secret.KubeconfigDataName] = []byte("users: [{name: u, user: {client-key: /k}}]")
	g.Expect(c.Update(ctx, replaced, client.DryRunAll)).To(MatchError(ContainSubstring("Forbidden")))
	stored.Labels["changed"] = "true"
	g.Expect(c.Update(ctx, stored)).To(Succeed())
	stored.Finalizers = nil
	g.Expect(c.Update(ctx, stored)).To(Succeed())
}

// clusterAPIKubeconfig is a kubeconfig as Cluster API's kubeconfig
// package writes it for a cluster, with a fresh CA.
func clusterAPIKubeconfig(t *testing.T, cluster string) []byte {
	t.Helper()
	key, err := certs.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kubernetes"}, key)
	if err != nil {
		t.Fatal(err)
	}
	config, err := kubeconfig.New(cluster, "https://"+cluster+".tenant.svc:6443", ca, key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := clientcmd.Write(*config)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
