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
	"net"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestControlPlanesFrontTheHarnessCluster: the control plane the harness
// gets from ControlPlanes (no guest boots here) is dialled by guests at
// GuestHostAddress, which the Cluster's controlPlaneEndpoint and
// cluster-info carry, while the management side reaches it at 127.0.0.1
// through the <cluster>-kubeconfig Secret; stopping the Workload stops it.
func TestControlPlanesFrontTheHarnessCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	planes := &ControlPlanes{KubernetesVersion: "v1.36.3"}
	key := client.ObjectKey{Namespace: "tenants", Name: "guests"}
	w, err := planes.StartControlPlane(ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	cp := planes.Get(key)
	g.Expect(cp).NotTo(BeNil())
	stopped := false
	defer func() {
		if !stopped {
			_ = w.Stop()
		}
	}()

	port := strconv.Itoa(cp.Port)
	g.Expect(w.Endpoint).To(Equal(net.JoinHostPort(GuestHostAddress, port)), "the Cluster's controlPlaneEndpoint is what guests dial")
	g.Expect(w.Host()).To(Equal(GuestHostAddress))
	g.Expect(w.Port()).To(BeEquivalentTo(cp.Port))
	g.Expect(w.CACert).To(Equal(cp.CACert))

	secrets, err := w.ClusterSecrets(key)
	g.Expect(err).NotTo(HaveOccurred())
	byName := map[string]*corev1.Secret{}
	for _, s := range secrets {
		byName[s.Name] = s
	}
	kubeconfig := byName[secret.Name(key.Name, secret.Kubeconfig)]
	g.Expect(kubeconfig).NotTo(BeNil())
	cfg, err := clientcmd.Load(kubeconfig.Data[secret.KubeconfigDataName])
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range cfg.Clusters {
		g.Expect(c.Server).To(Equal("https://"+net.JoinHostPort("127.0.0.1", port)), "the management side reaches the apiserver on the host")
	}
	g.Expect(byName[secret.Name(key.Name, secret.ClusterCA)].Data[secret.TLSCrtDataName]).To(Equal(cp.CACert))

	// The kubeconfig the Secret carries works, and cluster-info sends
	// joining guests to the guest-side endpoint.
	rest, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig.Data[secret.KubeconfigDataName])
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(rest, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	info := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, info)).To(Succeed())
	clusterInfo, err := clientcmd.Load([]byte(info.Data[bootstrapapi.KubeConfigKey]))
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range clusterInfo.Clusters {
		g.Expect(c.Server).To(Equal("https://" + w.Endpoint))
	}

	g.Expect(w.Stop()).To(Succeed())
	stopped = true
	g.Expect(cp.Dir).NotTo(BeADirectory(), "stopping the Workload stops the control plane and removes its files")
}
