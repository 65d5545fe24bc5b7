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
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bootstrapsetup "github.com/cozystack/cluster-api-workers/bootstrap/setup"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// TestATenantsKubeconfigNeverSendsTheProvidersCredentials is the attack
// as a tenant writes it, on a real apiserver: with rights only in its
// namespace, it writes Secrets <c>-kubeconfig that point at its own
// server (a listener here) and name files on the provider's filesystem (a
// token file standing for the service account token, a client
// certificate and key, a CA file) or an exec plugin, and Clusters <c>.
//
//   - The bootstrap provider, wired as its main wires it, refuses each
//     kubeconfig before any connection (its ClusterCache logs the field at
//     fault) and connects with an inline one: no request carries the
//     file's token, presents the file's certificate, trusts the file's CA,
//     and the plugin never runs.
//   - Cluster API's own ClusterCache, wired as Cluster API wires it, sends
//     the file's token and certificate: the attack is real, and it is what
//     the admission policy is for.
//   - With the policy in place the tenant can no longer write such a
//     Secret, neither a new one nor as an update.
func TestATenantsKubeconfigNeverSendsTheProvidersCredentials(t *testing.T) {
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	scheme := runtime.NewScheme()
	g.Expect(bootstrapsetup.AddToScheme(scheme)).To(Succeed())
	env, err := envtest.Start(ctx, envtest.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })

	server := newListener(t)
	files := newProviderFiles(t, server)
	ns := "tenant"
	tenant := tenantClient(t, env, scheme, ns)

	// What the tenant's Secrets say of their user or cluster, beside the
	// listener as the server.
	attacks := map[string]string{
		"token-file":  "users: [{name: u, user: {tokenFile: " + files.token + "}}]\n",
		"client-cert": "users: [{name: u, user: {client-certificate: " + files.cert + ", client-key: " + files.key + "}}]\n",
		"ca-file":     "users: [{name: u, user: {token: " + files.caFileToken + "}}]\n",
		"exec": "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, " +
			"args: [-c, 'touch " + files.execMarker + "'], interactiveMode: Never}}}]\n",
	}
	inlineToken := "inline-" + rand.String(16)
	for name, users := range attacks {
		g.Expect(tenant.Create(ctx, kubeconfigSecretFor(ns, name, server, name == "ca-file", files, users))).To(Succeed(), name)
	}
	g.Expect(tenant.Create(ctx, kubeconfigSecretFor(ns, "inline", server, false, files,
		"users: [{name: u, user: {token: "+inlineToken+"}}]\n"))).To(Succeed())
	for _, name := range append(keys(attacks), "inline") {
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api." + name + ".tenant.example", Port: 6443}}}
		g.Expect(tenant.Create(ctx, cluster)).To(Succeed(), name)
		// Cluster API's Cluster controller reports the infrastructure of a
		// tenant's KubeVirtCluster provisioned; the ClusterCache connects
		// from then on. That path is not under test, so the status is set.
		cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
		g.Expect(env.Client.Status().Update(ctx, cluster)).To(Succeed(), name)
	}

	// The bootstrap provider.
	logs := &logLines{}
	stopOurs := startManager(t, env.Config, scheme, logs.logger(), func(ctx context.Context, mgr ctrl.Manager, name string) error {
		return bootstrapsetup.Reconcilers(ctx, mgr, bootstrapsetup.Options{ControllerName: name})
	})
	g.Eventually(server.sawBearer).WithArguments(inlineToken).Should(BeTrue(), "the provider connects with an inline kubeconfig")
	fields := map[string]string{
		"token-file":  "users[u].user.tokenFile",
		"client-cert": "users[u].user.client-certificate",
		"ca-file":     "clusters[c].cluster.certificate-authority",
		"exec":        "users[u].user.exec",
	}
	for name, field := range fields {
		g.Eventually(logs.contains).WithArguments("Connect failed", "Secret "+ns+"/"+name+"-kubeconfig", field+": Forbidden").
			Should(BeTrue(), "the provider's ClusterCache refuses %s", name)
	}
	stopOurs()
	g.Expect(server.sawBearer(files.tokenContent)).To(BeFalse(), "a request carried the token file's content")
	g.Expect(server.sawClientCertificate(files.certDER)).To(BeFalse(), "a request presented the certificate file")
	g.Expect(server.sawBearer(files.caFileToken)).To(BeFalse(), "a connection trusted the CA file")
	g.Expect(files.execMarker).NotTo(BeAnExistingFile(), "the exec plugin ran")
	g.Expect(logs.contains(files.tokenContent)).To(BeFalse(), "the log carries the token")

	// Cluster API's own ClusterCache, wired as in Cluster API's main.
	stopUpstream := startManager(t, env.Config, scheme, logr.Discard(), func(ctx context.Context, mgr ctrl.Manager, name string) error {
		secretCachingClient, err := kubeadmsetup.CreateSecretCachingClient(mgr)
		if err != nil {
			return err
		}
		_, err = clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
			SecretClient: secretCachingClient,
			Client:       clustercache.ClientOptions{UserAgent: name},
		}, controller.Options{SkipNameValidation: ptr.To(true)})
		return err
	})
	g.Eventually(server.sawBearer).WithArguments(files.tokenContent).Should(BeTrue(),
		"Cluster API's ClusterCache sends the token file's content to the tenant's server")
	g.Eventually(server.sawClientCertificate).WithArguments(files.certDER).Should(BeTrue(),
		"Cluster API's ClusterCache presents the certificate file to the tenant's server")
	g.Eventually(server.sawBearer).WithArguments(files.caFileToken).Should(BeTrue(),
		"Cluster API's ClusterCache trusts the CA file")
	stopUpstream()

	// The admission policy closes the door for Cluster API's ClusterCache too.
	g.Expect(env.CreateManifests(ctx, []string{filepath.Join(envtest.RepoRoot(), policyPath)})).To(Succeed())
	g.Eventually(func() error {
		return tenant.Create(ctx, kubeconfigSecretFor(ns, "probe", server, false, files, attacks["token-file"]), client.DryRunAll)
	}).Should(MatchError(ContainSubstring("Forbidden")), "the policy is in force")
	for name, users := range attacks {
		err := tenant.Create(ctx, kubeconfigSecretFor(ns, "again-"+name, server, name == "ca-file", files, users))
		g.Expect(err).To(MatchError(ContainSubstring("data.value: Forbidden")), name)
	}
	stored := &corev1.Secret{}
	g.Expect(tenant.Get(ctx, client.ObjectKey{Namespace: ns, Name: "inline-kubeconfig"}, stored)).To(Succeed())
	stored.Data[secret.KubeconfigDataName] = []byte(attacks["token-file"])
	g.Expect(tenant.Update(ctx, stored)).To(MatchError(ContainSubstring("data.value: Forbidden")), "an update naming a file")
}

