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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// frontProxyArgs configures the apiserver's front proxy (request header)
// authentication as kubeadm does, with a CA of its own in dir. The apiserver
// then publishes the CA in kube-system/extension-apiserver-authentication,
// which extension apiservers read at start (virt-api refuses to start
// without it), and proxies requests for an aggregated API (an APIService)
// with the CA's front-proxy-client certificate, which those apiservers
// authenticate.
func frontProxyArgs(dir string) (map[string]string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "front-proxy-ca"}, key)
	if err != nil {
		return nil, fmt.Errorf("creating the front proxy CA: %w", err)
	}
	caPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "front-proxy-ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		return nil, err
	}
	clientCert, clientKey, err := frontProxyClient(dir, ca, key)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"proxy-client-cert-file":             clientCert,
		"proxy-client-key-file":              clientKey,
		"requestheader-client-ca-file":       caFile,
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
	}, nil
}

// frontProxyClient writes the front-proxy-client certificate, signed by the
// front proxy CA, and its key to dir and returns their paths.
func frontProxyClient(dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "front-proxy-client"},
		NotBefore:    ca.NotBefore,
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", fmt.Errorf("signing the front proxy client certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "front-proxy-client.crt"), filepath.Join(dir, "front-proxy-client.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WriteKubeconfig writes a kubeconfig with the config's server and
// credentials (client certificate or token), its cluster, user and context
// all called name.
func WriteKubeconfig(path, name string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return clientcmd.WriteToFile(*kc, path)
}

// AddUser returns a rest.Config that authenticates as the named user (and
// groups) with a client certificate the apiserver's CA signed, as a service
// account or a node component would authenticate. What the user may do is
// what RBAC grants it.
func (e *Environment) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.AddUser(crenvtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return u.Config(), nil
}
