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

package qemu

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/process"
)

// GuestHostAddress is the host as a guest on QEMU user networking sees it:
// connections to it reach the host's loopback.
const GuestHostAddress = "10.0.2.2"

// ControlPlaneOptions shape the workload control plane.
type ControlPlaneOptions struct {
	// KubernetesVersion is the version the kubeadm-config declares; it
	// must match the kubelet and kubeadm on the worker disk.
	KubernetesVersion string
	// ClusterName names the cluster in kubeadm-config and cluster-info.
	ClusterName string
	// Dir holds certificates, kubeconfigs, etcd data and logs; a fresh
	// temporary directory when empty.
	Dir string
	// GuestHost is the address guests dial the apiserver at, in its
	// serving certificate; GuestHostAddress when empty. A guest behind
	// KubeVirt's masquerade binding is 10.0.2.2 itself, so the real node's
	// guests reach the host at an address the node forwards (test/node).
	GuestHost string
}

// ControlPlane is a workload cluster's control plane on the host: etcd,
// kube-apiserver and kube-controller-manager built from source, prepared
// with `kubeadm init phase` as kubeadm would prepare a control-plane node,
// serving guests at GuestHostAddress (or ControlPlaneOptions.GuestHost).
type ControlPlane struct {
	// Dir holds the certificates (pki/), kubeconfigs and process logs.
	Dir string
	// Port is the apiserver's secure port.
	Port int
	// GuestEndpoint is host:port as guests dial it, the Cluster's
	// controlPlaneEndpoint.
	GuestEndpoint string
	// CACert is the cluster CA certificate (PEM) a join pins.
	CACert []byte
	// AdminKubeconfig is a system:masters kubeconfig for the host
	// (https://127.0.0.1:<port>).
	AdminKubeconfig []byte
	// Config and Client are admin access from the host.
	Config *rest.Config
	Client client.Client

	procs []*process.Process
}

// StartControlPlane prepares and starts the control plane. Stop it with
// Stop, also after an error.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (_ *ControlPlane, rerr error) {
	if opts.KubernetesVersion == "" || opts.ClusterName == "" {
		return nil, fmt.Errorf("the control plane needs a Kubernetes version and a cluster name")
	}
	binDir, err := envtest.BinaryDir()
	if err != nil {
		return nil, err
	}
	kubeadm, err := envtest.KubeadmBinary()
	if err != nil {
		return nil, err
	}
	controllerManager, err := envtest.ControllerManagerBinary()
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "qemu-control-plane-"); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(ctx, 3)
	if err != nil {
		return nil, err
	}
	if opts.GuestHost == "" {
		opts.GuestHost = GuestHostAddress
	}
	cp := &ControlPlane{Dir: dir, Port: ports[0], GuestEndpoint: net.JoinHostPort(opts.GuestHost, strconv.Itoa(ports[0]))}
	defer func() {
		if rerr != nil {
			cp.Stop()
		}
	}()
	hostEndpoint := net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.Port))
	pki := filepath.Join(dir, "pki")

	// Two kubeadm configurations: the host one places the certificates in
	// dir and names the host endpoint in the kubeconfigs it writes; the
	// uploaded one is what a joining node reads, with the paths a node uses.
	hostConfig := filepath.Join(dir, "kubeadm-host.yaml")
	if err := os.WriteFile(hostConfig, kubeadmConfig(opts, hostEndpoint, pki, cp.Port), 0o600); err != nil {
		return nil, err
	}
	nodeConfig := filepath.Join(dir, "kubeadm-node.yaml")
	if err := os.WriteFile(nodeConfig, kubeadmConfig(opts, cp.GuestEndpoint, "/etc/kubernetes/pki", cp.Port), 0o600); err != nil {
		return nil, err
	}
	superAdmin := filepath.Join(dir, "super-admin.conf")
	for _, args := range [][]string{
		{"init", "phase", "certs", "all", "--config", hostConfig},
		{"init", "phase", "kubeconfig", "super-admin", "--config", hostConfig, "--kubeconfig-dir", dir},
		{"init", "phase", "kubeconfig", "controller-manager", "--config", hostConfig, "--kubeconfig-dir", dir},
	} {
		if err := runKubeadm(ctx, kubeadm, args); err != nil {
			return nil, err
		}
	}

	// kubeadm writes the local endpoint (advertiseAddress, a guest-side
	// address) into the controller-manager's kubeconfig; on this host the
	// apiserver is at the loopback endpoint.
	if err := setKubeconfigServer(filepath.Join(dir, "controller-manager.conf"), "https://"+hostEndpoint); err != nil {
		return nil, err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	etcd, err := startProcess(dir, "etcd", filepath.Join(binDir, "etcd"),
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(ports[2]),
		"--unsafe-no-fsync=true",
	)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, etcd)

	// The flags of kubeadm's kube-apiserver manifest that a worker join
	// needs; it listens on every address so that guests reach it.
	apiserver, err := startProcess(dir, "kube-apiserver", filepath.Join(binDir, "kube-apiserver"),
		"--bind-address=0.0.0.0",
		"--secure-port="+strconv.Itoa(cp.Port),
		"--etcd-servers="+etcdURL,
		"--client-ca-file="+filepath.Join(pki, "ca.crt"),
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--kubelet-client-certificate="+filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+filepath.Join(pki, "apiserver-kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/12",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
	)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, apiserver)

	if cp.AdminKubeconfig, err = os.ReadFile(superAdmin); err != nil { //nolint:gosec // kubeadm's output in the control plane's directory.
		return nil, err
	}
	if cp.CACert, err = os.ReadFile(filepath.Join(pki, "ca.crt")); err != nil { //nolint:gosec // kubeadm's output in the control plane's directory.
		return nil, err
	}
	if cp.Config, err = clientcmd.RESTConfigFromKubeConfig(cp.AdminKubeconfig); err != nil {
		return nil, err
	}
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if cp.Client, err = client.New(cp.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx, apiserver); err != nil {
		return nil, err
	}

	// CSR approval and signing, the bootstrap signer (cluster-info
	// signatures) and the token cleaner, with the cluster CA, as on a
	// kubeadm control plane.
	kcm, err := startProcess(dir, "kube-controller-manager", controllerManager,
		"--kubeconfig="+filepath.Join(dir, "controller-manager.conf"),
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--cluster-signing-cert-file="+filepath.Join(pki, "ca.crt"),
		"--cluster-signing-key-file="+filepath.Join(pki, "ca.key"),
		"--root-ca-file="+filepath.Join(pki, "ca.crt"),
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--secure-port=0",
	)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, kcm)

	for _, args := range [][]string{
		{"init", "phase", "upload-config", "kubeadm", "--config", nodeConfig, "--kubeconfig", superAdmin},
		{"init", "phase", "upload-config", "kubelet", "--config", nodeConfig, "--kubeconfig", superAdmin},
		{"init", "phase", "bootstrap-token", "--config", hostConfig, "--kubeconfig", superAdmin, "--skip-token-print"},
	} {
		if err := runKubeadm(ctx, kubeadm, args); err != nil {
			return nil, err
		}
	}
	if err := cp.prepareForGuests(ctx); err != nil {
		return nil, err
	}
	// Without it nothing signs cluster-info or the kubelet's certificate.
	if kcm.Exited() {
		return nil, fmt.Errorf("kube-controller-manager exited: %s", kcm.Tail(8<<10))
	}
	return cp, nil
}

