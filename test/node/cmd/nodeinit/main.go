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

// Command nodeinit is PID 1 of a test node (package test/node): started by
// `unshare -m -p -n -f --mount-proc` it runs in mount, PID and network
// namespaces of its own. It makes the mounts shared inside (as kind's node
// entrypoint does), hides the host's /run, /var/lib and /var/log behind
// directories of the node, shows the kubelet the kernel settings it wants
// (so it never writes the host's), gives the node an address and a
// forwarder to the apiserver on its loopback, starts containerd, imports
// the images, starts kube-proxy (when asked) and the kubelet, reaps
// orphans, and on SIGTERM stops them, then containerd, then exits: the
// kernel kills whatever is left in the PID namespace, and the mount and
// network namespaces go with it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cozystack/cluster-api-workers/test/node/internal/initconfig"
)

var cfg initconfig.Config

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nodeinit CONFIG.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1]) //nolint:gosec // The config test/node wrote.
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		failf("reading the config: %v", err)
	}
	// Signals first: the parent may stop the node while it starts.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)

	if err := setup(); err != nil {
		failf("%v", err)
	}
	phase("setup")
	containerd, err := start("containerd", cfg.Containerd)
	if err != nil {
		failf("%v", err)
	}
	if err := waitSocket(cfg.ContainerdSocket, time.Minute); err != nil {
		failf("containerd: %v (see containerd.log)", err)
	}
	phase("containerd")
	for _, img := range cfg.Images {
		t0 := time.Now()
		out, err := exec.Command(cfg.Ctr, "--address", cfg.ContainerdSocket, "--namespace", "k8s.io", //nolint:gosec,noctx // Our own command line.
			"images", "import", "--platform", "linux/amd64", img).CombinedOutput()
		if err != nil {
			failf("ctr images import %s: %v: %s", img, err, out)
		}
		logf("imported %s in %s: %s", filepath.Base(img), time.Since(t0).Round(time.Millisecond), strings.TrimSpace(string(out)))
	}
	phase("images")
	named := map[int]string{containerd: "containerd"}
	// kube-proxy first, so that Services work before Pods start; it waits
	// for the Node the kubelet registers, for the node's address.
	kubeProxy := 0
	if len(cfg.KubeProxy) > 0 {
		if kubeProxy, err = start("kube-proxy", cfg.KubeProxy); err != nil {
			failf("%v", err)
		}
		named[kubeProxy] = "kube-proxy"
		phase("kube-proxy")
	}
	kubelet, err := start("kubelet", cfg.Kubelet)
	if err != nil {
		failf("%v", err)
	}
	named[kubelet] = "kubelet"
	phase("kubelet")

	for s := range sigs {
		switch s {
		case syscall.SIGCHLD:
			reap(named)
		default:
			logf("%s: stopping kube-proxy and the kubelet, then containerd", s)
			if kubeProxy != 0 {
				stop(kubeProxy, "kube-proxy", 15*time.Second)
			}
			stop(kubelet, "kubelet", 15*time.Second)
			stop(containerd, "containerd", 15*time.Second)
			phase("stopped")
			os.Exit(0)
		}
	}
}

func setup() error {
	// Shared inside, as a node's root is, in a peer group of this namespace
	// only (unshare made every mount private first).
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("mount --make-rshared /: %w", err)
	}
	// Paths containerd and the kubelet use whatever their configuration says
	// (/run/containerd/s for shim sockets, /var/run/netns, the kubelet's
	// device plugin socket under /var/lib/kubelet, /var/log/containers, the
	// CNI cache under /var/lib/cni) land in the node's directory.
	for target, src := range cfg.PrivateDirs {
		if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, target, err)
		}
	}
	// The kubelet sets these kernel settings when they differ from what it
	// wants; they are the host's, not this namespace's. A file with the
	// value it wants over each keeps the host's untouched.
	for key, value := range cfg.Sysctls {
		file := filepath.Join(cfg.Dir, "sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil { //nolint:gosec // World-readable as /proc/sys is.
			return err
		}
		if err := syscall.Mount(file, "/proc/sys/"+key, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over /proc/sys/%s: %w", file, key, err)
		}
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", cfg.NodeIP + "/32", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil { //nolint:gosec,noctx // Our own command line.
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	// The apiserver listens on the host's loopback, which this network
	// namespace does not see: a listener on this loopback at the same
	// address hands each connection to the host side through a Unix socket
	// in the node's directory. TLS runs end to end.
	if err := listenAndForward(cfg.APIListen, cfg.APISocket); err != nil {
		return err
	}
	// Pods reach the apiserver at the `kubernetes` Service's address (their
	// in-cluster configuration): it is an address of this namespace, which
	// their default route through the bridge leads to, so no rule is needed.
	// The further host services (Forwards) are reached the same way.
	forwards := cfg.Forwards
	if cfg.ServiceListen != "" {
		forwards = append([]initconfig.Forward{{Listen: cfg.ServiceListen, Socket: cfg.ServiceSocket}}, forwards...)
	}
	added := map[string]bool{}
	for _, f := range forwards {
		host, _, err := net.SplitHostPort(f.Listen)
		if err != nil {
			return err
		}
		if !added[host] {
			if out, err := exec.Command("ip", "addr", "add", host+"/32", "dev", "lo").CombinedOutput(); err != nil { //nolint:gosec,noctx // Our own command line.
				return fmt.Errorf("ip addr add %s/32 dev lo: %w: %s", host, err, out)
			}
			added[host] = true
		}
		if err := listenAndForward(f.Listen, f.Socket); err != nil {
			return err
		}
	}
	return os.Setenv("PATH", cfg.Path)
}

// listenAndForward listens on addr in this namespace and hands each
// connection to the host side through the Unix socket.
func listenAndForward(addr, socket string) error {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for the apiserver on %s: %w", addr, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go forward(c, socket)
		}
	}()
	return nil
}

func forward(c net.Conn, socket string) {
	defer func() { _ = c.Close() }()
	up, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "unix", socket)
	if err != nil {
		logf("apiserver forwarder: %v", err)
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func start(name string, argv []string) (int, error) {
	f, err := os.OpenFile(filepath.Join(cfg.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // The node's own log directory.
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer func() { _ = devnull.Close() }()
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{devnull, f, f},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", name, err)
	}
	logf("started %s (pid %d in the node)", name, p.Pid)
	return p.Pid, nil
}

func waitSocket(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "unix", path)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served after %s: %w", path, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reap collects every exited child, orphans included, and logs the end of
// the ones it started.
func reap(named map[int]string) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		if name, ok := named[pid]; ok {
			logf("%s exited: %s", name, describe(ws))
			phase(name + " exited: " + describe(ws))
		}
	}
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// stop sends SIGTERM to a process and waits for it, reaping others on the
// way, for at most timeout; then it kills it.
func stop(pid int, name string, timeout time.Duration) {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if got == pid {
			logf("%s stopped: %s", name, describe(ws))
			return
		}
		if errors.Is(err, syscall.ECHILD) {
			return
		}
		if got <= 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	logf("%s did not stop within %s: killing it", name, timeout)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s nodeinit: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func phase(p string) {
	f, err := os.OpenFile(cfg.PhaseFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintln(f, p)
	_ = f.Close()
}

func failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	logf("failed: %s", msg)
	phase("failed: " + msg)
	os.Exit(1)
}
