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

package imageserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func image(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, []byte("rootfs and more"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func get(t *testing.T, method, url, ranges string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	if ranges != "" {
		req.Header.Set("Range", ranges)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestServesItsPathWithRangesAndCounts(t *testing.T) {
	g := NewWithT(t)
	s := New(image(t), "/disk.img")
	server := httptest.NewServer(s)
	defer server.Close()

	status, body := get(t, http.MethodGet, server.URL+"/disk.img", "bytes=0-5")
	g.Expect(status).To(Equal(http.StatusPartialContent))
	g.Expect(body).To(Equal("rootfs"))
	status, body = get(t, http.MethodGet, server.URL+"/disk.img", "")
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("rootfs and more"))
	requests, sent := s.Counts()
	g.Expect(requests).To(Equal(2))
	g.Expect(sent).To(Equal(int64(6 + 15)))

	status, _ = get(t, http.MethodGet, server.URL+"/absent.img", "")
	g.Expect(status).To(Equal(http.StatusNotFound))
	status, _ = get(t, http.MethodPost, server.URL+"/disk.img", "")
	g.Expect(status).To(Equal(http.StatusMethodNotAllowed), "the image is read-only")
	requests, sent = s.Counts()
	g.Expect(requests).To(Equal(2), "refused requests send no image")
	g.Expect(sent).To(Equal(int64(21)))
}

func TestWithoutAPathServesEveryPath(t *testing.T) {
	g := NewWithT(t)
	s := New(image(t), "")
	server := httptest.NewServer(s)
	defer server.Close()
	for _, path := range []string{"/image/abc/v1.13.6/nocloud-amd64.raw", "/other"} {
		status, body := get(t, http.MethodGet, server.URL+path, "")
		g.Expect(status).To(Equal(http.StatusOK))
		g.Expect(body).To(Equal("rootfs and more"))
	}
	requests, sent := s.Counts()
	g.Expect(requests).To(Equal(2))
	g.Expect(sent).To(Equal(int64(30)))
}
