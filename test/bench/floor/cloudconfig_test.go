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

package floor

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestCloudConfigJoinsAsTheMachine reads the floor's cloud-config back as
// Kairos and kubeadm would: a #cloud-config whose network stage turns on
// IPv4 forwarding in one step, then writes a private JoinConfiguration
// (token discovery, CA pinned, the node named after the VM with its
// providerID) and runs kubeadm join on it, only on a node that has not
// joined.
func TestCloudConfigJoinsAsTheMachine(t *testing.T) {
	g := NewWithT(t)
	hash := "sha256:" + strings.Repeat("ab", 32)
	data, err := cloudConfig("pool-vm-1", "kubevirt://pool-vm-1", "10.0.0.1:6443", "abcdef.0123456789abcdef", []string{hash})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(HavePrefix("#cloud-config\n"))

	doc := cloudConfigDoc{}
	g.Expect(sigsyaml.UnmarshalStrict(data, &doc)).To(Succeed())
	g.Expect(doc.Stages).To(HaveKey("network"))
	g.Expect(doc.Stages["network"]).To(HaveLen(2))
	kernel := doc.Stages["network"][0]
	g.Expect(kernel.Sysctl).To(Equal(map[string]string{"net.ipv4.ip_forward": "1"}))
	g.Expect(kernel.Commands).To(BeEmpty())
	st := doc.Stages["network"][1]
	g.Expect(st.If).To(Equal("[ ! -f /etc/kubernetes/kubelet.conf ]"))
	g.Expect(st.Commands).To(Equal([]string{"kubeadm join --config " + joinConfigPath}))
	g.Expect(st.Files).To(HaveLen(1))
	g.Expect(st.Files[0].Path).To(Equal(joinConfigPath))
	g.Expect(st.Files[0].Permissions).To(Equal(uint32(0o600)))

	join := &kubeadmv1beta4.JoinConfiguration{}
	g.Expect(sigsyaml.UnmarshalStrict([]byte(st.Files[0].Content), join)).To(Succeed())
	g.Expect(join.Kind).To(Equal("JoinConfiguration"))
	g.Expect(join.APIVersion).To(Equal(kubeadmv1beta4.GroupVersion.String()))
	g.Expect(join.NodeRegistration.Name).To(Equal("pool-vm-1"))
	g.Expect(join.NodeRegistration.KubeletExtraArgs).To(Equal([]kubeadmv1beta4.Arg{{Name: "provider-id", Value: "kubevirt://pool-vm-1"}}))
	g.Expect(join.Discovery.BootstrapToken).NotTo(BeNil())
	g.Expect(join.Discovery.BootstrapToken.Token).To(Equal("abcdef.0123456789abcdef"))
	g.Expect(join.Discovery.BootstrapToken.APIServerEndpoint).To(Equal("10.0.0.1:6443"))
	g.Expect(join.Discovery.BootstrapToken.CACertHashes).To(Equal([]string{hash}))
}
