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
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/cozystack/cluster-api-workers/internal/logcap"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys"
)

// LogScanner reads every log line of every component, at every verbosity
// the managers accept (internal/logcap: from 8 client-go logs API bodies,
// and the managers refuse it), for what must never be logged: a bootstrap token with its secret, a
// private key, or bootstrap data; and any request of our providers that
// their ClusterRoles do not allow (rbac.go). It keeps what it found, never
// the line.
type LogScanner struct {
	mu       sync.Mutex
	lines    int
	findings []string
	// requestLines counts, by logger, client-go's request logging
	// (RequestLines).
	requestLines map[string]int
}

// clientGoRequestPattern is a line of client-go's request logging in
// klog's text format, which it writes from klog's -v=6
// (k8s.io/client-go/transport's debugging round tripper): a "Request" with
// its verb and URL, or its "Response" with the verb and URL (-v=6) or the
// status (-v=7 and more), the request context logger's keys (logger,
// controller, ...) between the message and those.
var clientGoRequestPattern = regexp.MustCompile(`"(Request|Response)" (.* )?(verb="[A-Z]+" url="https?://|status=")`)

// bootstrapTokenPattern is a bootstrap token with its secret part
// (<6>.<16>, kubeadm's format); the token ID alone is public.
// An ID that continues a longer name ("tenant-kairos.18a2b3c4d5e6f7a8",
// an Event's name) is not a token.
var bootstrapTokenPattern = regexp.MustCompile(`(^|[^a-z0-9._-])[a-z0-9]{6}\.[a-z0-9]{16}([^a-z0-9]|$)`)

// eventNamePrefixes precede an Event's name where a recorder logs an
// Event the apiserver did not take: its printed form
// (&Event{ObjectMeta:{tenant.187d5a0c3b2f1e4a ...}) and its URL
// (.../events/tenant.187d5a0c3b2f1e4a). An object named with six
// characters gives an Event name of a token's shape (<name>.<16 hex
// digits>).
var eventNamePrefixes = []string{"ObjectMeta:{", "/events/"}

// tokenIn locates the first bootstrap token with its secret in line that
// is not an Event's name; nil when there is none.
func tokenIn(line string) []int {
	for _, loc := range bootstrapTokenPattern.FindAllStringIndex(line, -1) {
		// The pattern's match starts with the character before the name.
		before := line[:loc[0]+1]
		event := false
		for _, prefix := range eventNamePrefixes {
			event = event || strings.HasSuffix(before, prefix)
		}
		if !event {
			return loc
		}
	}
	return nil
}

// bootstrapDataMarkers open rendered bootstrap data.
var bootstrapDataMarkers = []string{"#cloud-config", "kubeadm join ", "discovery-token-unsafe-skip"}

// NewLogScanner returns a scanner and a logger that feeds it every line
// and passes it on to delegate.
func NewLogScanner(delegate logr.Logger) (*LogScanner, logr.Logger) {
	s := &LogScanner{}
	scan := funcr.New(func(prefix, args string) {
		s.scan(prefix, args, true)
		if delegate.GetSink() != nil {
			delegate.WithName(prefix).Info(args)
		}
	}, funcr.Options{Verbosity: logcap.MaxVerbosity})
	return s, scan
}

// Scan reads one line a logger (prefix) wrote; components whose lines do
// not pass through the scanner's logger, such as processes, are fed here.
func (s *LogScanner) Scan(prefix, line string) { s.scan(prefix, line, true) }

// ScanDuringRestart reads a line logged while the management apiserver
// restarted: a fresh kube-apiserver refuses requests until its RBAC
// authorizer has synced, so a Forbidden there says nothing of the roles.
// Everything else is checked as Scan checks it.
func (s *LogScanner) ScanDuringRestart(prefix, line string) { s.scan(prefix, line, false) }