// prepareForGuests points cluster-info at the endpoint guests dial (the
// bootstrap-token phase wrote the host endpoint it was given) and removes
// the token that phase made: the bootstrap provider makes its own.
func (cp *ControlPlane) prepareForGuests(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm); err != nil {
		return fmt.Errorf("reading cluster-info: %w", err)
	}
	info, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		return fmt.Errorf("parsing cluster-info: %w", err)
	}
	for _, c := range info.Clusters {
		c.Server = "https://" + cp.GuestEndpoint
	}
	b, err := clientcmd.Write(*info)
	if err != nil {
		return err
	}
	cm.Data[bootstrapapi.KubeConfigKey] = string(b)
	if err := cp.Client.Update(ctx, cm); err != nil {
		return fmt.Errorf("updating cluster-info: %w", err)
	}
	return cp.Client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingFields{"type": string(bootstrapapi.SecretTypeBootstrapToken)})
}

// waitReady waits for the apiserver's /readyz, or for its process to exit.
func (cp *ControlPlane) waitReady(ctx context.Context, apiserver *process.Process) error {
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	rc := cs.Discovery().RESTClient()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if apiserver.Exited() {
			return false, fmt.Errorf("kube-apiserver exited: %s", apiserver.Tail(8<<10))
		}
		return rc.Get().AbsPath("/readyz").Do(ctx).Error() == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the workload apiserver: %w", err)
	}
	return nil
}

// Stop stops the control plane's processes, newest first, and removes its
// directory.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		_ = cp.procs[i].Stop(10 * time.Second)
	}
	cp.procs = nil
	_ = os.RemoveAll(cp.Dir)
}

// Logs returns the tail of every process's log, for failure output.
func (cp *ControlPlane) Logs() string {
	var b strings.Builder
	for _, p := range cp.procs {
		fmt.Fprintf(&b, "==> %s\n%s\n", p.Name, p.Tail(8<<10))
	}
	return b.String()
}

func kubeadmConfig(opts ControlPlaneOptions, endpoint, certificatesDir string, port int) []byte {
	// advertiseAddress only shapes the serving certificate here (the
	// apiserver runs from flags); kubeadm refuses a loopback address.
	return []byte(fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %[5]s
  bindPort: %[6]d
nodeRegistration:
  name: %[1]s-control-plane
  criSocket: unix:///run/containerd/containerd.sock
bootstrapTokens:
- ttl: 1m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %[1]s
kubernetesVersion: %[2]s
controlPlaneEndpoint: %[3]s
certificatesDir: %[4]s
apiServer:
  certSANs:
  - %[5]s
  - 127.0.0.1
  - localhost
networking:
  dnsDomain: cluster.local
  serviceSubnet: 10.96.0.0/12
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failSwapOn: false
`, opts.ClusterName, opts.KubernetesVersion, endpoint, certificatesDir, opts.GuestHost, port))
}

func setKubeconfigServer(path, server string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func runKubeadm(ctx context.Context, kubeadm string, args []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubeadm, args...).CombinedOutput() //nolint:gosec // kubeadm from the test cache.
	if err != nil {
		return fmt.Errorf("kubeadm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func freePorts(ctx context.Context, n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	var lc net.ListenConfig
	for range n {
		l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startProcess starts a control plane process with its output in the
// directory's <name>.log.
func startProcess(dir, name, bin string, args ...string) (*process.Process, error) {
	//nolint:gosec,noctx // kube-apiserver, etcd or kube-controller-manager from the test cache; it runs until Stop, not until a context ends.
	cmd := exec.Command(bin, args...)
	// Its own process group: a Ctrl-C at the terminal reaches the test,
	// which stops the control plane in order, not the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return process.Start(name, filepath.Join(dir, name+".log"), cmd)
}
