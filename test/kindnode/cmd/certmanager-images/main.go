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

// Command certmanager-images writes cert-manager's controller and
// cainjector images for a kind cluster (hack/kind/certmanager.sh loads
// them) from static binaries, and prints each archive's path and image
// name.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cozystack/cluster-api-workers/test/kindnode"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

func main() {
	bin := flag.String("bin", "", "directory of cert-manager-controller and cert-manager-cainjector")
	version := flag.String("version", "", "cert-manager's release, the images' tag")
	out := flag.String("out", "", "directory of their archives")
	flag.Parse()
	if err := run(*bin, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "certmanager-images:", err)
		os.Exit(1)
	}
}

func run(bin, version, out string) error {
	if bin == "" || version == "" || out == "" {
		return fmt.Errorf("-bin, -version and -out are required")
	}
	images := kindnode.CertManagerImages(bin, version, out)
	if _, err := ociimage.WriteMissing(images...); err != nil {
		return err
	}
	for _, img := range images {
		fmt.Printf("%s %s\n", img.Archive, img.Ref)
	}
	return nil
}
