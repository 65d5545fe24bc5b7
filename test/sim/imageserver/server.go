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
// downloaded once read the counts.
package imageserver

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
)

// Server serves one image file, with ranges. With a path it answers GET
// and HEAD there and nothing else (404 elsewhere, 405 for other methods);
// without one it serves the image at every path, as an image factory
// serves every schematic's image.
type Server struct {
	image string
	path  string

	mu       sync.Mutex
	requests int
	bytes    int64
}

// New serves image at path; an empty path serves it at every path.
func New(image, path string) *Server { return &Server{image: image, path: path} }

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
	counter := &countingWriter{ResponseWriter: w}
	http.ServeContent(counter, req, filepath.Base(s.image), st.ModTime(), file)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	s.bytes += counter.sent
}

// Counts are the requests served and the bytes of image sent so far.
func (s *Server) Counts() (requests int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.bytes
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	sent int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.sent += int64(n)
	return n, err
}
