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
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Image is a container image made of local files: static binaries, mostly.
type Image struct {
	// Ref is the image's full name with a tag ("kvw.local/hello:v1"). The
	// kubelet finds it by this name; nothing is ever pulled.
	Ref string
	// Files maps a path in the image (absolute) to a file on this machine.
	Files map[string]string
	// Entrypoint is the image's entrypoint.
	Entrypoint []string
}

// The OCI image layout media types (image-spec v1.1).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// WriteArchive writes the image as an OCI image layout in a tar archive
// (what `ctr images import` reads): one uncompressed layer holding the
// files, a config for linux/amd64, a manifest, and an index naming the image
// by the annotations containerd and the OCI layout read. The archive is
// deterministic: the same files give the same digests.
func (img Image) WriteArchive(file string) error {
	if !strings.Contains(img.Ref, ":") {
		return fmt.Errorf("image %q has no tag: an untagged image is pulled Always", img.Ref)
	}
	layer, err := img.layer()
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerDigest := "sha256:" + hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		// Uncompressed: the diff ID is the layer's own digest.
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        blobDescriptor(mediaTypeConfig, config, nil),
		"layers":        []descriptor{blobDescriptor(mediaTypeLayer, layer, nil)},
	})
	if err != nil {
		return err
	}
	tag := img.Ref[strings.LastIndex(img.Ref, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests": []descriptor{blobDescriptor(mediaTypeManifest, manifest, map[string]string{
			"io.containerd.image.name":          img.Ref,
			"org.opencontainers.image.ref.name": tag,
		})},
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/sha256/" + digestHex(manifest), manifest},
		{"blobs/sha256/" + digestHex(config), config},
		{"blobs/sha256/" + digestHex(layer), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, out.Bytes(), 0o600)
}

// layer is the tar of the image's files and their parent directories.
func (img Image) layer() ([]byte, error) {
	paths := make([]string, 0, len(img.Files))
	for p := range img.Files {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("image %s: path %q is not absolute", img.Ref, p)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	dirs := map[string]bool{}
	for _, p := range paths {
		var parents []string
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(img.Files[p])
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func digestHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func blobDescriptor(mediaType string, b []byte, annotations map[string]string) descriptor {
	return descriptor{MediaType: mediaType, Digest: "sha256:" + digestHex(b), Size: len(b), Annotations: annotations}
}
