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

package cdi

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/cluster-api-workers/test/sim/imageserver"
)

// imagePath is where the tests' image server serves the disk.
const imagePath = "/worker-disk.img"

// testDisk makes a worker disk stand-in: an 8 MiB raw image holding data
// in two places and holes everywhere else; it returns the file's path.
func testDisk(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	f, err := os.Create(filepath.Join(dir, "disk.img")) //nolint:gosec // A file in the test's temporary directory.
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, off := range []int64{0, 3 << 20} {
		if _, err := f.WriteAt(bytes.Repeat([]byte("rootfs"), 1000), off); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Truncate(8 << 20); err != nil {
		tb.Fatal(err)
	}
	return f.Name()
}

// allocated is how many bytes of a file are on disk.
func allocated(tb testing.TB, path string) int64 {
	tb.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		tb.Fatal(err)
	}
	return st.Blocks * 512
}

func TestImportIsSparseAndExact(t *testing.T) {
	g := NewWithT(t)
	disk := testDisk(t)
	server := httptest.NewServer(imageserver.New(disk, imagePath))
	defer server.Close()

	path := filepath.Join(t.TempDir(), "volume.img")
	var calls int
	var last, size int64
	err := importHTTP(context.Background(), server.URL+imagePath, path, 10<<20, func(written, all int64) {
		calls++
		last, size = written, all
	})
	g.Expect(err).NotTo(HaveOccurred())
	want, err := os.ReadFile(disk) //nolint:gosec // The test's own image file.
	g.Expect(err).NotTo(HaveOccurred())
	got, err := os.ReadFile(path) //nolint:gosec // A file in the test's temporary directory.
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Equal(got, want)).To(BeTrue(), "the volume holds the image byte for byte")
	g.Expect(size).To(Equal(int64(8 << 20)))
	g.Expect(last).To(Equal(size))
	g.Expect(calls).To(BeNumerically(">", 2), "progress is reported as blocks are written")
	// Two 6000-byte data regions: at most a few blocks are allocated.
	g.Expect(allocated(t, path)).To(BeNumerically("<", 4*importBlockSize), "zero blocks are holes")
	g.Expect(path + ".part").NotTo(BeAnExistingFile())
}

func TestImportFailuresAreWordedAsCDI(t *testing.T) {
	disk := testDisk(t)
	server := httptest.NewServer(imageserver.New(disk, imagePath))
	defer server.Close()
	for _, tc := range []struct {
		name, url string
		limit     int64
		message   string
	}{
		{"a missing image is CDI's 404 message", server.URL + "/absent.img", 0,
			"Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"},
		{"an image larger than the claim is refused", server.URL + imagePath, 1 << 20,
			"Virtual image size 8388608 is larger than the reported available storage 1048576. A larger PVC is required."},
		{"an unreachable server cannot be connected to", "http://127.0.0.1:1/disk.img", 0,
			"Unable to connect to http data source: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(t.TempDir(), "volume.img")
			err := importHTTP(context.Background(), tc.url, path, tc.limit, func(int64, int64) {})
			g.Expect(err).To(MatchError(HavePrefix(tc.message)))
			g.Expect(path).NotTo(BeAnExistingFile(), "nothing is half-written")
			g.Expect(path + ".part").NotTo(BeAnExistingFile())
		})
	}
}

