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

package guest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	sigsyaml "sigs.k8s.io/yaml"
)

// Errors and messages a joining node reports.
var (
	errNotCloudConfig = errors.New("the user data is not a #cloud-config, so Kairos does not read it")
)

// refusal is a join a real node gives up on at once: bad configuration, a
// CA that is not pinned, an unsupported version skew.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, args ...any) error { return &refusal{msg: fmt.Sprintf(format, args...)} }

// IsRefusal reports whether err is a join the node gave up on rather than
// one it retries.
func IsRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// defaultDiscoveryTimeout is kubeadm's default discovery timeout.
const defaultDiscoveryTimeout = 5 * time.Minute

// joinRequest is one `kubeadm join` on a node.
type joinRequest struct {
	config *kubeadmv1beta4.JoinConfiguration
	// endpoint is the address the node dials for discovery.
	endpoint string
	// hostname is the guest's hostname, the node name when the
	// configuration names none.
	hostname string
	// kubeletVersion is the version of the kubelet and kubeadm on the disk.
	kubeletVersion string
	// caCerts, when set, must match the pinned hashes (the Kairos provider's
	// ca_certs).
	caCerts []byte
}

// joinResult is what a successful join leaves on the node.
type joinResult struct {
	nodeName    string
	server      string
	caData      []byte
	cluster     *workloadCluster
	providerID  string
	labels      map[string]string
	taints      []corev1.Taint
	maxPods     int64
	kubeletArgs map[string]string
	warnings    []string
}

// checkJoinConfiguration applies the checks kubeadm and the kubelet make
// before they talk to the cluster.
func checkJoinConfiguration(c *kubeadmv1beta4.JoinConfiguration, hostname string) (*joinResult, error) {
	res := &joinResult{labels: map[string]string{}, kubeletArgs: map[string]string{}, maxPods: 110}
	if c.APIVersion != kubeadmv1beta4.GroupVersion.String() || c.Kind != "JoinConfiguration" {
		return nil, refuse("kubeadm join: the configuration is %s %s, not %s JoinConfiguration", c.APIVersion, c.Kind, kubeadmv1beta4.GroupVersion)
	}
	if c.ControlPlane != nil {
		return nil, refuse("kubeadm join: the configuration joins a control-plane node; a worker disk cannot")
	}
	d := c.Discovery.BootstrapToken
	if d == nil {
		return nil, refuse("kubeadm join: discovery is not by bootstrap token, which is the only discovery a Kairos worker of this provider uses")
	}
	if !bootstraputil.IsValidBootstrapToken(d.Token) {
		return nil, refuse("kubeadm join: discovery.bootstrapToken.token is not of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}
	if c.Discovery.TLSBootstrapToken != "" && c.Discovery.TLSBootstrapToken != d.Token {
		return nil, refuse("kubeadm join: discovery.tlsBootstrapToken differs from the discovery token; this simulator models one token")
	}
	if _, _, err := net.SplitHostPort(d.APIServerEndpoint); err != nil {
		return nil, refuse("kubeadm join: discovery.bootstrapToken.apiServerEndpoint %q is not host:port", d.APIServerEndpoint)
	}
	switch {
	case len(d.CACertHashes) == 0 && !d.UnsafeSkipCAVerification:
		return nil, refuse("kubeadm join: using token-based discovery without caCertHashes can be unsafe; set unsafeSkipCAVerification to continue")
	case d.UnsafeSkipCAVerification:
		res.warnings = append(res.warnings, "discovery skips CA verification (unsafeSkipCAVerification): the node trusts any API server")
	}
	for _, h := range d.CACertHashes {
		if !validPin(h) {
			return nil, refuse("kubeadm join: caCertHash %q is not of the form sha256:<64 hex digits>", h)
		}
	}
	res.nodeName = c.NodeRegistration.Name
	if res.nodeName == "" {
		res.nodeName = strings.ToLower(hostname)
	}
	if msgs := validation.IsDNS1123Subdomain(res.nodeName); len(msgs) > 0 {
		return nil, refuse("kubeadm join: node name %q is invalid: %s", res.nodeName, strings.Join(msgs, "; "))
	}
	for _, t := range c.NodeRegistration.Taints {
		if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			return nil, refuse("kubelet: taint key %q is invalid: %s", t.Key, strings.Join(msgs, "; "))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, refuse("kubelet: taint %s has the unknown effect %q", t.Key, t.Effect)
		}
		res.taints = append(res.taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	for _, a := range c.NodeRegistration.KubeletExtraArgs {
		res.kubeletArgs[a.Name] = a.Value
		switch a.Name {
		case "provider-id":
			res.providerID = a.Value
		case "node-labels":
			labels, err := parseNodeLabels(a.Value)
			if err != nil {
				return nil, err
			}
			for k, v := range labels {
				res.labels[k] = v
			}
		case "max-pods":
			if _, err := fmt.Sscanf(a.Value, "%d", &res.maxPods); err != nil || res.maxPods < 1 {
				return nil, refuse("kubelet: --max-pods=%q is not a positive number", a.Value)
			}
		}
	}
	return res, nil
}

func validPin(h string) bool {
	hexPart, ok := strings.CutPrefix(h, "sha256:")
	if !ok || len(hexPart) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

// pin returns kubeadm's pin of a certificate: the SHA-256 of its
// SubjectPublicKeyInfo.
func pin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate found")
	}
	return certs, nil
}

// parseNodeLabels parses --node-labels and applies the kubelet's rule: a
// kubelet may set labels in the kubernetes.io and k8s.io namespaces only
// from a fixed list, and refuses to start otherwise.
func parseNodeLabels(value string) (map[string]string, error) {
	out := map[string]string{}
	if value == "" {
		return out, nil
	}
	for _, pair := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, refuse("kubelet: --node-labels entry %q is not key=value", pair)
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return nil, refuse("kubelet: node label key %q is invalid: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return nil, refuse("kubelet: node label %s has an invalid value %q: %s", k, v, strings.Join(msgs, "; "))
		}
		if !kubeletMaySetLabel(k) {
			return nil, refuse("kubelet: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [%s]", k)
		}
		out[k] = v
	}
	return out, nil
}

// kubeletMaySetLabel is the kubelet's own check of --node-labels
// (cmd/kubelet/app's validation): a key in the kubernetes.io or k8s.io
// namespace must be one NodeRestriction lets a kubelet set on itself,
// kubeletapis.IsKubeletLabel.
func kubeletMaySetLabel(key string) bool {
	namespace, _, found := strings.Cut(key, "/")
	if !found {
		return true
	}
	inNamespace := func(domain string) bool { return namespace == domain || strings.HasSuffix(namespace, "."+domain) }
	if !inNamespace("kubernetes.io") && !inNamespace("k8s.io") {
		return true
	}
	return kubeletapis.IsKubeletLabel(key)
}

// validateWithKubeadm runs the real kubeadm's configuration validation on
// the JoinConfiguration.
func validateWithKubeadm(ctx context.Context, kubeadmBin string, c *kubeadmv1beta4.JoinConfiguration) error {
	data, err := sigsyaml.Marshal(c)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "node-sim-kubeadm-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p := filepath.Join(dir, "join.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, kubeadmBin, "config", "validate", "--config", p).CombinedOutput() //nolint:gosec // The kubeadm Options.KubeadmBinary names, on the simulator's file.
	if err != nil {
		return refuse("kubeadm config validate: %s", strings.TrimSpace(string(out)))
	}
	return nil
}

