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

// Package cdi runs CDI's real cdi-controller (kubevirt.io/containerized-
// data-importer at the version hack/cdi pins, built by hack/node/cdi.sh)
// against an envtest apiserver, as a host process the way test/kubevirt
// runs virt-controller. Its worker Pods (importer, cloner, upload server)
// need a real kubelet and CDI's images on it: test/node. Every other tier
// runs CDI's stand-in (test/sim/cdi).
package cdi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/netns"
	"github.com/cozystack/cluster-api-workers/test/process"
)

// Version is the CDI release hack/cdi pins (and go.mod's API module).
const Version = "v1.65.0"

// Namespace is CDI's namespace, where cdi-controller keeps its lease and
// its certificates' ConfigMaps: the operator's default, and what
// cdi-controller assumes when it has no service account's namespace file.
const Namespace = "cdi"

// The images cdi-controller starts its worker Pods from, named as CDI's
// operator names them; test/node builds and imports them into the node.
const (
	ImporterImage     = "quay.io/kubevirt/cdi-importer:" + Version
	ClonerImage       = "quay.io/kubevirt/cdi-cloner:" + Version
	UploadServerImage = "quay.io/kubevirt/cdi-uploadserver:" + Version
)

// ControllerUser is the identity cdi-controller acts as: its service
// account's, as the operator deploys it.
const ControllerUser = "system:serviceaccount:" + Namespace + ":cdi-sa"

// Options configure cdi-controller.
type Options struct {
	// LogDir keeps cdi-controller.log (and cdi-apiserver.log); a
	// temporary directory removed by Stop otherwise.
	LogDir string
}

// Controller is a running cdi-controller.
type Controller struct {
	Process *kubevirt.Process
	// APIServer is cdi-apiserver, which every CDI install runs beside the
	// controller: its admission webhooks validate every DataVolume, and
	// its DataVolume mutating webhook authorizes a clone from another
	// namespace and signs the token cdi-controller checks.
	APIServer *kubevirt.Process
	dir       string
	ownDir    bool
	// apiServerNet is cdi-apiserver's network namespace and
	// apiServerAddr the host's forward to it, the webhooks' address.
	apiServerNet  *netns.Namespace
	apiServerAddr string
}

// Start installs what CDI's operator would (the namespace, the CDI CR,
// cdi-controller's identity) into env and starts cdi-controller, whose
// binary hack/node/cdi.sh builds into the cache (minutes cold, cached
// after). cdi-controller creates the CDIConfig and the StorageProfiles
// itself. It returns once the process is started.
func Start(ctx context.Context, env *envtest.Environment, opts Options) (_ *Controller, rerr error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	c := &Controller{}
	if c.dir, c.ownDir, err = process.WorkDir(opts.LogDir, "cdi-"); err != nil {
		return nil, err
	}
	defer func() {
		if rerr != nil {
			rerr = errors.Join(rerr, c.Stop())
		}
	}()
	// The kinds only cdi-controller needs: it watches every CDI kind and
	// exits on the first the apiserver does not serve.
	if _, err := crenvtest.InstallCRDs(env.Config, crenvtest.CRDInstallOptions{
		Paths: []string{filepath.Join(envtest.RepoRoot(), envtest.CDIControllerCRDPath())}, ErrorIfPathMissing: true, MaxTime: 2 * time.Minute,
	}); err != nil {
		return nil, fmt.Errorf("installing the CRDs cdi-controller watches: %w", err)
	}
	if err := install(ctx, env, bin); err != nil {
		return nil, err
	}
	cfg, err := env.AddUser(ControllerUser)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(c.dir, "cdi-controller.kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "cdi", cfg); err != nil {
		return nil, err
	}
	keys := filepath.Join(c.dir, "token-keys")
	if err := writeTokenKeys(keys); err != nil {
		return nil, err
	}
	certs := filepath.Join(c.dir, "certs")
	if err := writeUploadSigners(ctx, env.Client, certs); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, env, bin, keys); err != nil {
		return nil, err
	}
	// cdi-controller reads its clone token keys from a fixed path
	// (/var/run/cdi/token/keys, where the operator mounts their Secret)
	// and writes /tmp/ready: it runs in a mount namespace of its own with
	// a fresh /run and /tmp, so neither touches the host's.
	script := `set -e
mount -t tmpfs -o mode=0755 cdi-run /run
mkdir -p /run/cdi/token/keys /run/cdi-controller
cp "$1"/id_rsa "$1"/id_rsa.pub /run/cdi/token/keys/
cp "$2" /run/cdi-controller/kubeconfig
cp -r "$4" /run/cdi-controller/certs
mount -t tmpfs -o mode=1777 cdi-tmp /tmp
exec "$3" --kubeconfig=/run/cdi-controller/kubeconfig -v=2
`
	// On the host's network, as a Pod on the pod network: it polls each
	// importer Pod's progress at the Pod's address.
	args := []string{"--mount", "--fork", "--kill-child", "--", "env",
		"IMPORTER_IMAGE=" + ImporterImage,
		"CLONER_IMAGE=" + ClonerImage,
		"UPLOADSERVER_IMAGE=" + UploadServerImage,
		// Never run here (no oVirt), but required.
		"OVIRT_POPULATOR_IMAGE=quay.io/kubevirt/ovirt-populator:" + Version,
		"UPLOADPROXY_SERVICE=cdi-uploadproxy",
		// The node has every image it needs and no registry to pull from.
		"PULL_POLICY=IfNotPresent",
		"INSTALLER_PART_OF_LABEL=cluster-api-workers-test",
		"INSTALLER_VERSION_LABEL=" + Version,
		"UPLOAD_SERVER_KEY_FILE=/run/cdi-controller/certs/" + uploadServerSigner + "/tls.key",
		"UPLOAD_SERVER_CERT_FILE=/run/cdi-controller/certs/" + uploadServerSigner + "/tls.crt",
		"UPLOAD_CLIENT_KEY_FILE=/run/cdi-controller/certs/" + uploadClientSigner + "/tls.key",
		"UPLOAD_CLIENT_CERT_FILE=/run/cdi-controller/certs/" + uploadClientSigner + "/tls.crt",
		"sh", "-c", script, "sh", keys, kubeconfig, filepath.Join(bin, "cdi-controller"), certs}
	c.Process = kubevirt.StartProcess("cdi-controller", "unshare", args, filepath.Join(c.dir, "cdi-controller.log"), time.Second)
	return c, nil
}

