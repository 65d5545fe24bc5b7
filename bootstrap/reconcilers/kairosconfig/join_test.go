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
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/utils/ptr"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/cloudconfig"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// TestKubeadmJoinDryRunWithTheRenderedConfiguration runs a real kubeadm
// join --dry-run with the JoinConfiguration the controller rendered,
// against the workload apiserver, and then uses the bootstrap kubeconfig it
// wrote to create a CertificateSigningRequest, as a kubelet's TLS bootstrap
// does. That proves token, CA pin and endpoint together. kubeadm's dry run
// quietly substitutes fake objects when a real read fails, so its exit
// code alone proves little: each broken variant must fail at kubeadm or at
// the CSR.
func TestKubeadmJoinDryRunWithTheRenderedConfiguration(t *testing.T) {
	bin, err := envtest.KubeadmBinary()
	if err != nil {
		t.Fatal(err)
	}
	// A long TTL: the controller must not touch the token during the runs.
	startController(t, time.Hour)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "dry-run-vm"})
	data := f.waitForData(w)
	tok, found := f.storedToken(w)
	g.Expect(found).To(BeTrue())
	// No controller-manager runs here: sign cluster-info for the token as
	// its bootstrapsigner would.
	g.Expect(workload.SignClusterInfo(suiteCtx, tok.ID)).To(Succeed())

	rendered := joinConfigurationFrom(g, data.Data["value"])
	dir := t.TempDir()

	res, err := envtest.KubeadmJoinDryRun(suiteCtx, bin, rendered, dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Err).NotTo(HaveOccurred(), res.Output)
	g.Expect(res.BootstrapKubeconfig).NotTo(BeEmpty(), "kubeadm wrote no bootstrap-kubelet.conf:\n%s", res.Output)
	g.Expect(res.Output).To(ContainSubstring("--provider-id=kubevirt://dry-run-vm"))
	g.Expect(res.Output).To(ContainSubstring("node.cluster.x-k8s.io/uninitialized:NoSchedule"))
	csr, err := envtest.CreateNodeCSR(suiteCtx, res.BootstrapKubeconfig, "dry-run-vm")
	g.Expect(err).NotTo(HaveOccurred(), "the credentials kubeadm wrote must work for real")
	g.Expect(csr.Spec.Username).To(Equal("system:bootstrap:" + tok.ID))
	g.Expect(csr.Spec.Groups).To(ContainElement(envtest.NodeBootstrapTokenGroup))

	// An expired token: create one by hand (the controller would refresh
	// its own), sign cluster-info for it, and join with it.
	expired := unmanagedToken(g, time.Now().Add(-time.Minute))
	g.Expect(workload.SignClusterInfo(suiteCtx, expired.ID)).To(Succeed())

	otherCA := strings.Repeat("ab", 32)
	variants := map[string][]byte{
		"wrong CA hash":  []byte(replaceCAHash(g, string(rendered), "sha256:"+otherCA)),
		"wrong token":    []byte(strings.Replace(string(rendered), tok.String(), bootstraputil.TokenFromIDAndSecret(tok.ID, "0000000000000000"), 1)),
		"expired token":  []byte(strings.Replace(string(rendered), tok.String(), expired.String(), 1)),
		"wrong endpoint": []byte(strings.ReplaceAll(string(rendered), workload.Endpoint, "127.0.0.1:1")),
	}
	for name, config := range variants {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(string(config)).NotTo(Equal(string(rendered)), "the variant must differ")
			res, err := envtest.KubeadmJoinDryRun(suiteCtx, bin, config, dir)
			g.Expect(err).NotTo(HaveOccurred())
			if res.Err != nil || len(res.BootstrapKubeconfig) == 0 {
				return // kubeadm refused to join
			}
			_, err = envtest.CreateNodeCSR(suiteCtx, res.BootstrapKubeconfig, "dry-run-vm")
			g.Expect(err).To(HaveOccurred(), "kubeadm exited 0 (%s) and its credentials still worked", name)
		})
	}
}

