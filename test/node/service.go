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
	"time"

	certutil "k8s.io/client-go/util/cert"
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
