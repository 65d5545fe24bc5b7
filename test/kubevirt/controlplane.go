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

// Package kubevirt runs KubeVirt's own control plane against an envtest
// apiserver, as virt-operator deploys it in a cluster: virt-api (KubeVirt's
// admission webhooks) and virt-controller, built from the kubevirt.io/kubevirt
// module by hack/tools-bins.sh, each as its own process under its own service
// account identity, with the RBAC, webhook configurations, admission policies
// and common instancetypes virt-operator installs (generated into
// test/kubevirt/manifests by hack/gen-external-crds.sh) and a KubeVirt CR
// configured for emulation, its status as virt-operator leaves it. A process
// that exits is restarted, as its Deployment would restart it.
//
// The node side is not here: in the harness the scheduler and kubelet of
// virt-launcher Pods and virt-handler are stand-ins (test/sim/kubevirtnode), and
// so is CDI (test/sim/cdi), whose controllers cannot be built from the module
// proxy. On a real node (test/node, make test-node) DeployHandler deploys
// virt-handler's DaemonSet as virt-operator does.
package kubevirt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/process"
)

// Namespace is where KubeVirt is installed, virt-operator's default.
const Namespace = "kubevirt"

// The service account identities KubeVirt's components act as. virt-api
// lets only these change a VirtualMachineInstance's spec, and RBAC grants
// each what virt-operator grants it.
const (
	ControllerUser = "system:serviceaccount:" + Namespace + ":kubevirt-controller"
	APIUser        = "system:serviceaccount:" + Namespace + ":kubevirt-apiserver"
	HandlerUser    = "system:serviceaccount:" + Namespace + ":kubevirt-handler"
)

// Version is the KubeVirt release the binaries and manifests come from.
const Version = "v1.7.0"

// Options configure the control plane.
type Options struct {
	// Configuration is the KubeVirt CR's spec.configuration (feature gates,
	// permitted host devices, ...). Emulation is always on: the node side
	// has no /dev/kvm to offer.
	Configuration kubevirtv1.KubeVirtConfiguration
	// LogDir keeps virt-api's and virt-controller's logs
	// (<component>.log); a temporary directory removed by Stop otherwise.
	LogDir string
	// RestartDelay is how long a process that exited stays down before it
	// is started again; 1s when zero.
	RestartDelay time.Duration
}

// ControlPlane is a running virt-api and virt-controller.
type ControlPlane struct {
	// API is virt-api, serving KubeVirt's admission webhooks.
	API *Process
	// Controller is virt-controller.
	Controller *Process

	client  client.Client
	dir     string
	ownDir  bool
	apiAddr string
}

// ManifestsDir holds what virt-operator installs besides the CRDs.
func ManifestsDir() string {
	return filepath.Join(envtest.RepoRoot(), "test", "kubevirt", "manifests")
}

// Start installs KubeVirt into env and starts virt-api and virt-controller.
// env's apiserver must carry KubeVirt's and CDI's CRDs (envtest's
// ExternalCRDPaths). Start returns once virt-api serves and its webhook
// configurations are registered; Stop stops both.
func Start(ctx context.Context, env *envtest.Environment, opts Options) (_ *ControlPlane, rerr error) {
	if opts.RestartDelay == 0 {
		opts.RestartDelay = time.Second
	}
	bins, err := envtest.ToolsBinary("kubevirt")
	if err != nil {
		return nil, err
	}
	c := &ControlPlane{client: env.Client}
	if c.dir, c.ownDir, err = process.WorkDir(opts.LogDir, "kubevirt-"); err != nil {
		return nil, err
	}
	defer func() {
		if rerr != nil {
			rerr = errors.Join(rerr, c.Stop())
		}
	}()
	if err := c.install(ctx, opts.Configuration); err != nil {
		return nil, err
	}
	caPEM, err := c.startAPI(ctx, env, filepath.Join(bins, "virt-api"), opts.RestartDelay)
	if err != nil {
		return nil, err
	}
	if err := c.registerWebhooks(ctx, caPEM); err != nil {
		return nil, err
	}
	if err := c.startController(ctx, env, filepath.Join(bins, "virt-controller"), opts.RestartDelay); err != nil {
		return nil, err
	}
	return c, nil
}

