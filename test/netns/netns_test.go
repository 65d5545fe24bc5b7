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
	"bufio"
	"context"
	"io"
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

// TestAHostClientReachesAServerInTheNamespaceThroughItsForward: a server
// in the namespace on its loopback (started there with nsenter) is not on
// the host's, and a host client reaches it through ForwardIn.
func TestAHostClientReachesAServerInTheNamespaceThroughItsForward(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"nsenter", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(err)
		}
	}
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ns.Close() }()
	// A free port on the host's loopback, which the namespace's own
	// loopback also has free.
	probe, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inside := probe.Addr().String()
	_ = probe.Close()
	_, port, _ := net.SplitHostPort(inside)
	server := exec.CommandContext(t.Context(), "nsenter", "--net="+ns.Path, "python3", "-c", //nolint:gosec // The test's own command.
		`import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
print("listening", flush=True)
while True:
    c,_=s.accept(); c.sendall(b"from the namespace\n"); c.close()`, port)
	stdout, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = server.Process.Kill(); _ = server.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("the server in the namespace: %q, %v", line, err)
	}
	read := func(addr string) (string, error) {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err != nil {
			return "", err
		}
		defer func() { _ = c.Close() }()
		out, err := io.ReadAll(c)
		return string(out), err
	}
	if out, err := read(inside); err == nil && out != "" {
		t.Fatalf("the namespace's server answers on the host's loopback without a forward: %q", out)
	}
	host, err := ns.ForwardIn("127.0.0.1:0", inside)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := read(host); err != nil || strings.TrimSpace(out) != "from the namespace" {
		t.Fatalf("through the forward at %s: %q, %v", host, out, err)
	}
}