// join performs what `kubeadm join` and the kubelet's TLS bootstrap do
// against the workload API server: token discovery with the CA pin, the
// reads kubeadm makes with the token, the version skew preflight, and a
// CertificateSigningRequest authenticated by the token.
func (s *Simulator) join(ctx context.Context, req joinRequest) (*joinResult, error) {
	res, err := checkJoinConfiguration(req.config, req.hostname)
	if err != nil {
		return nil, err
	}
	if s.opts.KubeadmBinary != "" {
		if err := validateWithKubeadm(ctx, s.opts.KubeadmBinary, req.config); err != nil {
			return nil, err
		}
	}
	d := req.config.Discovery.BootstrapToken
	tokenID, tokenSecret, _ := strings.Cut(d.Token, ".")

	cluster := s.cluster(req.endpoint)
	if cluster == nil {
		return nil, fmt.Errorf("discovery: no API server answers at %s", req.endpoint)
	}

	// Discovery, first without trusting the server: cluster-info must be
	// signed with the token.
	insecure, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + req.endpoint, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	info, err := insecure.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("discovery: reading cluster-info from %s: %w", req.endpoint, err)
	}
	kubeconfig := info.Data[bootstrapapi.KubeConfigKey]
	sig, ok := info.Data[bootstrapapi.JWSSignatureKeyPrefix+tokenID]
	if !ok {
		return nil, fmt.Errorf("discovery: there is no JWS signed token in the cluster-info ConfigMap for token ID %q", tokenID)
	}
	if !jws.DetachedTokenIsValid(sig, kubeconfig, tokenID, tokenSecret) {
		return nil, fmt.Errorf("discovery: failed to verify JWS signature of received cluster info object, can't trust this API Server")
	}
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil || len(cfg.Clusters) != 1 {
		return nil, refuse("discovery: cluster-info does not hold exactly one cluster")
	}
	for _, c := range cfg.Clusters {
		res.server, res.caData = c.Server, c.CertificateAuthorityData
	}
	cas, err := parseCertificates(res.caData)
	if err != nil {
		return nil, refuse("discovery: the CA in cluster-info cannot be read: %v", err)
	}
	if !d.UnsafeSkipCAVerification {
		var got []string
		pinned := false
		for _, ca := range cas {
			got = append(got, pin(ca))
			for _, h := range d.CACertHashes {
				if strings.EqualFold(h, pin(ca)) {
					pinned = true
				}
			}
		}
		if !pinned {
			return nil, refuse("discovery: cluster CA found in cluster-info ConfigMap is invalid: none of the public keys %q are pinned", got)
		}
	}
	if len(req.caCerts) > 0 {
		given, err := parseCertificates(req.caCerts)
		if err != nil {
			return nil, refuse("provider: ca_certs cannot be read: %v", err)
		}
		for _, g := range given {
			matched := false
			for _, h := range d.CACertHashes {
				matched = matched || strings.EqualFold(h, pin(g))
			}
			if !matched {
				return nil, refuse("provider: ca_certs holds a certificate (%s) that caCertHashes does not pin", pin(g))
			}
		}
	}
	// Then again, trusting only the pinned CA: the endpoint must serve it.
	secure, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + req.endpoint, TLSClientConfig: rest.TLSClientConfig{CAData: res.caData}, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	again, err := secure.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return nil, refuse("discovery: %s does not serve a certificate of the pinned cluster CA: %v", req.endpoint, err)
	}
	if again.Data[bootstrapapi.KubeConfigKey] != kubeconfig {
		return nil, fmt.Errorf("discovery: cluster-info changed between the insecure and the secure read")
	}

	// With the token, against the server cluster-info names.
	token, err := kubernetes.NewForConfig(&rest.Config{Host: res.server, BearerToken: d.Token, TLSClientConfig: rest.TLSClientConfig{CAData: res.caData}, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	kubeadmConfig, err := token.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("preflight: reading the kubeadm-config ConfigMap with the bootstrap token: %w", err)
	}
	if _, err := token.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubelet-config", metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("kubelet-start: reading the kubelet-config ConfigMap with the bootstrap token: %w", err)
	}
	if err := checkVersionSkew(kubeadmConfig.Data["ClusterConfiguration"], req.kubeletVersion); err != nil {
		return nil, err
	}
	existing, err := token.CoreV1().Nodes().Get(ctx, res.nodeName, metav1.GetOptions{})
	switch {
	case err == nil && nodeReady(existing):
		return nil, refuse("kubelet-start: a Node with name %q and status \"Ready\" already exists in the cluster. You must delete the existing Node or change the name of this new joining Node", res.nodeName)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("kubelet-start: checking for an existing Node %s with the bootstrap token: %w", res.nodeName, err)
	}
	if err := s.tlsBootstrap(ctx, token, cluster, res.nodeName); err != nil {
		return nil, err
	}
	res.cluster = cluster
	return res, nil
}

