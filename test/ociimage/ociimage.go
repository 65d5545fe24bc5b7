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

// Package ociimage writes container images made of local files (static
// binaries, or a debootstrapped root) as OCI image layout archives, which
// containerd imports: nothing here is ever pulled from a registry.
package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Image is a container image made of local files: static binaries, or a
// root file system (a Debian root made by debootstrap) with binaries over it.
type Image struct {
	// Ref is the image's full name with a tag ("kvw.local/hello:v1"). The
	// kubelet finds it by this name; nothing is ever pulled.
	Ref string
	// Rootfs, when set, is a directory whose whole tree is the image's
	// first layer: owners, modes, symbolic links, device nodes and file
	// capabilities as they are there (it must not be mounted over).
	Rootfs string
	// Files maps a path in the image (absolute) to a file on this machine:
	// the image's last layer, executable and owned by root.
	Files map[string]string
	// Capabilities maps a path of Files to the file capabilities it carries
	// (permitted and effective, as setcap's "=ep"), such as
	// "cap_net_bind_service".
	Capabilities map[string][]string
	// Tmp adds /tmp (mode 1777) to the files' layer: programs that write
	// temporary files need it, and an image of static binaries alone has
	// none (virt-api stats it at start).
	Tmp bool
	// Entrypoint is the image's entrypoint.
	Entrypoint []string
	// User is the user the image runs as when a Pod does not say ("1001"
	// for CDI's images); root when empty.
	User string
	// Archive, when set, is where WriteArchive already wrote this image
	// (a cache): Start imports it as it is.
	Archive string
	// ByDigest names the image by its manifest's digest, Ref being the
	// repository alone ("kvw.local/kairos-worker"): WriteArchive names it
	// <Ref>@sha256:<hex>, what a reference pinned by digest finds
	// (ArchiveRef reads the name back).
	ByDigest bool
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
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// blob is a layer written to a file beside the archive while its digest is
// taken (a root file system does not fit in memory twice).
type blob struct {
	file   string
	digest string
	size   int64
}

// WriteArchive writes the image as an OCI image layout in a tar archive
// (what `ctr images import` reads): its layers uncompressed (the root file
// system's, then the files'), a config for linux/amd64, a manifest, and an
// index naming the image by the annotations containerd and the OCI layout
// read. The same files give the same digests.
func (img Image) WriteArchive(file string) (err error) {
	if img.ByDigest && strings.ContainsAny(img.Ref, ":@") {
		return fmt.Errorf("image %q: with ByDigest the reference is a repository, without tag or digest", img.Ref)
	}
	if !img.ByDigest && !strings.Contains(img.Ref, ":") {
		return fmt.Errorf("image %q has no tag: an untagged image is pulled Always", img.Ref)
	}
	var layers []blob
	defer func() {
		for _, l := range layers {
			_ = os.Remove(l.file)
		}
	}()
	if img.Rootfs != "" {
		l, err := writeLayer(file+".rootfs", func(tw *tar.Writer) error { return tarTree(tw, img.Rootfs) })
		if err != nil {
			return fmt.Errorf("image %s: root file system %s: %w", img.Ref, img.Rootfs, err)
		}
		layers = append(layers, l)
	}
	if len(img.Files) > 0 {
		l, err := writeLayer(file+".files", img.tarFiles)
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	diffIDs := make([]string, 0, len(layers))
	layerDescs := make([]descriptor, 0, len(layers))
	for _, l := range layers {
		// Uncompressed: a layer's diff ID is its own digest.
		diffIDs = append(diffIDs, l.digest)
		layerDescs = append(layerDescs, descriptor{MediaType: mediaTypeLayer, Digest: l.digest, Size: l.size})
	}
	runConfig := map[string]any{
		"Entrypoint": img.Entrypoint,
		"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	// Set only when asked: the images without a user keep their digests.
	if img.User != "" {
		runConfig["User"] = img.User
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       runConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        blobDescriptor(mediaTypeConfig, config, nil),
		"layers":        layerDescs,
	})
	if err != nil {
		return err
	}
	annotations := map[string]string{"io.containerd.image.name": img.Ref}
	if img.ByDigest {
		annotations["io.containerd.image.name"] = img.Ref + "@sha256:" + digestHex(manifest)
	} else {
		annotations["org.opencontainers.image.ref.name"] = img.Ref[strings.LastIndex(img.Ref, ":")+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests":     []descriptor{blobDescriptor(mediaTypeManifest, manifest, annotations)},
	})
	if err != nil {
		return err
	}
	out, err := os.Create(file) //nolint:gosec // The caller's archive path.
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(out)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/sha256/" + digestHex(manifest), manifest},
		{"blobs/sha256/" + digestHex(config), config},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	for _, l := range layers {
		if err := tarBlob(tw, l); err != nil {
			return err
		}
	}
	return tw.Close()
}

// ArchiveRef is the name an archive WriteArchive wrote gives its image
// (with ByDigest, the repository and the manifest's digest).
func ArchiveRef(file string) (string, error) {
	f, err := os.Open(file) //nolint:gosec // An archive of the cache.
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("%s: no index.json: %w", file, err)
		}
		if hdr.Name != "index.json" {
			continue
		}
		var index struct {
			Manifests []descriptor `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", fmt.Errorf("%s: index.json: %w", file, err)
		}
		if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] == "" {
			return "", fmt.Errorf("%s: index.json names no single image", file)
		}
		return index.Manifests[0].Annotations["io.containerd.image.name"], nil
	}
}

// writeLayer writes a layer's tar to file and takes its digest and size.
func writeLayer(file string, fill func(*tar.Writer) error) (blob, error) {
	f, err := os.Create(file) //nolint:gosec // Beside the caller's archive.
	if err != nil {
		return blob{}, err
	}
	h := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(counter)
	err = fill(tw)
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(file)
		return blob{}, err
	}
	return blob{file: file, digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: counter.n}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func tarBlob(tw *tar.Writer, l blob) error {
	f, err := os.Open(l.file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "blobs/sha256/" + strings.TrimPrefix(l.digest, "sha256:"), Mode: 0o644, Size: l.size, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// tarFiles writes the image's files and their parent directories.
func (img Image) tarFiles(tw *tar.Writer) error {
	paths := make([]string, 0, len(img.Files))
	for p := range img.Files {
		if !path.IsAbs(p) {
			return fmt.Errorf("image %s: path %q is not absolute", img.Ref, p)
		}
		paths = append(paths, p)
	}
	for p := range img.Capabilities {
		if _, ok := img.Files[p]; !ok {
			return fmt.Errorf("image %s: capabilities for %s, which is not one of its files", img.Ref, p)
		}
	}
	sort.Strings(paths)
	if img.Tmp {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
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
				return err
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if caps := img.Capabilities[p]; len(caps) > 0 {
			raw, err := fileCapability(caps)
			if err != nil {
				return fmt.Errorf("image %s: %s: %w", img.Ref, p, err)
			}
			hdr.PAXRecords = map[string]string{paxXattr + capabilityXattr: string(raw)}
		}
		if err := tarFile(tw, hdr, img.Files[p]); err != nil {
			return fmt.Errorf("image %s: %w", img.Ref, err)
		}
	}
	return nil
}

func tarFile(tw *tar.Writer, hdr *tar.Header, file string) error {
	f, err := os.Open(file) //nolint:gosec // A file the caller put in the image.
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

const (
	// paxXattr prefixes an extended attribute in a PAX header, as GNU tar
	// and containerd's unpacker read it.
	paxXattr        = "SCHILY.xattr."
	capabilityXattr = "security.capability"
)

// capabilityBits are the capabilities an image file may carry (linux/capability.h).
var capabilityBits = map[string]uint{
	"cap_net_bind_service": 10,
	"cap_net_admin":        12,
	"cap_net_raw":          13,
	"cap_sys_admin":        21,
	"cap_sys_nice":         23,
	"cap_sys_ptrace":       19,
}

// fileCapability encodes capabilities as the security.capability
// attribute (struct vfs_cap_data, revision 2) with the effective flag set.
func fileCapability(caps []string) ([]byte, error) {
	var permitted uint64
	for _, c := range caps {
		bit, ok := capabilityBits[c]
		if !ok {
			return nil, fmt.Errorf("unknown capability %q", c)
		}
		permitted |= 1 << bit
	}
	const revision2, effective = 0x02000000, 0x000001
	raw := make([]byte, 20)
	binary.LittleEndian.PutUint32(raw[0:], revision2|effective)
	binary.LittleEndian.PutUint32(raw[4:], uint32(permitted))      // permitted, low word
	binary.LittleEndian.PutUint32(raw[12:], uint32(permitted>>32)) // permitted, high word
	return raw, nil
}

// tarTree writes the tree under root as it is: regular files (hard links
// as links to the first name), directories, symbolic links, device nodes
// and FIFOs, with their owners, modes, times and file capabilities.
// Sockets are left out.
func tarTree(tw *tar.Writer, root string) error {
	seen := map[uint64]string{}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", rel)
		}
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := seen[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			seen[st.Ino] = hdr.Name
		}
		if fi.Mode().IsRegular() {
			buf := make([]byte, 64)
			// A regular file: Getxattr follows no link here.
			if n, err := syscall.Getxattr(p, capabilityXattr, buf); err == nil && n > 0 {
				hdr.PAXRecords = map[string]string{paxXattr + capabilityXattr: string(buf[:n])}
			} else if err != nil && !errors.Is(err, syscall.ENODATA) && !errors.Is(err, syscall.ENOTSUP) {
				return fmt.Errorf("%s: reading its capabilities: %w", rel, err)
			}
			return tarFile(tw, hdr, p)
		}
		return tw.WriteHeader(hdr)
	})
}

func digestHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func blobDescriptor(mediaType string, b []byte, annotations map[string]string) descriptor {
	return descriptor{MediaType: mediaType, Digest: "sha256:" + digestHex(b), Size: int64(len(b)), Annotations: annotations}
}

// WriteMissing writes each image's archive that is not in the cache yet
// (through a temporary file, so an interrupted write is never reused) and
// says whether it wrote any.
func WriteMissing(imgs ...Image) (bool, error) {
	wrote := false
	for _, img := range imgs {
		if _, err := os.Stat(img.Archive); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(img.Archive), 0o750); err != nil {
			return wrote, err
		}
		tmp := img.Archive + ".tmp"
		if err := img.WriteArchive(tmp); err != nil {
			_ = os.Remove(tmp)
			return wrote, err
		}
		if err := os.Rename(tmp, img.Archive); err != nil {
			return wrote, err
		}
		wrote = true
	}
	return wrote, nil
}
