//go:build node

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

package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// serveKubernetesService serves the apiserver to the node's pods, which
// reach it at the `kubernetes` Service's address (KUBERNETES_SERVICE_HOST,
// as the kubelet tells every container) and verify it with the CA their
// service account volume carries (the kube-root-ca.crt ConfigMap). The
// apiserver's own certificate names only the host's loopback, so a proxy
// with a certificate for the Service's address (and its DNS names), from a
// CA of this node's (ServiceCA), passes each request on as it came: the
// pod's bearer token authenticates it. nodeinit hands it the connections
// made to the Service's address inside the node.
func (n *Node) serveKubernetesService(ctx context.Context, apiURL *url.URL) error {
	ip := net.ParseIP(n.opts.KubernetesServiceIP)
	if ip == nil {
		return fmt.Errorf("KubernetesServiceIP %q is not an IP address", n.opts.KubernetesServiceIP)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("kubernetes", []net.IP{ip},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return fmt.Errorf("creating the kubernetes Service's certificate: %w", err)
	}
	// The file holds the serving certificate, then the CA that signed it.
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) < 2 {
		return fmt.Errorf("reading the kubernetes Service's certificate: %w", errors.Join(err, errors.New("no CA after the certificate")))
	}
	if n.serviceCA, err = certutil.EncodeCertificates(certs[1:]...); err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(n.opts.Config.CAData) {
		return errors.New("options.Config carries no CA data for the apiserver")
	}
	proxy := httputil.NewSingleHostReverseProxy(apiURL)
	proxy.Transport = &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
	}
	// Watches stream: every write goes out at once.
	proxy.FlushInterval = -1
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", n.path("service.sock"))
	if err != nil {
		return err
	}
	n.service = &http.Server{
		Handler:           proxy,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() { _ = n.service.ServeTLS(l, "", "") }()
	return nil
}

// ServiceCA is the CA of the certificate pods see at the `kubernetes`
// Service's address: what the kube-root-ca.crt ConfigMap of a namespace
// whose pods use their service account must carry (ca.crt), since no
// controller-manager publishes it here.
func (n *Node) ServiceCA() []byte { return n.serviceCA }

// apiserverEndpoints are the addresses (host:port) the `kubernetes`
// Service's EndpointSlices list, where kube-proxy sends the Service's
// connections: the address the apiserver advertises (envtest's: the
// host's address on its default route, with the secure port).
func apiserverEndpoints(ctx context.Context, cfg *rest.Config) ([]string, error) {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	var out []string
	err = waitFor(30*time.Second, func() error {
		var list discoveryv1.EndpointSliceList
		if err := c.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
			return err
		}
		out = nil
		for _, slice := range list.Items {
			for _, port := range slice.Ports {
				if port.Port == nil {
					continue
				}
				for _, ep := range slice.Endpoints {
					for _, addr := range ep.Addresses {
						out = append(out, net.JoinHostPort(addr, strconv.Itoa(int(*port.Port))))
					}
				}
			}
		}
		if len(out) == 0 {
			return errors.New("the kubernetes Service's EndpointSlices list no address")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's endpoints for kube-proxy: %w", err)
	}
	return out, nil
}

// kubeProxyArgs is kube-proxy's command line, or nil on a node without
// Services.
func (n *Node) kubeProxyArgs() []string {
	if n.kubeProxy == "" {
		return nil
	}
	return []string{n.kubeProxy, "--config=" + n.path("kube-proxy.yaml")}
}

// writeKubeProxyConfig writes kube-proxy's configuration and kubeconfig.
// iptables mode: Debian's iptables (nf_tables backend) is on this machine
// and is what kube-proxy defaults to; nftables mode would need the nft
// command too.
func (n *Node) writeKubeProxyConfig() error {
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
# kube-proxy finds the node's address on this Node (it waits for the
# kubelet to register it).
hostnameOverride: %[2]s
mode: iptables
# Traffic from the pod range is the cluster's own; the node's own processes'
# is masqueraded on its way to a Service, as on a cluster's node.
clusterCIDR: %[3]s
detectLocalMode: ClusterCIDR
# NodePorts on the node's address alone, as kube-proxy advises: not on its
# loopback, which would need route_localnet.
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# The conntrack table's size is the host's (nf_conntrack_max is not the
# namespace's): kube-proxy leaves it, and the timeouts, as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
# Without CAP_SYS_RESOURCE (this machine) -999 cannot be applied.
oomScoreAdj: 0
logging:
  verbosity: 2
`, n.path("kube-proxy.kubeconfig"), n.Name, n.opts.PodCIDR)
	if err := os.WriteFile(n.path("kube-proxy.yaml"), []byte(config), 0o600); err != nil {
		return err
	}
	return envtest.WriteKubeconfig(n.path("kube-proxy.kubeconfig"), "kube-proxy", n.opts.KubeProxy)
}
