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

// Command kubevirt-images writes KubeVirt's images for a kind cluster
// (hack/kind/kubevirt.sh loads them): virt-operator's, virt-api's and
// virt-controller's from static binaries, and the real node's virt-handler
// and virt-launcher images (test/node, which builds them with
// hack/node/kubevirt.sh). It prints each archive's path and image name.
// It builds with the node tag, as test/node does.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cozystack/cluster-api-workers/test/kindnode"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

func main() {
	bin := flag.String("bin", "", "directory of virt-operator, virt-api and virt-controller")
	out := flag.String("out", "", "directory of their archives")
	flag.Parse()
	if err := run(*bin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-images:", err)
		os.Exit(1)
	}
}

func run(bin, out string) error {
	if bin == "" || out == "" {
		return fmt.Errorf("-bin and -out are required")
	}
	images := kindnode.KubeVirtImages(bin, kubevirt.Version, out)
	if _, err := ociimage.WriteMissing(images...); err != nil {
		return err
	}
	nodeImages, err := node.BuildKubeVirtImages()
	if err != nil {
		return err
	}
	for _, img := range append(images, nodeImages.Handler, nodeImages.Launcher) {
		fmt.Printf("%s %s\n", img.Archive, img.Ref)
	}
	return nil
}
