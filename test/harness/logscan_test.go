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
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
)

func TestLogScannerFindsWhatMustNotBeLogged(t *testing.T) {
	g := NewWithT(t)
	scanner, log := NewLogScanner(logr.Discard())
	log.WithName("bootstrap").Info("Created a bootstrap token", "tokenID", "abcdef", "expiration", "2026-12-01T00:00:00Z")
	log.WithName("infrastructure").V(5).Info("Created the machine's VirtualMachine", "VirtualMachine", "ns/worker-0")
	log.WithName("capi").Info("Server rejected event", "event", "&Event{ObjectMeta:{tenant-kairos.18a2b3c4d5e6f7a8  ns}")
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
	g.Expect(scanner.Lines()).To(Equal(7))
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