func checkVersionSkew(clusterConfiguration, kubeletVersion string) error {
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := sigsyaml.Unmarshal([]byte(clusterConfiguration), &cc); err != nil || cc.KubernetesVersion == "" {
		return refuse("preflight: the cluster's kubeadm-config holds no ClusterConfiguration with a kubernetesVersion")
	}
	controlPlane, err := version.ParseSemantic(cc.KubernetesVersion)
	if err != nil {
		return refuse("preflight: the control plane version %q cannot be parsed", cc.KubernetesVersion)
	}
	kubelet, err := version.ParseSemantic(kubeletVersion)
	if err != nil {
		return refuse("preflight: the kubelet version %q of the disk cannot be parsed", kubeletVersion)
	}
	switch {
	case kubelet.Major() != controlPlane.Major() || kubelet.Minor() > controlPlane.Minor():
		return refuse("preflight: the kubelet version %s is higher than the control plane version %s. This is not a supported version skew", kubeletVersion, cc.KubernetesVersion)
	case controlPlane.Minor()-kubelet.Minor() > 3:
		return refuse("preflight: the kubelet version %s is more than three minor versions older than the control plane version %s", kubeletVersion, cc.KubernetesVersion)
	}
	return nil
}

// tlsBootstrap creates the kubelet's client CertificateSigningRequest with
// the bootstrap token, which the API server accepts only for a token that
// exists, is unexpired and is allowed to authenticate. The harness runs no
// CSR signer, so the request is removed once accepted and the kubelet is
// given its identity by the harness.
func (s *Simulator) tlsBootstrap(ctx context.Context, token kubernetes.Interface, cluster *workloadCluster, nodeName string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return err
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	created, err := token.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("kubelet TLS bootstrap: creating the CertificateSigningRequest with the bootstrap token: %w", err)
	}
	if err := cluster.admin.CertificatesV1().CertificateSigningRequests().Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubelet TLS bootstrap: removing the accepted CertificateSigningRequest: %w", err)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
