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

package envtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cluster-api-workers/test/process"
)

// apiServerRestarts kills and restarts a kube-apiserver that envtest
// started, keeping its etcd, certificates, port and flags, so clients see
// what a restart of a real control plane shows them: connections reset,
// then refused, then the same server with the same data. envtest cannot
// restart its own apiserver without new certificates, so the replacement
// is started from the killed process's command line.
type apiServerRestarts struct {
	config *rest.Config

	mu sync.Mutex
	// replacement is the running apiserver once it was restarted; envtest
	// only knows the first process.
	replacement *process.Process
	// logPath holds the replacements' output, for the error when one fails.
	logPath string
}

// apiServerStartTimeout bounds a restarted apiserver's way to healthy.
const apiServerStartTimeout = 2 * time.Minute

// restart kills the apiserver with SIGKILL, keeps it down for downtime and
// starts it again, returning once it reports healthy.
func (r *apiServerRestarts) restart(ctx context.Context, downtime time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, err := url.Parse(r.config.Host)
	if err != nil {
		return fmt.Errorf("parsing the apiserver address %q: %w", r.config.Host, err)
	}
	pid, args, err := findAPIServer(u.Port())
	if err != nil {
		return err
	}
	running, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := running.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the apiserver (pid %d): %w", pid, err)
	}
	if r.replacement != nil {
		<-r.replacement.Done()
	} else if err := waitForExit(ctx, pid); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(downtime):
	}

	if r.logPath == "" {
		log, err := os.CreateTemp("", "kube-apiserver-restarted-*.log")
		if err != nil {
			return err
		}
		r.logPath = log.Name()
		_ = log.Close()
	}
	//nolint:gosec,noctx // The command line of the apiserver this process started; it runs until stop, not until a context ends.
	replacement, err := process.Start("the restarted apiserver", r.logPath, exec.Command(args[0], args[1:]...))
	if err != nil {
		return err
	}
	r.replacement = replacement
	return waitHealthy(ctx, r.config, replacement)
}

// stop stops a replacement apiserver with SIGTERM; envtest stops the
// first one.
func (r *apiServerRestarts) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logPath != "" {
		defer func() {
			_ = os.Remove(r.logPath)
			r.logPath = ""
		}()
	}
	if r.replacement == nil {
		return nil
	}
	err := r.replacement.Stop(time.Minute)
	r.replacement = nil
	return err
}

// findAPIServer returns the pid and command line of the kube-apiserver
// child of this process that serves on port.
func findAPIServer(port string) (int, []string, error) {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, err
	}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%s/cmdline", e.Name()))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !hasFlag(args, "--secure-port", port) || parentOf(pid) != self {
			continue
		}
		return pid, args, nil
	}
	return 0, nil, fmt.Errorf("no kube-apiserver of this process serves on port %s", port)
}

func hasFlag(args []string, name, value string) bool {
	for i, a := range args {
		if a == name+"="+value || (a == name && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
}

// parentOf reads a process's parent pid from /proc/<pid>/stat; the command
// name before it is in parentheses and may hold spaces.
func parentOf(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// After the name: state, then the parent's pid.
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// waitForExit waits until a killed child is gone: envtest reaps it.
func waitForExit(ctx context.Context, pid int) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err), nil
	})
}

// waitHealthy polls /readyz until the apiserver serves again.
func waitHealthy(ctx context.Context, cfg *rest.Config, apiserver *process.Process) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, apiServerStartTimeout, true, func(ctx context.Context) (bool, error) {
		if apiserver.Exited() {
			return false, fmt.Errorf("the restarted apiserver exited: %s", apiserver.Tail(4<<10))
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the restarted apiserver: %w", err)
	}
	return nil
}
