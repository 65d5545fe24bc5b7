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
	"time"

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

// counts polls the server's counts: a client may have read a response
// before its last bytes are counted.
func counts(s *Server) func() [2]int64 {
	return func() [2]int64 {
		requests, sent := s.Counts()
		return [2]int64{int64(requests), sent}
	}
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
	g.Eventually(counts(s)).Should(Equal([2]int64{2, 6 + 15}))

	status, _ = get(t, http.MethodGet, server.URL+"/absent.img", "")
	g.Expect(status).To(Equal(http.StatusNotFound))
	status, _ = get(t, http.MethodPost, server.URL+"/disk.img", "")
	g.Expect(status).To(Equal(http.StatusMethodNotAllowed), "the image is read-only")
	g.Expect(counts(s)()).To(Equal([2]int64{2, 21}), "refused requests are not counted")
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
	g.Eventually(counts(s)).Should(Equal([2]int64{2, 30}))
}

// TestTheUplinkIsSharedBetweenDownloads: two downloads at once through a
// limited uplink take at least as long as their bytes need at its rate
// (a lower bound only: a busy host may take longer).
func TestTheUplinkIsSharedBetweenDownloads(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "disk.img")
	g.Expect(os.WriteFile(path, make([]byte, 2*burst), 0o600)).To(Succeed())
	s := New(path, "").WithUplink(4 * burst)
	server := httptest.NewServer(s)
	defer server.Close()
	started := time.Now()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(server.URL + "/disk.img") //nolint:noctx // The test server's URL.
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			done <- err
		}()
	}
	g.Expect(<-done).To(Succeed())
	g.Expect(<-done).To(Succeed())
	// 4 bursts at 4 bursts a second, less the first burst sent at once.
	g.Expect(time.Since(started)).To(BeNumerically(">=", 750*time.Millisecond))
	g.Eventually(counts(s)).Should(Equal([2]int64{2, 4 * burst}))
}