// install creates the namespace, what virt-operator installs besides the
// CRDs and the webhooks, and the KubeVirt CR.
func (c *ControlPlane) install(ctx context.Context, configuration kubevirtv1.KubeVirtConfiguration) error {
	if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	for _, file := range []string{"rbac.yaml", "priorityclass.yaml", "admission-policies.yaml", "common-instancetypes.yaml"} {
		objs, err := readManifest(file)
		if err != nil {
			return err
		}
		for i := range objs {
			if err := c.client.Create(ctx, &objs[i]); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("installing %s %s from %s: %w", objs[i].GetKind(), objs[i].GetName(), file, err)
			}
		}
	}
	return c.installKubeVirtCR(ctx, configuration)
}

// installKubeVirtCR creates the KubeVirt CR and reports it as virt-operator
// does once the install is done: virt-controller and virt-api ignore a CR
// without a phase.
func (c *ControlPlane) installKubeVirtCR(ctx context.Context, configuration kubevirtv1.KubeVirtConfiguration) error {
	if configuration.DeveloperConfiguration == nil {
		configuration.DeveloperConfiguration = &kubevirtv1.DeveloperConfiguration{}
	}
	configuration.DeveloperConfiguration.UseEmulation = true
	kv := &kubevirtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "kubevirt"},
		Spec:       kubevirtv1.KubeVirtSpec{Configuration: configuration},
	}
	if err := c.client.Create(ctx, kv); err != nil {
		return fmt.Errorf("creating the KubeVirt CR: %w", err)
	}
	now := metav1.Now()
	kv.Status = kubevirtv1.KubeVirtStatus{
		Phase:                   kubevirtv1.KubeVirtPhaseDeployed,
		DefaultArchitecture:     "amd64",
		OperatorVersion:         Version,
		TargetKubeVirtVersion:   Version,
		ObservedKubeVirtVersion: Version,
		Conditions: []kubevirtv1.KubeVirtCondition{
			{Type: kubevirtv1.KubeVirtConditionAvailable, Status: corev1.ConditionTrue, Reason: "AllComponentsReady", Message: "All components are ready.", LastProbeTime: now, LastTransitionTime: now},
			{Type: kubevirtv1.KubeVirtConditionProgressing, Status: corev1.ConditionFalse, Reason: "AllComponentsReady", Message: "All components are ready.", LastProbeTime: now, LastTransitionTime: now},
			{Type: kubevirtv1.KubeVirtConditionDegraded, Status: corev1.ConditionFalse, Reason: "AllComponentsReady", Message: "All components are ready.", LastProbeTime: now, LastTransitionTime: now},
		},
	}
	if err := c.client.Status().Update(ctx, kv); err != nil {
		return fmt.Errorf("reporting the KubeVirt CR deployed: %w", err)
	}
	return nil
}

// startAPI starts virt-api with a serving certificate for loopback and
// waits until it answers TLS; it returns the certificate's CA.
func (c *ControlPlane) startAPI(ctx context.Context, env *envtest.Environment, bin string, restartDelay time.Duration) ([]byte, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, fmt.Errorf("creating virt-api's serving certificate: %w", err)
	}
	// virt-api watches the directory of its certificate and reloads it on
	// every change there: beside its own log, each reload's log line would
	// trigger the next, a loop that takes a whole core.
	tlsDir := filepath.Join(c.dir, "virt-api-tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	// The file holds the serving certificate, then the CA that signed it.
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) < 2 {
		return nil, fmt.Errorf("reading virt-api's serving certificate: %v", err)
	}
	caPEM, err := certutil.EncodeCertificates(certs[1:]...)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := c.kubeconfig(env, "virt-api", APIUser)
	if err != nil {
		return nil, err
	}
	port, err := freePort(ctx)
	if err != nil {
		return nil, err
	}
	c.apiAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c.API = StartProcess("virt-api", bin, []string{
		"--kubeconfig", kubeconfig,
		"--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--console-server-port", "0",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		// Not an aggregated API here; its webhooks are what the tests need.
		"--subresources-only=false",
	}, filepath.Join(c.dir, "virt-api.log"), restartDelay)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.APIServing(ctx), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for virt-api to serve on %s: %w; its log: %s", c.apiAddr, err, c.API.Tail())
	}
	return caPEM, nil
}

