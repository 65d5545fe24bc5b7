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

package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layerModes reads a layer's entries and their modes.
func layerModes(t *testing.T, file string) map[string]int64 {
	t.Helper()
	f, err := os.Open(file) //nolint:gosec // The test's own layer.
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	modes := map[string]int64{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return modes
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[hdr.Name] = hdr.Mode
	}
}

// archiveEntries reads every regular file of an archive.
func archiveEntries(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file) //nolint:gosec // The test's own archive.
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = b
	}
}

func TestArchiveIsAnOCILayoutWhoseBlobsMatchTheirDigests(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: "kvw.local/hello:v1", Files: map[string]string{"/hello": bin}, Entrypoint: []string{"/hello"}, User: "1001", Tmp: true}
	archive := filepath.Join(dir, "hello.tar")
	if err := img.WriteArchive(archive); err != nil {
		t.Fatal(err)
	}
	entries := archiveEntries(t, archive)
	for name, data := range entries {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:]); got != hexDigest {
				t.Errorf("blob %s has digest %s", name, got)
			}
		}
	}
	if string(entries["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout: %s", entries["oci-layout"])
	}
	ref, err := ArchiveRef(archive)
	if err != nil || ref != img.Ref {
		t.Fatalf("ArchiveRef = %q, %v; want %q", ref, err, img.Ref)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(entries["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("layers: %+v", manifest.Layers)
	}
	layer := filepath.Join(dir, "layer.tar")
	if err := os.WriteFile(layer, entries["blobs/sha256/"+strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:")], 0o600); err != nil {
		t.Fatal(err)
	}
	modes := layerModes(t, layer)
	if modes["tmp/"] != 0o1777 || modes["hello"] != 0o755 {
		t.Errorf("layer entries and modes: %v", modes)
	}
	var config struct {
		Config struct {
			Entrypoint []string
			User       string
		} `json:"config"`
	}
	if err := json.Unmarshal(entries["blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:")], &config); err != nil {
		t.Fatal(err)
	}
	if len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/hello" || config.Config.User != "1001" {
		t.Errorf("config: %+v", config.Config)
	}
}

func TestSameFilesGiveTheSameDigest(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "disk")
	if err := os.WriteFile(bin, []byte("a disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	for _, name := range []string{"a.tar", "b.tar"} {
		img := Image{Ref: "kvw.local/disk", ByDigest: true, Files: map[string]string{"/disk/disk.img": bin}}
		archive := filepath.Join(dir, name)
		if err := img.WriteArchive(archive); err != nil {
			t.Fatal(err)
		}
		ref, err := ArchiveRef(archive)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ref, "kvw.local/disk@sha256:") {
			t.Fatalf("ref %q is not pinned by digest", ref)
		}
		refs[ref] = true
	}
	if len(refs) != 1 {
		t.Errorf("two writes of the same files gave %v", refs)
	}
}

func TestReferencesThatWouldBePulledAreRefused(t *testing.T) {
	dir := t.TempDir()
	for _, img := range []Image{
		{Ref: "kvw.local/untagged"},
		{Ref: "kvw.local/disk:v1", ByDigest: true},
	} {
		if err := img.WriteArchive(filepath.Join(dir, "x.tar")); err == nil {
			t.Errorf("%+v: no error", img)
		}
	}
}

func TestWriteMissingKeepsWhatTheCacheHas(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: "kvw.local/hello:v1", Files: map[string]string{"/hello": bin}, Archive: filepath.Join(dir, "cache", "hello.tar")}
	if wrote, err := WriteMissing(img); err != nil || !wrote {
		t.Fatalf("first write: wrote %v, %v", wrote, err)
	}
	if wrote, err := WriteMissing(img); err != nil || wrote {
		t.Fatalf("second write: wrote %v, %v", wrote, err)
	}
	if _, err := os.Stat(img.Archive + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary archive left: %v", err)
	}
}
