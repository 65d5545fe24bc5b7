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

package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cozystack/cluster-api-workers/test/cdi"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// CDIImages are the images CDI's controller starts worker Pods from,
// named as CDI's operator names them (cdi.ImporterImage and its
// siblings): built here (hack/node/cdi.sh: CDI's binaries, static, over a
// Debian root with qemu-img and nbdkit), written as archives into the
// cache once, imported into the node, never pulled.
type CDIImages struct {
	Importer, Cloner, UploadServer ociimage.Image
}

// BuildCDIImages builds (or reuses) CDI's worker images. The three share
// both layers (the root, and one layer of every CDI binary the workers
// run), so importing all three costs about one.
func BuildCDIImages() (*CDIImages, error) {
	out, err := runNodeScript("cdi.sh", "all")
	if err != nil {
		return nil, err
	}
	bin, rootfs := out["bin"], out["rootfs"]
	if bin == "" || rootfs == "" {
		return nil, fmt.Errorf("hack/node/cdi.sh all printed %v, want bin= and rootfs=", out)
	}
	stamp, err := os.ReadFile(filepath.Join(bin, "stamp")) //nolint:gosec // The stamp of the cache's binaries.
	if err != nil {
		return nil, err
	}
	// Keyed by the root (its directory's name) and the binaries (their
	// stamp): either changing writes new archives.
	images := filepath.Join(filepath.Dir(rootfs), "images-"+strings.TrimSpace(string(stamp)))
	// As CDI's images are (cmd/*/BUILD.bazel): every binary in /usr/bin,
	// user 1001; the importer image carries the helpers the controller
	// runs from it.
	files := map[string]string{}
	for _, name := range []string{"cdi-importer", "cdi-cloner", "cloner_startup.sh", "cdi-uploadserver",
		"cdi-image-size-detection", "cdi-containerimage-server", "cdi-source-update-poller"} {
		files["/usr/bin/"+name] = filepath.Join(bin, name)
	}
	image := func(ref, archive string, entrypoint ...string) ociimage.Image {
		return ociimage.Image{Ref: ref, Rootfs: rootfs, Files: files, User: "1001", Entrypoint: entrypoint, Archive: filepath.Join(images, archive)}
	}
	c := &CDIImages{
		Importer:     image(cdi.ImporterImage, "cdi-importer.tar", "/usr/bin/cdi-importer", "-alsologtostderr"),
		Cloner:       image(cdi.ClonerImage, "cdi-cloner.tar", "/usr/bin/cloner_startup.sh"),
		UploadServer: image(cdi.UploadServerImage, "cdi-uploadserver.tar", "/usr/bin/cdi-uploadserver", "-alsologtostderr"),
	}
	if _, err := ociimage.WriteMissing(c.Importer, c.Cloner, c.UploadServer); err != nil {
		return nil, err
	}
	return c, nil
}
