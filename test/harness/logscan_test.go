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

package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
)

func TestLogScannerFindsWhatMustNotBeLogged(t *testing.T) {
	g := NewWithT(t)
	scanner, log := NewLogScanner(logr.Discard())
	log.WithName("bootstrap").Info("Created a bootstrap token", "tokenID", "abcdef", "expiration", "2026-12-01T00:00:00Z")
	log.WithName("infrastructure").V(5).Info("Created the machine's VirtualMachine", "VirtualMachine", "ns/worker-0")
	log.WithName("capi").Info("Server rejected event", "event", "&Event{ObjectMeta:{tenant-kairos.18a2b3c4d5e6f7a8  ns}")
	log.WithName("capi").Info("Server rejected event",
		"err", `Post "https://127.0.0.1:38497/api/v1/namespaces/ns/events/tenant.187d5a0c3b2f1e4a": dial tcp 127.0.0.1:38497: connect: connection refused`,
		"event", "&Event{ObjectMeta:{tenant.187d5a0c3b2f1e4a  ns    0 0001-01-01}")
	g.Expect(scanner.Findings()).To(BeEmpty(), "a token ID, object names and Event names are not secrets")

	log.WithName("bootstrap").V(6).Info("Joining", "token", "abcdef.0123456789abcdef")
	log.WithName("sim").Error(nil, "Could not parse", "data", "#cloud-config\nhostname: x")
	log.WithName("infrastructure").Info("Key", "key", sshkeystest.EncodedPrivateKeys()["ed25519/pkcs8-base64"])
	log.WithName("bootstrap").Error(errors.New(`secrets is forbidden: User "`+providerUserPrefix+`1:kairos-bootstrap" cannot patch resource "secrets"`), "Reconciler error")
	g.Expect(scanner.Findings()).To(ConsistOf(
		`logger "bootstrap" logged a bootstrap token with its secret: "\"level\"=6 \"msg\"=\"Joining\" \"token\"=\"abcdef.****************\""`,
		`logger "sim" logged bootstrap data ("#cloud-config")`,
		`logger "infrastructure" logged a private key`,
		HavePrefix(`logger "bootstrap" logged a request its ClusterRole does not allow: "`),
	))
	log.WithName("bootstrap").Info("Event of a token", "event", "&Event{ObjectMeta:{tenant.187d5a0c3b2f1e4a  ns}", "token", "abcdef.0123456789abcdef")
	g.Expect(scanner.Findings()).To(HaveLen(5), "a token beside an Event's name is found")
	g.Expect(scanner.Lines()).To(Equal(9))
	for _, f := range scanner.Findings() {
		g.Expect(f).NotTo(ContainSubstring("0123456789abcdef"), "a finding never carries the secret")
	}
}

func TestLogScannerReport(t *testing.T) {
	g := NewWithT(t)
	scanner, log := NewLogScanner(logr.Discard())
	var out strings.Builder
	log.Info("Created a bootstrap token", "tokenID", "abcdef")
	g.Expect(scanner.Report(&out)).To(BeFalse())
	g.Expect(out.String()).To(BeEmpty())
	log.WithName("bootstrap").Info("Joining", "token", "abcdef.0123456789abcdef")
	g.Expect(scanner.Report(&out)).To(BeTrue())
	g.Expect(out.String()).To(HavePrefix("FAIL: 1 of 2 log lines carry what must never be logged:\n"))
	g.Expect(out.String()).NotTo(ContainSubstring("0123456789abcdef"))
}

// TestLogScannerCountsClientGoRequestLines feeds the scanner what
// client-go's request logging writes in klog's text format: at the
// managers' highest verbosity a request and its response are counted, and
// its Authorization header is masked so that the scan finds nothing; at
// -v=6 the response alone; at the default verbosity nothing is written,
// and nothing counted.
func TestLogScannerCountsClientGoRequestLines(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		verbosity int
		want      int
	}{{verbosity: 7, want: 2}, {verbosity: 6, want: 1}, {verbosity: 0, want: 0}} {
		var out bytes.Buffer
		// A reconcile's logger, as controller-runtime passes it in the
		// request's context.
		logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(tc.verbosity), textlogger.Output(&out))).
			WithValues("logger", "infrastructure", "controller", "kubevirtmachine")
		rt := transport.NewDebuggingRoundTripper(roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}"))}, nil
		}), transport.DebugByContext)
		req, err := http.NewRequestWithContext(klog.NewContext(context.Background(), logger), http.MethodGet, "https://127.0.0.1:6443/api/v1/namespaces/kube-system/secrets", http.NoBody)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer abcdef.0123456789abcdef")
		resp, err := rt.RoundTrip(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()

		scanner, _ := NewLogScanner(logr.Discard())
		for line := range strings.SplitSeq(out.String(), "\n") {
			scanner.Scan("bootstrap", line)
		}
		g.Expect(scanner.RequestLines("bootstrap")).To(Equal(tc.want), "-v=%d: %s", tc.verbosity, out.String())
		g.Expect(scanner.RequestLines("infrastructure")).To(BeZero())
		g.Expect(scanner.Findings()).To(BeEmpty(), "client-go masks the Authorization header")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
