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

package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sigs.k8s.io/cluster-api/util/flags"

	"github.com/cozystack/cluster-api-workers/internal/logcap"
)

// The diagnostics server of both managers refuses a verbosity above the
// cap on /debug/flags/v, as the flags do.
func TestManagerOptionsCapTheVerbosityEndpoint(t *testing.T) {
	f := &Flags{Manager: flags.ManagerOptions{DiagnosticsAddress: ":8443", TLSMinVersion: "VersionTLS12"}}
	opts, err := f.ManagerOptions("test-leader-election")
	if err != nil {
		t.Fatal(err)
	}
	handler, ok := opts.Metrics.ExtraHandlers[logcap.VerbosityPath]
	if !ok {
		t.Fatalf("the diagnostics server serves no %s", logcap.VerbosityPath)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodPut, logcap.VerbosityPath, strings.NewReader("9")))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("PUT 9: %d, want %d", rec.Code, http.StatusBadRequest)
	}
}
