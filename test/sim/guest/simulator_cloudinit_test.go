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

package guest

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/vmfixture"
)

// TestCloudInitImageJoinsWithCABPKUserData boots CAPK-style disks with
// the user data Cluster API's kubeadm bootstrap provider renders: the
// jinja node name becomes the VM's hostname, `kubeadm join --config` does
// the real discovery, CA pin check and TLS bootstrap, the kubelet takes
// its name and provider ID from the JoinConfiguration, and CABPK's
// sentinel is written by its own runcmd.
func TestCloudInitImageJoinsWithCABPKUserData(t *testing.T) {
	ns := namespace(t)
	cases := []struct {
		name   string
		mutate func(*kubevirtv1.VirtualMachine)
	}{
		{name: "kubeadm-nocloud-0"},
		{name: "kubeadm-configdrive-0", mutate: vmfixture.ConfigDrive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			data := cabpkUserData(t, cabpkJoin(workload.Endpoint, newToken(t, time.Hour), caPin(t)), cloudinit.BaseUserData{
				PreKubeadmCommands:  []string{"mkdir -p /etc/kubernetes/manifests"},
				PostKubeadmCommands: []string{"echo joined > /run/joined"},
				Users:               []kubeadmv1.User{{Name: "capk", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3Nza capk@example"}}},
				KubeadmVerbosity:    "--v 5",
			})
			vm := machineWith(t, ns, tc.name, containerDisk(cloudInitImage), data, tc.mutate)

			g.Eventually(func(g Gomega) {
				r := boot(g, vm)
				g.Expect(r.Phase).To(Equal(PhaseJoined), "boot: %+v", r)
				g.Expect(r.SentinelWritten).To(BeTrue())
				g.Expect(r.NodeName).To(Equal(tc.name))
				g.Expect(r.Endpoint).To(Equal(workload.Endpoint))
				g.Expect(r.Image).To(Equal(cloudInitImage))
				g.Expect(r.SSHAuthorizedKeys).To(HaveKeyWithValue("capk", []string{"ssh-ed25519 AAAAC3Nza capk@example"}))
			}, timeout, poll).Should(Succeed())

			n := getNode(g, tc.name)
			g.Expect(n.Spec.ProviderID).To(Equal("kubevirt://" + tc.name))
			g.Expect(n.Spec.Taints).To(ConsistOf(HaveField("Key", "node.cluster.x-k8s.io/uninitialized")))
			g.Expect(n.Labels).To(HaveKeyWithValue("pool", "kubeadm-peer"))
			g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
			g.Expect(n.Status.NodeInfo.OSImage).To(Equal("Ubuntu 24.04.3 LTS"))
			g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
			csrs := &certificatesv1.CertificateSigningRequestList{}
			g.Expect(workload.Client.List(context.Background(), csrs)).To(Succeed())
			g.Expect(csrs.Items).To(BeEmpty())
		})
	}
}

// TestUserDataForAnotherBootJoinsNoNode: a Kairos disk does not read
// CABPK's user data, and a cloud-init disk ignores Kairos stages, so
// neither Machine gets a Node.
func TestUserDataForAnotherBootJoinsNoNode(t *testing.T) {
	ns := namespace(t)
	cases := []struct {
		name   string
		root   string
		data   func(name string) []byte
		phase  Phase
		reason string
	}{
		{
			name: "kairos-given-cabpk-0", root: image,
			data: func(_ string) []byte {
				return cabpkUserData(t, cabpkJoin(workload.Endpoint, newToken(t, time.Hour), caPin(t)), cloudinit.BaseUserData{})
			},
			phase: PhaseIgnored, reason: "not a #cloud-config, so Kairos does not read it",
		},
		{
			name: "cloudinit-given-stages-0", root: cloudInitImage,
			data: func(n string) []byte {
				return stagesConfig(t, n, joinConfiguration(n, newToken(t, time.Hour), caPin(t)))
			},
			phase: PhaseBooted, reason: "the boot started no kubelet",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			vm := machine(t, ns, c.name, containerDisk(c.root), c.data(c.name))
			g.Eventually(func(g Gomega) {
				r := boot(g, vm)
				g.Expect(r.Phase).To(Equal(c.phase), "boot: %+v", r)
				g.Expect(r.Error).To(ContainSubstring(c.reason))
				g.Expect(r.SentinelWritten).To(BeFalse())
			}, timeout, poll).Should(Succeed())
			g.Expect(apierrors.IsNotFound(workload.Client.Get(context.Background(), client.ObjectKey{Name: c.name}, &corev1.Node{}))).To(BeTrue())
		})
	}
}
