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
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// NodeBootstrapTokenGroup is the group kubeadm gives node bootstrap tokens;
// the RBAC that SeedKubeadmObjects writes binds it.
const NodeBootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

// Workload is a second, bare kube-apiserver that stands in for a workload
// cluster: bootstrap-token authentication and anonymous discovery are on,
// no CRDs are installed and no controllers run.
type Workload struct {
	// Config is an admin rest.Config (system:masters).
	Config *rest.Config
	// Client is an admin client with client-go's scheme.
	Client client.Client
	// Endpoint is the API server's host:port, as kubeadm's
	// apiServerEndpoint and Cluster.spec.controlPlaneEndpoint carry it.
	Endpoint string
	// CACert is the PEM CA that signed the serving certificate: the cluster
	// CA a join pins.
	CACert []byte
	env    *crenvtest.Environment
	// stop stops an apiserver that runs elsewhere (ExternalWorkload).
	stop     func() error
	restarts apiServerRestarts
}

// StartWorkload starts a workload apiserver.
func StartWorkload() (*Workload, error) {
	binDir, err := BinaryDir()
	if err != nil {
		return nil, err
	}
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	env := &crenvtest.Environment{
		Scheme:                   scheme,
		BinaryAssetsDirectory:    binDir,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("enable-bootstrap-token-auth", "true")
	args.Set("anonymous-auth", "true")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the workload apiserver: %w", err)
	}
	w := &Workload{Config: cfg, CACert: append([]byte(nil), cfg.CAData...), env: env, restarts: apiServerRestarts{config: cfg}}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("parsing the workload apiserver address %q: %w", cfg.Host, err)
	}
	w.Endpoint = u.Host
	if w.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return w, nil
}

// ExternalWorkload fronts a workload apiserver that runs elsewhere, such
// as a kubeadm-prepared control plane that real guests join. cfg is admin
// access from this process; endpoint is host:port as nodes dial it, which
// may differ from cfg.Host (a guest behind QEMU's NAT reaches the host at
// another address); caCert is the cluster CA; stop stops the apiserver.
func ExternalWorkload(cfg *rest.Config, endpoint string, caCert []byte, stop func() error) (*Workload, error) {
	if _, _, err := net.SplitHostPort(endpoint); err != nil {
		return nil, fmt.Errorf("the workload endpoint %q is not host:port: %w", endpoint, err)
	}
	if stop == nil {
		return nil, fmt.Errorf("an external workload apiserver needs a stop function")
	}
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &Workload{Config: cfg, Client: c, Endpoint: endpoint, CACert: append([]byte(nil), caCert...), stop: stop}, nil
}

// RestartAPIServer kills the workload apiserver (SIGKILL), keeps it down
// for downtime, and starts it again with its etcd, certificates, port and
// flags; it returns once the apiserver is ready. Not for an apiserver that
// runs elsewhere (ExternalWorkload).
func (w *Workload) RestartAPIServer(ctx context.Context, downtime time.Duration) error {
	if w.env == nil {
		return errors.New("restarting an external workload apiserver is not supported")
	}
	return w.restarts.restart(ctx, downtime)
}

// Stop stops the workload apiserver.
func (w *Workload) Stop() error {
	if w.stop != nil {
		return w.stop()
	}
	return errors.Join(w.restarts.stop(), w.env.Stop())
}

// Host returns the endpoint's host and Port its port, as a Cluster's
// controlPlaneEndpoint carries them.
func (w *Workload) Host() string { return w.Endpoint[:strings.LastIndexByte(w.Endpoint, ':')] }

// Port returns the endpoint's port.
func (w *Workload) Port() int32 {
	var p int32
	_, _ = fmt.Sscanf(w.Endpoint[strings.LastIndexByte(w.Endpoint, ':')+1:], "%d", &p)
	return p
}

// Kubeconfig returns an admin kubeconfig for the workload apiserver.
func (w *Workload) Kubeconfig(clusterName string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: w.Config.Host, CertificateAuthorityData: w.Config.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: w.Config.CertData,
		ClientKeyData:         w.Config.KeyData,
		Token:                 w.Config.BearerToken,
	}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: "admin"}
	cfg.CurrentContext = clusterName
	return clientcmd.Write(*cfg)
}

// ClusterSecrets returns the management-cluster Secrets Cluster API keeps
// for a cluster whose control plane is this apiserver: <cluster>-kubeconfig
// (read by the ClusterCache) and <cluster>-ca (holding only the CA
// certificate, as a worker's CA pin needs).
func (w *Workload) ClusterSecrets(cluster client.ObjectKey) ([]*corev1.Secret, error) {
	kubeconfig, err := w.Kubeconfig(cluster.Name)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	return []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig), Labels: labels},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{secret.KubeconfigDataName: kubeconfig},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.ClusterCA), Labels: labels},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{secret.TLSCrtDataName: w.CACert},
		},
	}, nil
}

