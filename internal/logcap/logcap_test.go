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

package logcap

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/flags"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func init() {
	// klog's flags, as the managers register them (logs.AddFlags).
	klog.InitFlags(nil)
}

func TestValidate(t *testing.T) {
	for args, ok := range map[string]bool{
		"":                        true,
		"--v=4":                   true,
		"--v=7":                   true,
		"--v=8":                   false,
		"--v=10":                  false,
		"--vmodule=request*=7":    true,
		"--vmodule=request*=8":    false,
		"--v=2 --vmodule=x=3,y=9": false,
	} {
		c := logs.NewOptions()
		fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
		logsv1.AddFlags(c, fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if err := Validate(c); (err == nil) != ok {
			t.Errorf("%q: error %v, want accepted %v", args, err, ok)
		}
	}
}

func TestCapVerbosityEndpoint(t *testing.T) {
	_, opts, err := flags.GetManagerOptions(flags.ManagerOptions{DiagnosticsAddress: ":8443", TLSMinVersion: "VersionTLS12"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := opts.ExtraHandlers[VerbosityPath]; !ok {
		t.Fatalf("Cluster API's diagnostics server no longer serves %s", VerbosityPath)
	}
	CapVerbosityEndpoint(opts)
	handler := opts.ExtraHandlers[VerbosityPath]
	put := func(value string) int {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodPut, VerbosityPath, strings.NewReader(value)))
		return rec.Code
	}
	verbosity := func() string { return flag.Lookup("v").Value.String() }
	before := verbosity()
	t.Cleanup(func() { _ = flag.Set("v", before) })
	for value, code := range map[string]int{"3": http.StatusOK, "7": http.StatusOK, "8": http.StatusBadRequest, "10": http.StatusBadRequest, "x": http.StatusBadRequest} {
		if err := flag.Set("v", "2"); err != nil {
			t.Fatal(err)
		}
		if got := put(value); got != code {
			t.Errorf("PUT %s: %d, want %d", value, got, code)
		}
		want := value
		if code != http.StatusOK {
			want = "2"
		}
		if got := verbosity(); got != want {
			t.Errorf("PUT %s: the verbosity is %s, want %s", value, got, want)
		}
	}

	none := &metricsserver.Options{}
	CapVerbosityEndpoint(none)
	if len(none.ExtraHandlers) != 0 {
		t.Error("a server without the endpoint gained one")
	}
}