// Stop stops cdi-controller and removes its temporary directory.
func (c *Controller) Stop() error {
	if c == nil {
		return nil
	}
	var err error
	if c.Process != nil {
		err = c.Process.Stop()
	}
	if c.APIServer != nil {
		err = errors.Join(err, c.APIServer.Stop())
	}
	if c.apiServerNet != nil {
		err = errors.Join(err, c.apiServerNet.Close())
	}
	if c.ownDir {
		err = errors.Join(err, os.RemoveAll(c.dir))
	}
	return err
}

// hostPort is the host and port of an apiserver URL.
func hostPort(apiURL string) string {
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" {
		return apiURL
	}
	return u.Host
}

// listenAddr is where a forward to the apiserver at apiURL listens in a
// network namespace: its address, or the loopback's for localhost.
func listenAddr(apiURL string) string {
	addr := hostPort(apiURL)
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "localhost" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// binDir builds (or finds in the cache) CDI's binaries.
func binDir() (string, error) {
	cmd := exec.Command("bash", filepath.Join(envtest.RepoRoot(), "hack", "node", "cdi.sh"), "bin") //nolint:gosec,noctx // Our own script; it ends on its own.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, os.Stderr)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/node/cdi.sh bin: %w: %s", err, stderr.String())
	}
	bin, ok := strings.CutPrefix(strings.TrimSpace(stdout.String()), "bin=")
	if !ok {
		return "", fmt.Errorf("hack/node/cdi.sh bin printed %q, want bin=", stdout.String())
	}
	return bin, nil
}

// install creates CDI's namespace, the roles and bindings CDI's operator
// gives cdi-controller and cdi-apiserver (written by the operator's own
// code into bin by hack/node/cdi.sh, for the service accounts whose names
// ControllerUser and APIServerUser carry), and the CDI CR reported
// deployed (the import controller reads the workloads' node placement from
// it and creates no importer Pod without one).
func install(ctx context.Context, env *envtest.Environment, bin string) error {
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	if err := env.CreateManifests(ctx, []string{filepath.Join(bin, "operator-rbac.yaml")}); err != nil {
		return fmt.Errorf("granting CDI's operator roles: %w", err)
	}
	// The CRD has no status subresource: the status goes in with the
	// object.
	cr := &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "cdi"}}
	cr.Status.Phase = "Deployed" // sdkapi.PhaseDeployed
	cr.Status.OperatorVersion, cr.Status.TargetVersion, cr.Status.ObservedVersion = Version, Version, Version
	if err := c.Create(ctx, cr); err != nil {
		return fmt.Errorf("creating the CDI CR: %w", err)
	}
	return nil
}

// The certificate authorities of host-assisted clones, named as CDI's
// operator names their Secrets: the upload server's (its serving
// certificates) and its clients' (the cloner's client certificates).
const (
	uploadServerSigner = "cdi-uploadserver-signer"
	uploadClientSigner = "cdi-uploadserver-client-signer"
)

// writeUploadSigners writes both authorities' key and certificate under
// dir/<name>/ (cdi-controller signs the upload server's and the cloner's
// certificates with them) and publishes each certificate in the
// <name>-bundle ConfigMap in CDI's namespace, where the upload server and
// the cloner read whom to trust: what CDI's operator does with its cert
// manager.
func writeUploadSigners(ctx context.Context, c client.Client, dir string) error {
	for _, name := range []string{uploadServerSigner, uploadClientSigner} {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: name}, key)
		if err != nil {
			return err
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return err
		}
		certPEM, err := certutil.EncodeCertificates(ca)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name, "tls.key"), keyPEM, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name, "tls.crt"), certPEM, 0o600); err != nil {
			return err
		}
		bundle := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name + "-bundle"},
			Data:       map[string]string{"ca-bundle.crt": string(certPEM)},
		}
		if err := c.Create(ctx, bundle); err != nil {
			return fmt.Errorf("creating ConfigMap %s: %w", bundle.Name, err)
		}
	}
	return nil
}

// writeTokenKeys writes the RSA key pair cdi-controller signs and checks
// clone tokens with (the operator's cdi-api-signing-key Secret): id_rsa
// and id_rsa.pub, PEM.
func writeTokenKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "id_rsa"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "id_rsa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}