// kubeconfigSecretFor is a tenant's <cluster>-kubeconfig Secret: the
// listener as the server of cluster "c", trusted through the provider's CA
// file or not verified, and users as written.
func kubeconfigSecretFor(ns, cluster string, server *listener, caFile bool, files providerFiles, users string) *corev1.Secret {
	trust := "insecure-skip-tls-verify: true"
	if caFile {
		trust = "certificate-authority: " + files.ca
	}
	kubeconfig := fmt.Sprintf("clusters: [{name: c, cluster: {server: %q, %s}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n%s", server.URL, trust, users)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret.Name(cluster, secret.Kubeconfig),
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{secret.KubeconfigDataName: []byte(kubeconfig)},
	}
}

// providerFiles are files on the provider's filesystem a kubeconfig could
// name: a token (as the service account token), a client certificate and
// its key, the listener's CA, and where an exec plugin would leave a mark.
type providerFiles struct {
	token, tokenContent string
	cert, key           string
	certDER             []byte
	ca, caFileToken     string
	execMarker          string
}

func newProviderFiles(t *testing.T, server *listener) providerFiles {
	t.Helper()
	dir := t.TempDir()
	f := providerFiles{
		token:        filepath.Join(dir, "token"),
		tokenContent: "provider-credential-" + rand.String(24),
		cert:         filepath.Join(dir, "tls.crt"),
		key:          filepath.Join(dir, "tls.key"),
		ca:           filepath.Join(dir, "ca.crt"),
		caFileToken:  "trusted-through-the-ca-file-" + rand.String(16),
		execMarker:   filepath.Join(dir, "exec-ran"),
	}
	key, err := certs.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "system:serviceaccount:provider:manager"}, key)
	if err != nil {
		t.Fatal(err)
	}
	f.certDER = cert.Raw
	for path, data := range map[string][]byte{
		f.token: []byte(f.tokenContent),
		f.cert:  certs.EncodeCertPEM(cert),
		f.key:   certs.EncodePrivateKeyPEM(key),
		f.ca:    certs.EncodeCertPEM(server.Certificate()),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// listener is the tenant's server: it records the credentials each
// request brings and answers 401.
type listener struct {
	*httptest.Server
	mu           sync.Mutex
	bearers      []string
	certificates [][]byte
}

func newListener(t *testing.T) *listener {
	t.Helper()
	l := &listener{}
	l.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.bearers = append(l.bearers, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if r.TLS != nil {
			for _, c := range r.TLS.PeerCertificates {
				l.certificates = append(l.certificates, c.Raw)
			}
		}
		l.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
	}))
	l.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	l.StartTLS()
	t.Cleanup(l.Close)
	return l
}

func (l *listener) sawBearer(token string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bearers {
		if b == token {
			return true
		}
	}
	return false
}

func (l *listener) sawClientCertificate(der []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.certificates {
		if bytes.Equal(c, der) {
			return true
		}
	}
	return false
}

// tenantClient is a user with rights only in its namespace: Secrets and
// Clusters.
func tenantClient(t *testing.T, env *envtest.Environment, scheme *runtime.Scheme, ns string) client.Client {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
			{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{"clusters"}, Verbs: []string{"*"}},
		},
	}
	g.Expect(env.Client.Create(ctx, role)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}},
	})).To(Succeed())
	cfg, err := env.AddUser("tenant")
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

var managers int

// startManager starts a manager set up by setup and returns its stop.
func startManager(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, log logr.Logger, setup func(context.Context, ctrl.Manager, string) error) func() {
	t.Helper()
	managers++
	name := fmt.Sprintf("kubeconfig-attack-%d", managers)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  bootstrapsetup.ManagerCacheOptions(scheme, name, "", 10*time.Minute),
		Client:                 bootstrapsetup.ManagerClientOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr, name); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("%s stopped: %v", name, err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// logLines keeps a manager's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 4})
}

// contains says whether one line holds every part.
func (l *logLines) contains(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