// APIServing reports whether virt-api completes a TLS handshake.
func (c *ControlPlane) APIServing(ctx context.Context) bool {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a liveness probe; the webhooks verify the CA.
	conn, err := d.DialContext(ctx, "tcp", c.apiAddr)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// registerWebhooks installs virt-api's webhook configurations as
// virt-operator generates them, pointed at the process instead of the
// virt-api Service.
func (c *ControlPlane) registerWebhooks(ctx context.Context, caPEM []byte) error {
	objs, err := readManifest("webhooks.yaml")
	if err != nil {
		return err
	}
	url := func(service *admissionregistrationv1.ServiceReference) *string {
		return ptr.To("https://" + c.apiAddr + ptr.Deref(service.Path, "/"))
	}
	for i := range objs {
		switch objs[i].GetKind() {
		case "ValidatingWebhookConfiguration":
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[i].Object, cfg); err != nil {
				return err
			}
			for j := range cfg.Webhooks {
				cc := &cfg.Webhooks[j].ClientConfig
				cc.URL, cc.Service, cc.CABundle = url(cc.Service), nil, caPEM
			}
			if err := c.client.Create(ctx, cfg); err != nil {
				return fmt.Errorf("registering %s: %w", cfg.Name, err)
			}
		case "MutatingWebhookConfiguration":
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[i].Object, cfg); err != nil {
				return err
			}
			for j := range cfg.Webhooks {
				cc := &cfg.Webhooks[j].ClientConfig
				cc.URL, cc.Service, cc.CABundle = url(cc.Service), nil, caPEM
			}
			if err := c.client.Create(ctx, cfg); err != nil {
				return fmt.Errorf("registering %s: %w", cfg.Name, err)
			}
		default:
			return fmt.Errorf("webhooks.yaml: unexpected %s %s", objs[i].GetKind(), objs[i].GetName())
		}
	}
	return nil
}

// startController starts virt-controller. Its lease outlasts the pauses a
// loaded test machine causes (it exits when it loses the lease); a
// restarted process takes the lease over at once, since its identity is
// the host name.
func (c *ControlPlane) startController(ctx context.Context, env *envtest.Environment, bin string, restartDelay time.Duration) error {
	kubeconfig, err := c.kubeconfig(env, "virt-controller", ControllerUser)
	if err != nil {
		return err
	}
	port, err := freePort(ctx)
	if err != nil {
		return err
	}
	c.Controller = StartProcess("virt-controller", bin, []string{
		"--kubeconfig", kubeconfig,
		"--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--launcher-image", LauncherImage,
		"--exporter-image", "quay.io/kubevirt/virt-exportserver:" + Version,
		"--leader-elect-lease-duration", "60s",
		"--leader-elect-renew-deadline", "50s",
	}, filepath.Join(c.dir, "virt-controller.log"), restartDelay)
	return nil
}

// LauncherImage is the virt-launcher image virt-controller puts in the
// compute container of every launcher Pod.
const LauncherImage = "quay.io/kubevirt/virt-launcher:" + Version

// kubeconfig writes a kubeconfig that authenticates as user.
func (c *ControlPlane) kubeconfig(env *envtest.Environment, component, user string) (string, error) {
	cfg, err := env.AddUser(user)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, component+".kubeconfig")
	return path, envtest.WriteKubeconfig(path, "kubevirt", cfg)
}

// Stop stops virt-controller and virt-api.
func (c *ControlPlane) Stop() error {
	var errs []error
	for _, p := range []*Process{c.Controller, c.API} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
	return errors.Join(errs...)
}

// readManifest reads one of the generated install manifests.
func readManifest(file string) ([]unstructured.Unstructured, error) {
	raw, err := os.ReadFile(filepath.Join(ManifestsDir(), file)) //nolint:gosec // One of the generated manifests in the repository.
	if err != nil {
		return nil, err
	}
	objs, err := utilyaml.ToUnstructured(raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	return objs, nil
}

func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
