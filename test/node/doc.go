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

// Package node runs a real Kubernetes node on this machine (build tag
// node, make test-node): containerd v2 and its runc shim built from the Go
// module proxy (hack/node/bins.sh), Debian's runc and CNI plugins, and a
// kubelet built from k8s.io/kubernetes (hack/tools-bins.sh kubelet), in
// mount, PID and network namespaces of their own with their state in one
// temporary directory. Images are assembled here from local files and
// imported into containerd; nothing is pulled. Start and Stop are one
// function each; Stop checks that nothing is left behind. Pods reach the
// apiserver at the kubernetes Service's address (ServiceCA).
//
// A node started with Options.KubeProxy has cluster Services: kube-proxy
// (iptables mode) runs beside the kubelet, and DeployDNS runs CoreDNS
// behind the kube-dns Service, both built from the Go module proxy
// (hack/tools-bins.sh proxy and coredns); TestServiceNameResolvesOnTheNode
// resolves a Service's name and reaches it through its ClusterIP.
//
// KubeVirt's node side runs on it (TestKubeVirtNodeSide): virt-handler's
// and virt-launcher's images are built here (BuildKubeVirtImages,
// hack/node/kubevirt.sh: the binaries with cgo from kubevirt.io/kubevirt, a
// Debian trixie root with libvirt, virtqemud built from Debian's source, and
// QEMU), and virt-handler is deployed as virt-operator deploys it. A
// Kairos pool's machine boots on it through virt-launcher
// (TestPoolJoinsThroughVirtLauncher) from the worker disk as a container
// disk (BuildWorkerContainerDisk), reaching the workload apiserver on the
// host through the node's Forwards.
package node