// TestRevokedTokenEndsTheJoinAttempt is what a node whose ephemeral disk
// was reset after its token was revoked runs into: the token and its
// cluster-info signature are gone, so discovery can never succeed. kubeadm
// gives up once the discovery timeout passes instead of retrying forever;
// the node stays unregistered (NotReady) and MachineHealthCheck replaces
// it (docs/bootstrap.md).
func TestRevokedTokenEndsTheJoinAttempt(t *testing.T) {
	bin, err := envtest.KubeadmBinary()
	if err != nil {
		t.Fatal(err)
	}
	startController(t, time.Hour)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "revoked-vm", spec: bootstrapv1.KairosConfigSpec{
		JoinTimeouts: bootstrapv1.JoinTimeouts{DiscoverySeconds: ptr.To[int32](3)},
	}})
	data := f.waitForData(w)
	tok, _ := f.storedToken(w)
	g.Expect(workload.SignClusterInfo(suiteCtx, tok.ID)).To(Succeed())

	// The node joins (the Node appears), the token is revoked.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "revoked-vm"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://revoked-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })
	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, eventually, 100*time.Millisecond).Should(BeTrue())
	// The bootstrapsigner drops the signature of a deleted token.
	g.Expect(workload.UnsignClusterInfo(suiteCtx, tok.ID)).To(Succeed())

	// The disk is reset and the same bootstrap data runs again.
	start := time.Now()
	res, err := envtest.KubeadmJoinDryRun(suiteCtx, bin, joinConfigurationFrom(g, data.Data["value"]), t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Err).To(HaveOccurred(), "a join with a revoked token must fail:\n%s", res.Output)
	g.Expect(time.Since(start)).To(BeNumerically("<", 90*time.Second), "kubeadm must give up after the discovery timeout")
	g.Expect(res.BootstrapKubeconfig).To(BeEmpty())
}

// joinConfigurationFrom extracts the JoinConfiguration file of a Stages
// rendering.
func joinConfigurationFrom(g Gomega, value []byte) []byte {
	var doc struct {
		Stages map[string][]struct {
			Name  string `yaml:"name"`
			Files []struct {
				Path    string `yaml:"path"`
				Content string `yaml:"content"`
			} `yaml:"files"`
		} `yaml:"stages"`
	}
	g.Expect(yaml.Unmarshal(value, &doc)).To(Succeed())
	for _, step := range doc.Stages["network"] {
		if step.Name == cloudconfig.StageWriteJoinConfig {
			g.Expect(step.Files).To(HaveLen(1))
			g.Expect(step.Files[0].Path).To(Equal(cloudconfig.JoinConfigurationPath))
			return []byte(step.Files[0].Content)
		}
	}
	g.Expect(false).To(BeTrue(), "no JoinConfiguration in the rendering")
	return nil
}

func replaceCAHash(g Gomega, config, hash string) string {
	i := strings.Index(config, `"sha256:`)
	g.Expect(i).To(BeNumerically(">=", 0))
	j := strings.Index(config[i+1:], `"`)
	return config[:i+1] + hash + config[i+1+j:]
}

// unmanagedToken creates a bootstrap token in the workload cluster that no
// controller manages.
func unmanagedToken(g Gomega, expiration time.Time) token {
	value, err := bootstraputil.GenerateBootstrapToken()
	g.Expect(err).NotTo(HaveOccurred())
	t, err := parseToken(value)
	g.Expect(err).NotTo(HaveOccurred())
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			bootstrapapi.BootstrapTokenIDKey:               []byte(t.ID),
			bootstrapapi.BootstrapTokenSecretKey:           []byte(t.Secret),
			bootstrapapi.BootstrapTokenExpirationKey:       []byte(expiration.UTC().Format(time.RFC3339)),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
			bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
			bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(NodeBootstrapTokenGroup),
		},
	}
	g.Expect(workload.Client.Create(suiteCtx, s)).To(Succeed())
	return t
}
