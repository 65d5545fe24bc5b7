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

// Command write-images writes the kind node image's control-plane images
// as OCI archives (hack/kind/node-image.sh imports them into the node's
// containerd) and prints each archive's path and image name; with
// -node-image it prints the kind cluster configuration that names them
// instead.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cozystack/cluster-api-workers/test/kindnode"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

func main() {
	var s kindnode.Sources
	flag.StringVar(&s.Bin, "bin", "", "directory of the Kubernetes, etcd and CoreDNS binaries")
	flag.StringVar(&s.Pause, "pause", "", "the sandbox binary")
	flag.StringVar(&s.IptablesRoot, "iptables-root", "", "a Debian root with iptables, kube-proxy's base")
	flag.StringVar(&s.Kubernetes, "kubernetes-version", "", "Kubernetes release of the binaries")
	flag.StringVar(&s.Etcd, "etcd-version", "", "etcd release of the binary")
	flag.StringVar(&s.CoreDNS, "coredns-version", "", "CoreDNS release of the binary")
	flag.StringVar(&s.Out, "out", "", "directory of the archives")
	nodeImage := flag.String("node-image", "", "print the kind cluster configuration of this node image")
	flag.Parse()
	if err := run(s, *nodeImage); err != nil {
		fmt.Fprintln(os.Stderr, "write-images:", err)
		os.Exit(1)
	}
}

func run(s kindnode.Sources, nodeImage string) error {
	if nodeImage != "" {
		config, err := s.ClusterConfig(nodeImage)
		if err != nil {
			return err
		}
		fmt.Print(config)
		return nil
	}
	images, err := s.Images()
	if err != nil {
		return err
	}
	if _, err := ociimage.WriteMissing(images...); err != nil {
		return err
	}
	for _, img := range images {
		fmt.Printf("%s %s\n", img.Archive, img.Ref)
	}
	return nil
}
