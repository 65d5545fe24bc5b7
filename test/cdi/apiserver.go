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

package cdi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/netns"
)

// APIServerUser is the identity cdi-apiserver acts as: its service
// account's, as the operator deploys it.
const APIServerUser = "system:serviceaccount:" + Namespace + ":cdi-apiserver"

// apiServerListens is where cdi-apiserver listens in its network
// namespace: it binds 0.0.0.0:8443, a port it takes no flag for, as
// cdi-controller's metrics bind :8443 on the host.
const apiServerListens = "127.0.0.1:8443"

// signingKeySecret is the Secret in which cdi-apiserver finds the key it
// signs clone tokens with; cdi-controller checks them with its public
// half (writeTokenKeys).
const signingKeySecret = "cdi-api-signing-key" //nolint:gosec // A Secret's name, not its content.

// startAPIServer starts cdi-apiserver with the clone token key pair in
// keys (shared with cdi-controller), waits until it serves and registers
// its admission webhooks. Its DataVolume mutating webhook is what
// authorizes a clone from another namespace as the user who creates the
// DataVolume and adds the clone token that cdi-controller requires.
func (c *Controller) startAPIServer(ctx context.Context, env *envtest.Environment, bin, keys string) error {
	if err := installAPIServer(ctx, env.Client, keys); err != nil {
		return err
	}
	cfg, err := env.AddUser(APIServerUser)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.dir, "cdi-apiserver.kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "cdi", cfg); err != nil {
		return err
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return err
	}
	// The PEM holds the serving certificate, then its CA.
	chain, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(chain) < 2 {
		return fmt.Errorf("cdi-apiserver's serving certificate: %w", err)
	}
	caPEM, err := certutil.EncodeCertificates(chain[1:]...)
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(c.dir, "cdi-apiserver.crt"), filepath.Join(c.dir, "cdi-apiserver.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	// cdi-apiserver takes its namespace from a service account's file
	// (/var/run/secrets/kubernetes.io/serviceaccount/namespace) and CDI's
	// default without one: a fresh /run in a mount namespace of its own
	// keeps a host that is itself a Pod from naming another.
	script := `set -e
mount -t tmpfs -o mode=0755 cdi-run /run
exec "$1" --kubeconfig="$2" -v=2
`
	// cdi-apiserver binds :8443, as cdi-controller does for its metrics,
	// neither with a flag to move it: cdi-apiserver, which the apiserver
	// calls and which calls only the apiserver, runs in a network
	// namespace of its own, with a forward out to the apiserver at the
	// address its kubeconfig names and one in from a host port for the
	// webhooks. Not a Pod on the node: the apiserver on the host reaches
	// no Service address for its webhooks.
	if c.apiServerNet, err = netns.New(); err != nil {
		return err
	}
	if err := c.apiServerNet.ForwardOut(listenAddr(cfg.Host), hostPort(cfg.Host)); err != nil {
		return err
	}
	if c.apiServerAddr, err = c.apiServerNet.ForwardIn("127.0.0.1:0", apiServerListens); err != nil {
		return err
	}
	c.APIServer = kubevirt.StartProcess("cdi-apiserver", "nsenter", []string{"--net=" + c.apiServerNet.Path, "unshare", "--mount", "--fork", "--kill-child", "--", "env",
		"CERT_FILE=" + certFile, "KEY_FILE=" + keyFile,
		"INSTALLER_PART_OF_LABEL=cluster-api-workers-test",
		"INSTALLER_VERSION_LABEL=" + Version,
		"sh", "-c", script, "sh", filepath.Join(bin, "cdi-apiserver"), kubeconfig,
	}, filepath.Join(c.dir, "cdi-apiserver.log"), time.Second)
	// Ready once it serves with the certificate of this start.
	roots := x509.NewCertPool()
	roots.AddCert(chain[1])
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return serving(ctx, c.apiServerAddr, roots), nil
	}); err != nil {
		return fmt.Errorf("waiting for cdi-apiserver to serve on %s (forwarded to %s in its network namespace): %w; its log: %s", c.apiServerAddr, apiServerListens, err, c.APIServer.Tail())
	}
	return registerWebhooks(ctx, env.Client, c.apiServerAddr, caPEM)
}

