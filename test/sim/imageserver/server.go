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

// Package imageserver serves a raw disk image over HTTP, as an image
// factory or a web server that CDI imports from does, and counts the
// requests and the bytes it sent: the tests that prove an image is
// downloaded once read the counts. An uplink limit shares a bandwidth
// between all downloads, as a hoster's link to an image factory does.
package imageserver

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/time/rate"
)

// burst is the most bytes the uplink sends at once.
const burst = 256 << 10

// Server serves one image file, with ranges. With a path it answers GET
// and HEAD there and nothing else (404 elsewhere, 405 for other methods);
// without one it serves the image at every path, as an image factory
// serves every schematic's image.
type Server struct {
	image  string
	path   string
	uplink *rate.Limiter

	mu       sync.Mutex
	requests int
	bytes    int64
}

// New serves image at path; an empty path serves it at every path.
func New(image, path string) *Server { return &Server{image: image, path: path} }

// WithUplink shares bytesPerSecond between all the server's downloads;
// zero or less is no limit. Call it before serving.
func (s *Server) WithUplink(bytesPerSecond int) *Server {
	if bytesPerSecond > 0 {
		s.uplink = rate.NewLimiter(rate.Limit(bytesPerSecond), burst)
	}
	return s
}

// ServeHTTP serves the image.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if s.path != "" && req.URL.Path != s.path {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the image is read-only", http.StatusMethodNotAllowed)
		return
	}
	file, err := os.Open(s.image)
	if err != nil {
		http.Error(w, "the image is not readable", http.StatusInternalServerError)
		return
	}
	defer func() { _ = file.Close() }()
	st, err := file.Stat()
	if err != nil {
		http.Error(w, "the image is not readable", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.requests++
	s.mu.Unlock()
	http.ServeContent(&countingWriter{ResponseWriter: w, req: req, server: s}, req, filepath.Base(s.image), st.ModTime(), file)
}

// Counts are the requests served and the bytes of image sent so far. A
// client may have read a response before its last bytes are counted.
func (s *Server) Counts() (requests int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.bytes
}

// countingWriter counts the body bytes written through it, each after
// the uplink let it through.
type countingWriter struct {
	http.ResponseWriter
	req    *http.Request
	server *Server
}

func (w *countingWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), burst)]
		if w.server.uplink != nil {
			if err := w.server.uplink.WaitN(w.req.Context(), len(chunk)); err != nil {
				return written, err
			}
		}
		n, err := w.ResponseWriter.Write(chunk)
		written += n
		w.server.mu.Lock()
		w.server.bytes += int64(n)
		w.server.mu.Unlock()
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}
