//go:build kind && node

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

package kindnode

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

const (
	// certNamespace holds the test's issuers and certificates.
	certNamespace = "cert-probe"
	// servingDNSName is the serving certificate's name, a Service's name
	// in certNamespace as a webhook's would be.
	servingDNSName = "probe." + certNamespace + ".svc"
)

var (
	issuers      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
	certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
)

// certManagerIssues: cert-manager, installed by hack/kind/certmanager.sh
// from images built here, issues a self-signed CA certificate, a CA
// Issuer of it issues a serving certificate whose Secret holds a key pair
// that verifies against that CA for the serving name, and cainjector
// writes the CA into a ValidatingWebhookConfiguration annotated
// cert-manager.io/inject-ca-from: what our providers' webhooks and
// `clusterctl init` rely on.
func certManagerIssues(t *testing.T, cluster, kubeconfig string, config *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	start := time.Now()
	if err := kindScript(t, "certmanager.sh", cluster, kubeconfig); err != nil {
		t.Fatalf("installing cert-manager: %v", err)
	}
	t.Logf("cert-manager installed and Available in %s", time.Since(start).Round(time.Second))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dc, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: certNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issuerRef := func(name string) map[string]any { return map[string]any{"name": name, "kind": "Issuer"} }
	for _, o := range []struct {
		gvr  schema.GroupVersionResource
		kind string
		name string
		spec map[string]any
	}{
		{issuers, "Issuer", "selfsigned", map[string]any{"selfSigned": map[string]any{}}},
		{certificates, "Certificate", "ca", map[string]any{
			"isCA": true, "commonName": "kvw-probe-ca", "secretName": "ca",
			"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
			"issuerRef":  issuerRef("selfsigned"),
		}},
		{issuers, "Issuer", "ca", map[string]any{"ca": map[string]any{"secretName": "ca"}}},
		{certificates, "Certificate", "serving", map[string]any{
			"secretName": "serving", "dnsNames": []any{servingDNSName},
			"usages":    []any{"server auth", "digital signature", "key encipherment"},
			"issuerRef": issuerRef("ca"),
		}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": o.gvr.GroupVersion().String(), "kind": o.kind,
			"metadata": map[string]any{"name": o.name, "namespace": certNamespace},
			"spec":     o.spec,
		}}
		if _, err := dc.Resource(o.gvr).Namespace(certNamespace).Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("creating %s %s: %v", o.kind, o.name, err)
		}
	}

	// A webhook configuration whose CA cainjector fills from the serving
	// certificate's Secret. It selects no namespace, so it admits nothing.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "kvw-cert-probe",
			Annotations: map[string]string{"cert-manager.io/inject-ca-from": certNamespace + "/serving"},
		},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: servingDNSName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: certNamespace, Name: "probe", Path: ptr.To("/validate")},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kvw.local/cert-probe": "never"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})

	// The serving certificate's Secret: its key pair, and a chain to the
	// CA certificate's Secret.
	var ca, serving *corev1.Secret
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		for name, s := range map[string]**corev1.Secret{"ca": &ca, "serving": &serving} {
			got, err := cs.CoreV1().Secrets(certNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(got.Data[corev1.TLSCertKey]) == 0 {
				return false, nil //nolint:nilerr // Not issued yet; poll again.
			}
			*s = got
		}
		return true, nil
	})
	if err != nil {
		certificateStatus(t, dc)
		t.Fatalf("the CA and serving Secrets were not issued: %v", err)
	}
	t.Logf("certificates issued in %s", time.Since(start).Round(time.Second))

	caCert := onlyCertificate(t, "the CA Secret's tls.crt", ca.Data[corev1.TLSCertKey])
	if !caCert.IsCA || caCert.Subject.CommonName != "kvw-probe-ca" {
		t.Errorf("CA certificate: IsCA %v, subject %q; want a CA named kvw-probe-ca", caCert.IsCA, caCert.Subject)
	}
	if err := caCert.CheckSignatureFrom(caCert); err != nil {
		t.Errorf("the CA certificate is not self-signed: %v", err)
	}
	if _, err := tls.X509KeyPair(serving.Data[corev1.TLSCertKey], serving.Data[corev1.TLSPrivateKeyKey]); err != nil {
		t.Errorf("the serving Secret's tls.crt and tls.key are not a key pair: %v", err)
	}
	leaf := firstCertificate(t, "the serving Secret's tls.crt", serving.Data[corev1.TLSCertKey])
	if !bytes.Equal(onlyCertificate(t, "the serving Secret's ca.crt", serving.Data["ca.crt"]).Raw, caCert.Raw) {
		t.Errorf("the serving Secret's ca.crt is not the CA certificate")
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: servingDNSName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify against the CA for %s: %v", servingDNSName, err)
	}

	// cainjector's work: the webhook's caBundle is the serving
	// certificate's CA, and the serving certificate verifies against it.
	start = time.Now()
	var bundle []byte
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // The API server may be briefly busy; poll again.
		}
		bundle = got.Webhooks[0].ClientConfig.CABundle
		return len(bundle) > 0, nil
	})
	if err != nil {
		t.Fatalf("cainjector did not fill the webhook's caBundle: %v", err)
	}
	t.Logf("caBundle injected %s after the Secrets were there", time.Since(start).Round(time.Second))
	injected := x509.NewCertPool()
	if !injected.AppendCertsFromPEM(bundle) {
		t.Fatalf("the caBundle holds no PEM certificate: %q", bundle)
	}
	if !bytes.Equal(onlyCertificate(t, "the caBundle", bundle).Raw, caCert.Raw) {
		t.Errorf("the caBundle is not the CA certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: injected, DNSName: servingDNSName}); err != nil {
		t.Errorf("the serving certificate does not verify against the injected caBundle: %v", err)
	}

	for _, name := range []string{"ca", "serving"} {
		if ready := certificateReady(ctx, dc, name); ready != string(metav1.ConditionTrue) {
			t.Errorf("Certificate %s: Ready is %q, want True", name, ready)
		}
	}
}

// certificateReady is the status of a Certificate's Ready condition.
func certificateReady(ctx context.Context, dc dynamic.Interface, name string) string {
	u, err := dc.Resource(certificates).Namespace(certNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

// certificateStatus logs each Certificate's status, for a test that
// waited in vain.
func certificateStatus(t *testing.T, dc dynamic.Interface) {
	t.Helper()
	list, err := dc.Resource(certificates).Namespace(certNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing Certificates: %v", err)
		return
	}
	for _, u := range list.Items {
		status, _, _ := unstructured.NestedMap(u.Object, "status")
		t.Logf("Certificate %s: status %v", u.GetName(), status)
	}
}

// certificatesOf parses every PEM certificate in data.
func certificatesOf(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return certs, nil
}

// firstCertificate is the first certificate of a PEM chain.
func firstCertificate(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	certs, err := certificatesOf(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return certs[0]
}

// onlyCertificate is the one certificate of a PEM bundle.
func onlyCertificate(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	certs, err := certificatesOf(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(certs) != 1 {
		t.Fatalf("%s: %d certificates, want 1", what, len(certs))
	}
	return certs[0]
}
