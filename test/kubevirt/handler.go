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

package kubevirt

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
)

// HandlerManifest is virt-handler's DaemonSet as virt-operator deploys it
// (generated into the manifests directory by hack/gen-external-crds.sh).
const HandlerManifest = "virt-handler.yaml"

// DeployHandler deploys virt-handler as virt-operator does, for clusters
// with real nodes (test/node): KubeVirt's CA bundle (the kubevirt-ca
// ConfigMap virt-handler trusts client certificates from), virt-handler's
// serving certificate Secret (its health endpoint, which the kubelet probes,
// serves TLS), and the DaemonSet. A DaemonSet controller and a scheduler
// must run for its Pods to exist. The client certificate Secrets
// virt-operator also creates (for migrations and vsock) are left out: the
// DaemonSet marks them optional.
func (c *ControlPlane) DeployHandler(ctx context.Context) error {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("kubevirt.io:system:node:virt-handler", nil, nil)
	if err != nil {
		return fmt.Errorf("creating virt-handler's serving certificate: %w", err)
	}
	// The file holds the serving certificate, then the CA that signed it.
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) < 2 {
		return fmt.Errorf("reading virt-handler's serving certificate: %v", err)
	}
	caPEM, err := certutil.EncodeCertificates(certs[1:]...)
	if err != nil {
		return err
	}
	if err := c.client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "kubevirt-ca"},
		Data:       map[string]string{"ca-bundle": string(caPEM)},
	}); err != nil {
		return fmt.Errorf("creating the kubevirt-ca ConfigMap: %w", err)
	}
	if err := c.client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "kubevirt-virt-handler-server-certs"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}); err != nil {
		return fmt.Errorf("creating virt-handler's serving certificate Secret: %w", err)
	}
	manifest, err := readManifest(HandlerManifest)
	if err != nil {
		return err
	}
	for i := range manifest {
		if err := c.client.Create(ctx, &manifest[i]); err != nil {
			return fmt.Errorf("creating %s %s from %s: %w", manifest[i].GetKind(), manifest[i].GetName(), HandlerManifest, err)
		}
	}
	return nil
}