// serving reports whether addr completes a TLS handshake with a
// certificate roots verify.
func serving(ctx context.Context, addr string, roots *x509.CertPool) bool {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// installAPIServer writes the clone token key pair into the Secret
// cdi-apiserver signs with: the operator's Secret, whose key
// cdi-controller's token keys mirror. Without it cdi-apiserver would make
// a key of its own that cdi-controller does not know. Its roles are the
// operator's, granted with cdi-controller's (install).
func installAPIServer(ctx context.Context, c client.Client, keys string) error {
	private, err := os.ReadFile(filepath.Join(keys, "id_rsa")) //nolint:gosec // The test's own key.
	if err != nil {
		return err
	}
	public, err := os.ReadFile(filepath.Join(keys, "id_rsa.pub")) //nolint:gosec // The test's own key.
	if err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: signingKeySecret, Labels: map[string]string{"cdi.kubevirt.io": "keystore"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{"id_rsa": private, "id_rsa.pub": public},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// webhook is one of cdi-apiserver's admission webhooks as CDI's operator
// registers it (pkg/operator/resources/cluster/apiserver.go).
type webhook struct {
	configuration, name, path string
	mutating                  bool
	resources                 []string
	operations                []admissionregistrationv1.OperationType
	failurePolicy             admissionregistrationv1.FailurePolicyType
}

var (
	createUpdate = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	webhooks     = []webhook{
		{configuration: "cdi-api-datavolume-validate", name: "datavolume-validate.cdi.kubevirt.io", path: "/datavolume-validate",
			resources: []string{"datavolumes"}, operations: createUpdate, failurePolicy: admissionregistrationv1.Fail},
		{configuration: "cdi-api-datavolume-mutate", name: "datavolume-mutate.cdi.kubevirt.io", path: "/datavolume-mutate", mutating: true,
			resources: []string{"datavolumes"}, operations: createUpdate, failurePolicy: admissionregistrationv1.Fail},
		{configuration: "cdi-api-validate", name: "cdi-validate.cdi.kubevirt.io", path: "/cdi-validate",
			resources: []string{"cdis"}, operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}, failurePolicy: admissionregistrationv1.Ignore},
		{configuration: "objecttransfer-api-validate", name: "objecttransfer-validate.cdi.kubevirt.io", path: "/objecttransfer-validate",
			resources: []string{"objecttransfers"}, operations: createUpdate, failurePolicy: admissionregistrationv1.Fail},
		{configuration: "cdi-api-dataimportcron-validate", name: "dataimportcron-validate.cdi.kubevirt.io", path: "/dataimportcron-validate",
			resources: []string{"dataimportcrons"}, operations: createUpdate, failurePolicy: admissionregistrationv1.Fail},
		{configuration: "cdi-api-populator-validate", name: "populator-validate.cdi.kubevirt.io", path: "/populator-validate",
			resources: []string{"volumeimportsources", "volumeuploadsources"}, operations: createUpdate, failurePolicy: admissionregistrationv1.Fail},
	}
)

// registerWebhooks registers cdi-apiserver's webhooks as CDI's operator
// does (each configuration's name, rules, policies, timeout and review
// versions), with one difference: the operator names the cdi-api Service,
// which the apiserver would reach at its cluster IP, an address only the
// node's network namespace routes; here each names the process's URL.
// The operator registers no PVC mutating webhook unless its feature gate
// is on, and neither does this.
func registerWebhooks(ctx context.Context, c client.Client, addr string, caPEM []byte) error {
	for _, w := range webhooks {
		rules := []admissionregistrationv1.RuleWithOperations{{
			Operations: w.operations,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{cdiv1.SchemeGroupVersion.Group}, APIVersions: []string{cdiv1.SchemeGroupVersion.Version},
				Resources: w.resources, Scope: ptr.To(admissionregistrationv1.AllScopes),
			},
		}}
		clientConfig := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + w.path), CABundle: caPEM}
		meta := metav1.ObjectMeta{Name: w.configuration, Labels: map[string]string{"cdi.kubevirt.io": "cdi-api"}}
		var obj client.Object
		if w.mutating {
			obj = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: meta, Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: w.name, Rules: rules, ClientConfig: clientConfig,
				FailurePolicy: ptr.To(w.failurePolicy), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
				MatchPolicy: ptr.To(admissionregistrationv1.Exact), NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
				TimeoutSeconds: ptr.To[int32](30), AdmissionReviewVersions: []string{"v1", "v1beta1"},
				ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			}}}
		} else {
			obj = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: meta, Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: w.name, Rules: rules, ClientConfig: clientConfig,
				FailurePolicy: ptr.To(w.failurePolicy), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
				MatchPolicy: ptr.To(admissionregistrationv1.Exact), NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
				TimeoutSeconds: ptr.To[int32](30), AdmissionReviewVersions: []string{"v1", "v1beta1"},
			}}}
		}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("registering %s: %w", w.configuration, err)
		}
	}
	return nil
}
