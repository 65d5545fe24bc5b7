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

package requests

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// RunManager runs a component process's manager while serving the
// recorder's counts on a loopback port (Handler). Once the manager's caches
// have synced it writes the counts' URL to addressFile, which is how the
// driver learns the process is ready. It returns when the manager stops.
func (r *Recorder) RunManager(ctx context.Context, mgr manager.Manager, addressFile string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = server.Serve(listener) }()
	defer func() { _ = server.Close() }()

	errs := make(chan error, 1)
	go func() { errs <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return errors.Join(errors.New("the manager's cache did not sync"), <-errs)
	}
	if err := writeAtomically(addressFile, "http://"+listener.Addr().String()); err != nil {
		cancel()
		return errors.Join(err, <-errs)
	}
	return <-errs
}

// writeAtomically writes through a temporary file, so the reader never sees
// a partial URL.
func writeAtomically(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".address-")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
