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
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	sigsyaml "sigs.k8s.io/yaml"
)

// providerIDPrefix is the KubeVirt providerID scheme: the kubelet registers
// kubevirt://<vm> and the infrastructure machine reports the same.
const providerIDPrefix = "kubevirt://"

// joinConfigPath is where the join stage writes kubeadm's configuration.
const joinConfigPath = "/run/kubeadm/join.yaml"

// cloudConfigDoc is the part of a Kairos #cloud-config the floor writes:
// one yip stage that joins with kubeadm on the first boot.
type cloudConfigDoc struct {
	Stages map[string][]yipStage `json:"stages"`
}

type yipStage struct {
	Name     string            `json:"name"`
	If       string            `json:"if,omitempty"`
	Sysctl   map[string]string `json:"sysctl,omitempty"`
	Files    []yipFile         `json:"files,omitempty"`
	Commands []string          `json:"commands,omitempty"`
}

type yipFile struct {
	Path        string `json:"path"`
	Permissions uint32 `json:"permissions"`
	Content     string `json:"content"`
}

// cloudConfig renders the least a Kairos disk needs to join as node name
// with providerID: IPv4 forwarding on (a Kairos core image leaves it off
// and kubeadm's preflight refuses to join without it; yip applies a
// step's sysctls after its commands, hence a step of its own), kubeadm's
// JoinConfiguration (token discovery with the CA pinned) and `kubeadm
// join`, skipped once the node has joined.
func cloudConfig(name, providerID, endpoint, token string, caHashes []string) ([]byte, error) {
	join := kubeadmv1beta4.JoinConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeadmv1beta4.GroupVersion.String(), Kind: "JoinConfiguration"},
		NodeRegistration: kubeadmv1beta4.NodeRegistrationOptions{
			Name:             name,
			KubeletExtraArgs: []kubeadmv1beta4.Arg{{Name: "provider-id", Value: providerID}},
		},
		Discovery: kubeadmv1beta4.Discovery{
			BootstrapToken: &kubeadmv1beta4.BootstrapTokenDiscovery{Token: token, APIServerEndpoint: endpoint, CACertHashes: caHashes},
		},
	}
	joinJSON, err := json.Marshal(join)
	if err != nil {
		return nil, err
	}
	doc, err := sigsyaml.Marshal(cloudConfigDoc{Stages: map[string][]yipStage{
		"network": {{
			Name:   "Turn on IPv4 forwarding",
			Sysctl: map[string]string{"net.ipv4.ip_forward": "1"},
		}, {
			Name:     "Join the cluster with kubeadm",
			If:       "[ ! -f /etc/kubernetes/kubelet.conf ]",
			Files:    []yipFile{{Path: joinConfigPath, Permissions: 0o600, Content: string(joinJSON)}},
			Commands: []string{"kubeadm join --config " + joinConfigPath},
		}},
	}})
	if err != nil {
		return nil, err
	}
	return append([]byte("#cloud-config\n"), doc...), nil
}