func (s *LogScanner) scan(prefix, line string, forbiddenIsFinding bool) {
	var found []string
	// Where the line says what it says, for the finding: a token's place
	// with its secret masked, or the refusal. A line with a key or
	// bootstrap data gets no excerpt at all.
	var at []int
	if loc := tokenIn(line); loc != nil {
		found = append(found, "a bootstrap token with its secret")
		at = loc
	}
	quotable := true
	if sshkeys.LooksLikePrivateKey(line) {
		found = append(found, "a private key")
		quotable = false
	}
	if i := strings.Index(line, "is forbidden: User "); forbiddenIsFinding && i >= 0 && strings.Contains(line, providerUserPrefix) {
		found = append(found, "a request its ClusterRole does not allow")
		if at == nil {
			at = []int{i, i}
		}
	}
	for _, m := range bootstrapDataMarkers {
		if strings.Contains(line, m) {
			found = append(found, fmt.Sprintf("bootstrap data (%q)", m))
			quotable = false
		}
	}
	excerpt := ""
	if quotable && at != nil {
		excerpt = ": " + strconv.Quote(maskTokens(window(line, at[0], 300)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines++
	if clientGoRequestPattern.MatchString(line) {
		if s.requestLines == nil {
			s.requestLines = map[string]int{}
		}
		s.requestLines[prefix]++
	}
	for _, f := range found {
		s.findings = append(s.findings, fmt.Sprintf("logger %q logged %s%s", prefix, f, excerpt))
	}
}

// maskTokens replaces the secret half of every bootstrap token; the ID is
// public.
func maskTokens(s string) string {
	return bootstrapTokenPattern.ReplaceAllStringFunc(s, func(m string) string {
		i := strings.IndexByte(m, '.')
		return m[:i+1] + strings.Repeat("*", 16) + m[i+17:]
	})
}

// window is up to n bytes of s from a little before at.
func window(s string, at, n int) string {
	from := max(at-60, 0)
	to := min(from+n, len(s))
	return s[from:to]
}

// NewSuiteLogScanner is the scanner and logger of a test suite: every
// line, at every verbosity the managers accept, reaches the scanner and
// SuiteLogger's sinks (stderr with verbose, artifacts/harness.log).
// klog (client-go) logs through it too. closeLog closes the file.
func NewSuiteLogScanner(verbose bool, artifacts string) (s *LogScanner, log logr.Logger, closeLog func(), err error) {
	sink, closeLog, err := suiteSink(verbose, artifacts)
	if err != nil {
		return nil, logr.Logger{}, nil, err
	}
	s = &LogScanner{}
	log = funcr.New(func(prefix, args string) {
		s.scan(prefix, args, true)
		if sink != nil {
			sink(prefix, args)
		}
	}, funcr.Options{Verbosity: logcap.MaxVerbosity, LogTimestamp: sink != nil})
	klog.SetLogger(log)
	return s, log, closeLog, nil
}

// SuiteLogger is where a suite's in-process components log, up to V(2):
// nowhere by default, stderr with verbose, and artifacts/harness.log when
// artifacts (a directory the caller names, such as QEMU_ARTIFACTS) is
// set. closeLog closes the file.
func SuiteLogger(verbose bool, artifacts string) (log logr.Logger, closeLog func(), err error) {
	sink, closeLog, err := suiteSink(verbose, artifacts)
	if err != nil || sink == nil {
		return logr.Discard(), closeLog, err
	}
	return funcr.New(sink, funcr.Options{Verbosity: 2, LogTimestamp: true}), closeLog, nil
}

// suiteSink writes a logger's lines to stderr (verbose) and to
// artifacts/harness.log; nil when neither is asked for.
func suiteSink(verbose bool, artifacts string) (sink func(prefix, args string), closeLog func(), err error) {
	var (
		sinks []func(string)
		mu    sync.Mutex
	)
	closeLog = func() {}
	if verbose {
		sinks = append(sinks, func(line string) { fmt.Fprintln(os.Stderr, line) })
	}
	if artifacts != "" {
		if err := os.MkdirAll(artifacts, 0o750); err != nil {
			return nil, nil, err
		}
		f, err := os.Create(filepath.Join(artifacts, "harness.log")) //nolint:gosec // The log in the artifacts directory the user names.
		if err != nil {
			return nil, nil, err
		}
		closeLog = func() { _ = f.Close() }
		sinks = append(sinks, func(line string) { fmt.Fprintln(f, line) })
	}
	if len(sinks) == 0 {
		return nil, closeLog, nil
	}
	return func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		for _, sink := range sinks {
			sink(prefix + " " + args)
		}
	}, closeLog, nil
}

// Report writes the findings to w and reports whether there were any: a
// suite fails then.
func (s *LogScanner) Report(w io.Writer) bool {
	findings := s.Findings()
	if len(findings) == 0 {
		return false
	}
	fmt.Fprintf(w, "FAIL: %d of %d log lines carry what must never be logged:\n%s\n", len(findings), s.Lines(), strings.Join(findings, "\n"))
	return true
}

// Lines is how many lines were scanned.
func (s *LogScanner) Lines() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines
}

// RequestLines is how many lines of client-go's request logging a logger
// wrote: none unless its process ran at -v=6 or more, so a suite that
// says it scans every verbosity can prove it did.
func (s *LogScanner) RequestLines(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requestLines[prefix]
}

// Findings are what must not have been logged, by logger.
func (s *LogScanner) Findings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.findings...)
}
