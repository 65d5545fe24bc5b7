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

// Package initconfig is what test/node hands the node's init
// (cmd/nodeinit), written by the one and read by the other.
package initconfig

// Config is the node's layout and the commands its init runs.
type Config struct {
	Dir         string            `json:"dir"`
	PrivateDirs map[string]string `json:"privateDirs"`
	Sysctls     map[string]string `json:"sysctls"`
	NodeIP      string            `json:"nodeIP"`
	APIListen   string            `json:"apiListen"`
	APISocket   string            `json:"apiSocket"`
	// ServiceListen, when set, is the `kubernetes` Service's address and
	// port: the init puts the address on its loopback and hands each
	// connection to ServiceSocket, where the host serves the apiserver to
	// pods (in-cluster clients).
	ServiceListen    string   `json:"serviceListen,omitempty"`
	ServiceSocket    string   `json:"serviceSocket,omitempty"`
	Path             string   `json:"path"`
	Containerd       []string `json:"containerd"`
	ContainerdSocket string   `json:"containerdSocket"`
	Ctr              string   `json:"ctr"`
	Images           []string `json:"images"`
	Kubelet          []string `json:"kubelet"`
	// KubeProxy, when set, is kube-proxy's command line: the init starts it
	// before the kubelet and stops it first.
	KubeProxy []string `json:"kubeProxy,omitempty"`
	LogDir    string   `json:"logDir"`
	PhaseFile string   `json:"phaseFile"`
	// Forwards are further host services pods reach: the init puts each
	// Listen address on its loopback and hands each connection to Socket,
	// where the host passes it on to the service.
	Forwards []Forward `json:"forwards,omitempty"`
}

// Forward is an address of the node's namespace whose connections go to a
// host service through a Unix socket.
type Forward struct {
	Listen string `json:"listen"`
	Socket string `json:"socket"`
}
