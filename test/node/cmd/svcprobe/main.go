//go:build node

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

// Command svcprobe is both ends of TestServiceNameResolvesOnTheNode.
//
//	svcprobe serve ADDR       answers every HTTP request with "served by <hostname>"
//	svcprobe get [ok:|fail:]URL...
//
// get prints the pod's /etc/resolv.conf, then, for each URL, the addresses
// its host resolves to (through that resolv.conf: Go's own resolver) and
// what a GET of it returned, one line each. An ok: URL is retried for up
// to 30 seconds until it answers 200 (a Service's rules may lag its
// endpoint by a sync), a fail: URL is tried once and must not answer. It
// exits 1 when a URL did not do what it was expected to.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: svcprobe serve ADDR | svcprobe get [ok:|fail:]URL...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2])
	case "get":
		if !get(os.Args[2:]) {
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(addr string) {
	host, _ := os.Hostname()
	srv := &http.Server{
		Addr: addr,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = fmt.Fprintf(w, "served by %s", host)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Printf("serving on %s\n", addr)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(targets []string) bool {
	if raw, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			fmt.Printf("resolv.conf: %s\n", line)
		}
	}
	client := &http.Client{Timeout: 3 * time.Second}
	good := true
	for _, target := range targets {
		want := "ok"
		if w, u, ok := strings.Cut(target, ":"); ok && (w == "ok" || w == "fail") {
			want, target = w, u
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			addrs, body, err := fetch(client, target)
			got := "ok"
			if err != nil {
				got = "fail"
			}
			if got == want || want == "fail" || time.Now().After(deadline) {
				fmt.Printf("%s: resolved %s; %s\n", target, addrs, outcome(body, err))
				good = good && got == want
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return good
}

// fetch resolves the URL's host (not for an address) and GETs the URL.
func fetch(client *http.Client, target string) (addrs, body string, err error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", "", err
	}
	addrs = "-"
	if net.ParseIP(u.Hostname()) == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		found, err := net.DefaultResolver.LookupHost(ctx, u.Hostname())
		if err != nil {
			return "[]", "", err
		}
		addrs = "[" + strings.Join(found, " ") + "]"
	}
	resp, err := client.Get(target) //nolint:gosec,noctx // The URLs the test gave; the client's timeout bounds it.
	if err != nil {
		return addrs, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return addrs, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return addrs, string(raw), fmt.Errorf("status %s", resp.Status)
	}
	return addrs, string(raw), nil
}

func outcome(body string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "answered: " + body
}
