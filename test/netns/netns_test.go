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

package netns

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAProcessInTheNamespaceReachesAHostServiceThroughItsForward: a
// host server on the loopback; in the namespace the same address is free
// (it is another namespace) and, once forwarded, reaches the host's
// server, for a process started there with nsenter.
func TestAProcessInTheNamespaceReachesAHostServiceThroughItsForward(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip(err)
	}
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("from the host\n"))
			_ = c.Close()
		}
	}()
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ns.Close() }()
	read := func() (string, error) {
		out, err := exec.CommandContext(context.Background(), "nsenter", "--net="+ns.Path, "bash", "-c", //nolint:gosec // The test's own command.
			`exec 3<>/dev/tcp/${0%:*}/${0##*:} && cat <&3`, l.Addr().String()).CombinedOutput()
		return string(out), err
	}
	if out, err := read(); err == nil {
		t.Fatalf("the host's loopback is reachable in the namespace before any forward: %q", out)
	}
	if err := ns.ForwardOut(l.Addr().String(), l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	out, err := read()
	if err != nil || strings.TrimSpace(out) != "from the host" {
		t.Fatalf("through the forward: %q, %v", out, err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.ForwardOut("127.0.0.1:0", l.Addr().String()); err == nil {
		t.Error("a closed namespace took a forward")
	}
}
