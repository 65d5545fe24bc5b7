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
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// importBlockSize is the unit in which zeros are skipped: a block of only
// zeros becomes a hole in the volume file.
const importBlockSize = 64 << 10

// FileImporter does the work of CDI's importer and clone Pods for real: an
// HTTP source is downloaded (raw images only) into the volume's disk.img, a
// clone copies its source volume's disk.img. The QEMU tier boots guests from those
// files; the import benchmark counts what is downloaded.
type FileImporter struct{}

var _ Importer = FileImporter{}

// Populate fills the job's disk.img. Its error is the worker Pod's,
// worded as CDI words it; the stand-in restarts the Pod.
func (FileImporter) Populate(ctx context.Context, job Job) error {
	progress := job.Progress
	if progress == nil {
		progress = func(int64, int64) {}
	}
	if err := makeVolumeDir(filepath.Dir(job.Path)); err != nil {
		return err
	}
	source := job.DataVolume.Spec.Source
	var err error
	switch {
	case job.SourcePath != "":
		err = cloneVolume(ctx, job.SourcePath, job.Path, job.Size, progress)
	case source != nil && source.HTTP != nil:
		err = importHTTP(ctx, source.HTTP.URL, job.Path, job.Size, progress)
	default:
		return newCDIError("Unable to process data: the file importer reads HTTP sources and clones only")
	}
	if err != nil {
		return err
	}
	return giveToQEMU(job.Path)
}

// QEMUUser is the user (and group) CDI's importer and clone Pods run as,
// the qemu user of KubeVirt's virt-launcher.
const QEMUUser = 107

// giveToQEMU leaves a written disk.img owned by the qemu user, as CDI's
// worker Pods, which run as that user, leave it. virt-launcher's QEMU opens
// it read-write as that user, and virt-handler does not hand it over: it
// looks for disk.img in its own mount namespace, never finds it there, and
// gives the qemu user only the volume's directory. A process that is not
// root writes as itself and can give the file to no one.
func giveToQEMU(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return os.Chown(path, QEMUUser, QEMUUser)
}

// makeVolumeDir makes a volume's directory as kind's local-path provisioner
// does (mkdir -m 0777): open to every user, since virt-launcher's QEMU runs
// as the qemu user (107) and reaches disk.img through it (giveToQEMU).
func makeVolumeDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return os.Chmod(dir, 0o777) //nolint:gosec // The provisioner's mode: the qemu user reads disk.img through it.
}

// importHTTP downloads a raw image from url into the volume file at path,
// as CDI's importer writes it into a volume: blocks of zeros are skipped,
// so the file is as sparse as the image. An image larger than limit (the
// claim's size; no limit when zero or less) is refused as CDI refuses it.
// progress is called as bytes are written, with the image's size (-1 when
// the server does not say). The file appears at path only when complete.
func importHTTP(ctx context.Context, url, path string, limit int64, progress func(written, all int64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return newCDIError("Unable to connect to http data source: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return newCDIError("Unable to connect to http data source: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return newCDIError("Unable to connect to http data source: expected status code 200, got %d. Status: %s", resp.StatusCode, resp.Status)
	}
	all := resp.ContentLength
	if limit > 0 && all > limit {
		return newCDIError("Virtual image size %d is larger than the reported available storage %d. A larger PVC is required.", all, limit)
	}
	return fillVolume(path, resp.Body, all, limit, progress)
}

// cloneVolume copies the source volume's file into the volume file at
// path, sparse, as CDI's clone copies a claim into another. A target
// smaller than its source is refused as CDI refuses it.
func cloneVolume(ctx context.Context, source, path string, limit int64, progress func(written, all int64)) error {
	f, err := os.Open(source) //nolint:gosec // A volume file under the runner's volume directory.
	if err != nil {
		return newCDIError("Unable to process data: the source volume is not readable: %v", err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return newCDIError("Unable to process data: the source volume is not readable: %v", err)
	}
	if limit > 0 && st.Size() > limit {
		return newCDIError("target resources requests storage size is smaller than the source")
	}
	return fillVolume(path, contextReader{ctx: ctx, r: f}, st.Size(), limit, progress)
}

// fillVolume writes r (all bytes long, -1 when unknown) sparse into
// path.part and renames it to path once complete, reporting progress.
func fillVolume(path string, r io.Reader, all, limit int64, progress func(written, all int64)) (rerr error) {
	progress(0, all)
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644) //nolint:gosec // A volume file under the runner's volume directory.
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); rerr == nil {
			rerr = cerr
		}
		if rerr != nil {
			_ = os.Remove(part)
		}
	}()
	written, err := writeSparse(f, r, limit, func(n int64) { progress(n, all) })
	if err != nil {
		return newCDIError("Unable to process data: %v", err)
	}
	if all >= 0 && written != all {
		return newCDIError("Unable to process data: the source sent %d of %d bytes", written, all)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return os.Rename(part, path)
}

// contextReader stops reading once its context is done, so a cancelled
// clone ends as a cancelled download does.
type contextReader struct {
	ctx context.Context //nolint:containedctx // io.Reader's Read takes no context.
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// cdiError is an import failure worded as CDI's importer words it (its
// messages are sentences, capitalized), for the DataVolume's Running
// condition.
type cdiError string

func (e cdiError) Error() string { return string(e) }

func newCDIError(format string, args ...any) error { return cdiError(fmt.Sprintf(format, args...)) }

// writeSparse copies r into f block by block, seeking over blocks of
// zeros instead of writing them, and sizes f to what was read. It stops
// with an error beyond limit bytes (no limit when zero or less).
func writeSparse(f *os.File, r io.Reader, limit int64, written func(int64)) (int64, error) {
	buf := make([]byte, importBlockSize)
	zeros := make([]byte, importBlockSize)
	var n int64
	for {
		m, err := io.ReadFull(r, buf)
		if m > 0 {
			if limit > 0 && n+int64(m) > limit {
				return n, fmt.Errorf("the image is larger than the available storage %d", limit)
			}
			if bytes.Equal(buf[:m], zeros[:m]) {
				if _, serr := f.Seek(int64(m), io.SeekCurrent); serr != nil {
					return n, serr
				}
			} else if _, werr := f.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
			written(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// Trailing holes need the size set explicitly.
			return n, f.Truncate(n)
		}
		if err != nil {
			return n, err
		}
	}
}
