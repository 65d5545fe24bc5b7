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

// Package kindnode describes the images a kind node image built here holds
// in its containerd store: what `kind build node-image` would pull from
// registry.k8s.io, made instead from binaries built from the Go module
// proxy (hack/tools-bins.sh) and named under a repository of our own, which
// the cluster's kubeadm configuration names (imageRepository).
package kindnode

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// Repository is the image repository of the control-plane images: not
// registry.k8s.io, whose images these are not.
const Repository = "kvw.local"

// PauseImage is the sandbox image, as on the real node of test/node.
const PauseImage = Repository + "/pause:v1"

// Sources are the local files the images are made of.
type Sources struct {
	// Bin holds kube-apiserver, kube-controller-manager, kube-scheduler,
	// kube-proxy, etcd and coredns (hack/tools-bins.sh).
	Bin string
	// Pause is the sandbox binary (test/node/cmd/pause).
	Pause string
	// IptablesRoot is a Debian root with iptables and conntrack, the base
	// of kube-proxy's image: in iptables mode it runs iptables-restore,
	// which a static binary alone cannot.
	IptablesRoot string
	// Versions: the Kubernetes release of the binaries ("v1.36.3"), etcd's
	// ("v3.6.16") and CoreDNS's ("v1.13.1").
	Kubernetes, Etcd, CoreDNS string
	// Out is the directory the archives are written to.
	Out string
}

// EtcdTag is the tag kubeadm gives etcd's image ("3.6.16-0"), set as
// etcd.local.imageTag in the cluster's kubeadm configuration.
func (s Sources) EtcdTag() string { return strings.TrimPrefix(s.Etcd, "v") + "-0" }

// Images are the images kubeadm's static Pods, its kube-proxy DaemonSet
// and CoreDNS Deployment, and containerd's sandboxes run, named as kubeadm
// names them under Repository.
func (s Sources) Images() ([]ociimage.Image, error) {
	// In a fixed order, so the error names the same field every time.
	for _, f := range []struct{ name, value string }{
		{"Bin", s.Bin}, {"Pause", s.Pause}, {"IptablesRoot", s.IptablesRoot},
		{"Kubernetes", s.Kubernetes}, {"Etcd", s.Etcd}, {"CoreDNS", s.CoreDNS}, {"Out", s.Out},
	} {
		if f.value == "" {
			return nil, fmt.Errorf("sources: %s is empty", f.name)
		}
	}
	bin := func(name string) map[string]string {
		return map[string]string{"/usr/local/bin/" + name: filepath.Join(s.Bin, name)}
	}
	image := func(name, tag string, img ociimage.Image) ociimage.Image {
		img.Ref = Repository + "/" + name + ":" + tag
		img.Archive = filepath.Join(s.Out, name+"-"+tag+".tar")
		return img
	}
	// kubeadm's manifests run each component by its name (found on the
	// image's PATH) and give etcd and CoreDNS their arguments.
	images := []ociimage.Image{
		image("pause", "v1", ociimage.Image{Files: map[string]string{"/pause": s.Pause}, Entrypoint: []string{"/pause"}}),
		image("etcd", s.EtcdTag(), ociimage.Image{Files: bin("etcd")}),
		image("coredns", s.CoreDNS, ociimage.Image{Files: map[string]string{"/coredns": filepath.Join(s.Bin, "coredns")}, Entrypoint: []string{"/coredns"}}),
		image("kube-proxy", s.Kubernetes, ociimage.Image{Rootfs: s.IptablesRoot, Files: bin("kube-proxy")}),
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		images = append(images, image(name, s.Kubernetes, ociimage.Image{Files: bin(name)}))
	}
	return images, nil
}

// ClusterConfig is the kind cluster configuration of a single-node cluster
// on nodeImage: kubeadm names the images of Images (imageRepository and the
// etcd and CoreDNS tags), the kubelet runs on cgroup v1 hierarchies
// (failCgroupV1: false), containerd pins our sandbox image and keeps OOM
// scores within what a container without CAP_SYS_RESOURCE may set, and
// kindnet (not on the module proxy) gives way to the node image's static
// bridge configuration.
func (s Sources) ClusterConfig(nodeImage string) (string, error) {
	if s.Etcd == "" || s.CoreDNS == "" || nodeImage == "" {
		return "", fmt.Errorf("cluster configuration: etcd release %q, CoreDNS release %q, node image %q: none may be empty", s.Etcd, s.CoreDNS, nodeImage)
	}
	return `kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
nodes:
- role: control-plane
  image: ` + nodeImage + `
kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  imageRepository: ` + Repository + `
  etcd:
    local:
      imageTag: ` + s.EtcdTag() + `
  dns:
    imageTag: ` + s.CoreDNS + `
- |
  kind: KubeletConfiguration
  failCgroupV1: false
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "` + PauseImage + `"
    restrict_oom_score_adj = true
`, nil
}

// KubeVirtImages are virt-operator's, virt-api's and virt-controller's
// images from the binaries in bin (hack/tools-bins.sh kubevirt and
// kubevirt-operator), named as virt-operator names them for the
// quay.io/kubevirt registry at version and laid out as KubeVirt's own are
// (the binary in /usr/bin, user 1001: their Pods run as non-root; a
// /tmp), written
// to out. virt-handler's and virt-launcher's come from the real node's
// build (test/node).
func KubeVirtImages(bin, version, out string) []ociimage.Image {
	names := []string{"virt-operator", "virt-api", "virt-controller"}
	images := make([]ociimage.Image, 0, len(names))
	for _, name := range names {
		images = append(images, ociimage.Image{
			Ref:        "quay.io/kubevirt/" + name + ":" + version,
			Files:      map[string]string{"/usr/bin/" + name: filepath.Join(bin, name)},
			Entrypoint: []string{"/usr/bin/" + name},
			User:       "1001",
			Tmp:        true,
			Archive:    filepath.Join(out, name+"-"+version+".tar"),
		})
	}
	return images
}

// CertManagerImages are cert-manager's controller's and cainjector's
// images from the binaries in bin (hack/tools-bins.sh cert-manager),
// named as cert-manager's Helm chart names them for the registry
// Repository (its imageRegistry value; imageNamespace jetstack) at
// version, with each binary where cert-manager's Containerfiles put it
// (/app/cmd/<name>/<name>), written to out. They run as a numeric
// non-root user: the chart's Pods set runAsNonRoot, which the kubelet
// cannot check against a user name.
func CertManagerImages(bin, version, out string) []ociimage.Image {
	names := []string{"controller", "cainjector"}
	images := make([]ociimage.Image, 0, len(names))
	for _, name := range names {
		file := "/app/cmd/" + name + "/" + name
		images = append(images, ociimage.Image{
			Ref:        Repository + "/jetstack/cert-manager-" + name + ":" + version,
			Files:      map[string]string{file: filepath.Join(bin, "cert-manager-"+name)},
			Entrypoint: []string{file},
			User:       "65532",
			Archive:    filepath.Join(out, "cert-manager-"+name+"-"+version+".tar"),
		})
	}
	return images
}