// KubeadmSeed describes the objects `kubeadm init` would have left.
type KubeadmSeed struct {
	// KubernetesVersion goes into the ClusterConfiguration.
	KubernetesVersion string
	// ClusterName names the cluster in cluster-info and kubeadm-config.
	ClusterName string
}

// SeedKubeadmObjects creates, in the workload apiserver, what `kubeadm init
// phase bootstrap-token` and `kubeadm init phase upload-config all` create
// and a joining worker reads: the unsigned cluster-info ConfigMap and its
// anonymous read access, the kubeadm-config and kubelet-config ConfigMaps,
// and the RBAC that lets node bootstrap tokens read them, create
// CertificateSigningRequests and get Nodes. It is idempotent.
func (w *Workload) SeedKubeadmObjects(ctx context.Context, seed KubeadmSeed) error {
	clusterInfo, err := w.clusterInfoKubeconfig()
	if err != nil {
		return err
	}
	clusterConfiguration := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %s
kubernetesVersion: %s
controlPlaneEndpoint: %s
certificatesDir: /etc/kubernetes/pki
networking:
  dnsDomain: cluster.local
  serviceSubnet: 10.0.0.0/24
`, seed.ClusterName, seed.KubernetesVersion, w.Endpoint)
	kubeletConfiguration := `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
- 10.0.0.10
clusterDomain: cluster.local
`
	bootstrappers := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: NodeBootstrapTokenGroup}
	nodes := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}
	objs := []client.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo},
			Data:       map[string]string{bootstrapapi.KubeConfigKey: string(clusterInfo)},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo}, Verbs: []string{"get"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "kubeadm:bootstrap-signer-clusterinfo"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
			Data:       map[string]string{"ClusterConfiguration": clusterConfiguration},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubelet-config"},
			Data:       map[string]string{"kubelet": kubeletConfiguration},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm:nodes-kubeadm-config"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kubeadm-config"}, Verbs: []string{"get"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm:nodes-kubeadm-config"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:nodes-kubeadm-config"},
			Subjects:   []rbacv1.Subject{bootstrappers, nodes},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm:kubelet-config"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kubelet-config"}, Verbs: []string{"get"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm:kubelet-config"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:kubelet-config"},
			Subjects:   []rbacv1.Subject{bootstrappers, nodes},
		},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubeadm:get-nodes"},
			Subjects:   []rbacv1.Subject{bootstrappers},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:kubelet-bootstrap"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
			Subjects:   []rbacv1.Subject{bootstrappers},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-autoapprove-bootstrap"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
			Subjects:   []rbacv1.Subject{bootstrappers},
		},
	}
	for _, obj := range objs {
		if err := w.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("seeding %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

// clusterInfoKubeconfig is the cluster-info payload: the endpoint and CA,
// no credentials.
func (w *Workload) clusterInfoKubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[""] = &clientcmdapi.Cluster{Server: w.Config.Host, CertificateAuthorityData: w.CACert}
	return clientcmd.Write(*cfg)
}

// SignClusterInfo adds the detached JWS signature of cluster-info for a
// bootstrap token, as the controller-manager's bootstrapsigner would, so a
// joining node can verify cluster-info with that token. The token is read
// from its bootstrap-token-<id> Secret in kube-system.
func (w *Workload) SignClusterInfo(ctx context.Context, tokenID string) error {
	tokenSecret := &corev1.Secret{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(tokenID)}, tokenSecret); err != nil {
		return fmt.Errorf("reading bootstrap token %s: %w", tokenID, err)
	}
	cm := &corev1.ConfigMap{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm); err != nil {
		return fmt.Errorf("reading cluster-info: %w", err)
	}
	sig, err := jws.ComputeDetachedSignature(cm.Data[bootstrapapi.KubeConfigKey], tokenID, string(tokenSecret.Data[bootstrapapi.BootstrapTokenSecretKey]))
	if err != nil {
		return fmt.Errorf("signing cluster-info: %w", err)
	}
	cm.Data[bootstrapapi.JWSSignatureKeyPrefix+tokenID] = sig
	return w.Client.Update(ctx, cm)
}

// UnsignClusterInfo removes a token's cluster-info signature, as the
// bootstrapsigner does once the token is deleted or expired.
func (w *Workload) UnsignClusterInfo(ctx context.Context, tokenID string) error {
	cm := &corev1.ConfigMap{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm); err != nil {
		return fmt.Errorf("reading cluster-info: %w", err)
	}
	delete(cm.Data, bootstrapapi.JWSSignatureKeyPrefix+tokenID)
	return w.Client.Update(ctx, cm)
}
