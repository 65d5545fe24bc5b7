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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// JoinDryRun is what `kubeadm join --dry-run` left behind.
type JoinDryRun struct {
	// Output is kubeadm's combined output.
	Output string
	// Err is kubeadm's exit error, nil on exit code 0. In dry-run kubeadm
	// substitutes fake objects when a real read fails, so a nil Err proves
	// little on its own: use the written credentials.
	Err error
	// BootstrapKubeconfig is the bootstrap-kubelet.conf kubeadm wrote, nil
	// when it wrote none.
	BootstrapKubeconfig []byte
}

// KubeadmJoinDryRun runs `kubeadm join --dry-run` with a JoinConfiguration,
// writing into a fresh directory under dir (KUBEADM_JOIN_DRYRUN_DIR), with
// every preflight check ignored (the test host is not a node).
func KubeadmJoinDryRun(ctx context.Context, kubeadmBin string, joinConfiguration []byte, dir string) (*JoinDryRun, error) {
	work, err := os.MkdirTemp(dir, "kubeadm-join-")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(work, "join-configuration.yaml")
	if err := os.WriteFile(config, joinConfiguration, 0o600); err != nil {
		return nil, err
	}
	out := filepath.Join(work, "dry-run")
	if err := os.Mkdir(out, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubeadmBin, "join", "--config", config, "--dry-run", "--ignore-preflight-errors=all") //nolint:gosec // The harness's own command.
	cmd.Env = append(os.Environ(), "KUBEADM_JOIN_DRYRUN_DIR="+out)
	output, runErr := cmd.CombinedOutput()
	res := &JoinDryRun{Output: string(output), Err: runErr}
	if b, err := os.ReadFile(filepath.Join(out, "bootstrap-kubelet.conf")); err == nil { //nolint:gosec // A file of the repository or one the harness wrote.
		res.BootstrapKubeconfig = b
	}
	return res, nil
}

// CreateNodeCSR uses a kubelet bootstrap kubeconfig the way a kubelet's TLS
// bootstrap does: it creates a CertificateSigningRequest for
// system:node:<nodeName>. Success proves the credentials authenticate as a
// node bootstrapper against the endpoint the kubeconfig names, trusting the
// CA it carries.
func CreateNodeCSR(ctx context.Context, kubeconfig []byte, nodeName string) (*certificatesv1.CertificateSigningRequest, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the bootstrap kubeconfig: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	return cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
}
