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

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
)

func TestParseFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		err  string
		want func(Gomega, config)
	}{
		{name: "defaults", want: func(g Gomega, c config) {
			g.Expect(c.once).To(BeFalse())
			g.Expect(c.replicas).To(Equal(3))
			g.Expect(c.namespace).To(Equal("sandbox"))
			g.Expect(c.cluster).To(Equal("tenant"))
		}},
		{name: "once with variables", args: []string{"--once", "--set", "KAIROS_JOIN_MODE=ClusterProvider", "--set", "WORKER_MEMORY=8Gi"}, want: func(g Gomega, c config) {
			g.Expect(c.once).To(BeTrue())
			g.Expect(c.vars).To(Equal(variables{"KAIROS_JOIN_MODE": "ClusterProvider", "WORKER_MEMORY": "8Gi"}))
		}},
		{name: "variable without value is rejected", args: []string{"--set", "KAIROS_JOIN_MODE"}, err: "is not NAME=value"},
		{name: "negative replicas are rejected", args: []string{"--replicas", "-1"}, err: "must not be negative"},
		{name: "stray arguments are rejected", args: []string{"up"}, err: "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := parseFlags(tc.args, io.Discard)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			tc.want(g, c)
		})
	}
}

// TestOnceJoinsAndExits runs the sandbox as `--once` does: it must return
// without error once the example pool has joined, having written
// kubeconfigs for the management and the workload cluster.
func TestOnceJoinsAndExits(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), []string{"--once", "--dir", dir, "--replicas", "2", "--timeout", "6m"}, &out)
	g.Expect(err).NotTo(HaveOccurred(), out.String())
	g.Expect(out.String()).To(ContainSubstring("The pool joined"))
	g.Expect(out.String()).To(MatchRegexp(`machines: Running 2 \| nodes ready: 2/2`))
	for _, name := range []string{"management.kubeconfig", "tenant.kubeconfig"} {
		cfg, err := clientcmd.LoadFromFile(filepath.Join(dir, name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Clusters).To(HaveLen(1))
	}
}

// TestInterruptStopsCleanly runs the sandbox without --once and interrupts
// it once the pool has joined, as Ctrl-C does: it stops without error.
// Meanwhile its metrics endpoint serves both providers' metrics of the
// joined machine.
func TestInterruptStopsCleanly(t *testing.T) {
	g := NewWithT(t)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--dir", t.TempDir(), "--replicas", "1", "--metrics-address", "127.0.0.1:0"}, out)
	}()
	g.Eventually(out.String, 6*time.Minute, 200*time.Millisecond).Should(ContainSubstring("The pool has joined"))
	address := regexp.MustCompile(`metrics: (http://\S+/metrics)`).FindStringSubmatch(out.String())
	g.Expect(address).To(HaveLen(2), out.String())
	// The token goes once the node has joined, moments after it is Ready.
	var scraped string
	g.Eventually(func(g Gomega) {
		scraped = scrape(g, address[1])
		for _, series := range []string{
			"cozystack_workers_bootstrap_tokens_minted_total",
			"cozystack_workers_bootstrap_tokens_revoked_total",
			"cozystack_workers_bootstrap_machine_data_ready_seconds_count",
			"cozystack_workers_infrastructure_machine_provisioned_seconds_count",
		} {
			g.Expect(scraped).To(MatchRegexp(`(?m)^`+series+` [1-9]`), "the joined machine is counted in %s", series)
		}
	}, time.Minute, time.Second).Should(Succeed())
	// The providers' series, for the docs' sample.
	for _, line := range strings.Split(scraped, "\n") {
		if strings.HasPrefix(line, "cozystack_workers_bootstrap_") || strings.HasPrefix(line, "cozystack_workers_infrastructure_") {
			t.Log(line)
		}
	}
	interrupt()
	g.Eventually(done, time.Minute).Should(Receive(BeNil()))
	g.Expect(out.String()).To(ContainSubstring("Stopping the sandbox"))
}

// scrape reads a metrics endpoint.
func scrape(g Gomega, url string) string {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return string(body)
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