// TestImporterPopulatesVolumes: the importer CDI's stand-in runs downloads
// an HTTP source and copies a clone's source into the volume's disk.img
// (its directory made on demand, open to every user as kind's local-path
// provisioner makes it, so virt-launcher's QEMU, the qemu user, reaches the
// image; disk.img owned by the qemu user when the test runs as root),
// sparse and with progress, and refuses what it cannot do in CDI's words.
func TestImporterPopulatesVolumes(t *testing.T) {
	disk := testDisk(t)
	server := httptest.NewServer(imageserver.New(disk, imagePath))
	defer server.Close()
	want, err := os.ReadFile(disk) //nolint:gosec // The test's own image file.
	if err != nil {
		t.Fatal(err)
	}
	httpSource := &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: server.URL + imagePath}}
	for _, tc := range []struct {
		name       string
		source     *cdiv1.DataVolumeSource
		sourcePath string
		size       int64
		message    string
	}{
		{name: "an HTTP source is downloaded", source: httpSource, size: 10 << 20},
		{name: "a clone copies its source volume", source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "ns", Name: "golden"}},
			sourcePath: disk, size: 10 << 20},
		{name: "a clone into a smaller volume is refused", source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "ns", Name: "golden"}},
			sourcePath: disk, size: 1 << 20, message: "target resources requests storage size is smaller than the source"},
		{name: "a registry source is not imported", source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://quay.io/x/y:v1")}},
			size: 10 << 20, message: "Unable to process data: the file importer reads HTTP sources and clones only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			volume := filepath.Join(t.TempDir(), "volumes", "ns-root")
			path := filepath.Join(volume, DiskImageName)
			var last, size int64
			err := FileImporter{}.Populate(context.Background(), Job{
				DataVolume: &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{Source: tc.source}},
				Path:       path, SourcePath: tc.sourcePath, Size: tc.size,
				Progress: func(written, all int64) { last, size = written, all },
			})
			if tc.message != "" {
				g.Expect(err).To(MatchError(tc.message))
				g.Expect(path).NotTo(BeAnExistingFile())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			st, err := os.Stat(volume)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o777)))
			if os.Geteuid() == 0 {
				img, err := os.Stat(path)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(img.Sys().(*syscall.Stat_t).Uid).To(BeEquivalentTo(QEMUUser), "disk.img is the qemu user's, as CDI's worker Pods leave it")
			}
			got, err := os.ReadFile(path) //nolint:gosec // A file in the test's temporary directory.
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(bytes.Equal(got, want)).To(BeTrue(), "the volume holds the image byte for byte")
			g.Expect(allocated(t, path)).To(BeNumerically("<", 4*importBlockSize), "zero blocks are holes")
			g.Expect(size).To(Equal(int64(8 << 20)))
			g.Expect(last).To(Equal(size))
		})
	}
	t.Run("a cancelled clone stops and leaves nothing", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		path := filepath.Join(t.TempDir(), "volume.img")
		err := FileImporter{}.Populate(ctx, Job{DataVolume: &cdiv1.DataVolume{}, Path: path, SourcePath: disk})
		g.Expect(err).To(MatchError(ContainSubstring("context canceled")))
		g.Expect(path).NotTo(BeAnExistingFile())
		g.Expect(path + ".part").NotTo(BeAnExistingFile())
	})
}

// FuzzWriteSparse: whatever the content and where its zeros are, the
// sparse copy reads back byte for byte, and a limit is never exceeded.
func FuzzWriteSparse(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add(make([]byte, importBlockSize+1), int64(0))
	f.Add(append(make([]byte, importBlockSize), 1, 2, 3), int64(0))
	f.Add(append([]byte{7}, make([]byte, 2*importBlockSize)...), int64(importBlockSize))
	f.Fuzz(func(t *testing.T, content []byte, limit int64) {
		file, err := os.CreateTemp(t.TempDir(), "volume")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = file.Close() }()
		n, err := writeSparse(file, bytes.NewReader(content), limit, func(int64) {})
		if limit > 0 && int64(len(content)) > limit {
			if err == nil {
				t.Fatalf("%d bytes were accepted beyond the limit %d", len(content), limit)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(content)) {
			t.Fatalf("wrote %d of %d bytes", n, len(content))
		}
		got, err := os.ReadFile(file.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("the sparse copy differs from the content")
		}
	})
}

// BenchmarkImportHTTP reports the importer's throughput for an image that
// is mostly holes, as the worker disk is (about a fifth of its 4 GiB is
// data).
func BenchmarkImportHTTP(b *testing.B) {
	dir := b.TempDir()
	image := filepath.Join(dir, "disk.img")
	f, err := os.Create(image) //nolint:gosec // A file in the benchmark's temporary directory.
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xa5}, 4<<20)
	for off := int64(0); off < 64<<20; off += 20 << 20 {
		if _, err := f.WriteAt(data, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Truncate(64 << 20); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	server := httptest.NewServer(imageserver.New(image, imagePath))
	defer server.Close()
	b.SetBytes(64 << 20)
	for b.Loop() {
		path := filepath.Join(dir, "volume.img")
		if err := importHTTP(context.Background(), server.URL+imagePath, path, 0, func(int64, int64) {}); err != nil {
			b.Fatal(err)
		}
	}
}
