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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// ComponentProcess is a component the harness runs as its own process.
type ComponentProcess struct {
	Name components.Name
	// PID is the process's id (a child of this process).
	PID int
	// Requests reads the process's request counts.
	Requests requests.Remote
	// LogPath holds its log.
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Processes returns the components running as processes (Options.Processes).
func (h *Harness) Processes() []*ComponentProcess { return h.processes }

// componentNames are the components of the configured pipeline.
func (h *Harness) componentNames() []components.Name {
	if h.opts.Bootstrap == BootstrapKubeadm {
		return []components.Name{components.KubeadmBootstrap, components.Infrastructure}
	}
	return []components.Name{components.KairosBootstrap, components.Infrastructure}
}

// limits are a component's client rate limits: Options.Limits, or the
// production defaults.
func (h *Harness) limits(name components.Name) components.Limits {
	if l, ok := h.opts.Limits[name]; ok {
		return l
	}
	return components.DefaultLimits(name)
}

// processStartTimeout bounds a component's start up to its caches' sync.
const processStartTimeout = 2 * time.Minute

// startProcess builds the component command once per harness and starts the
// component with a kubeconfig of the management apiserver.
func (h *Harness) startProcess(ctx context.Context, name components.Name, controllerName string) error {
	if h.workDir == "" {
		dir, err := os.MkdirTemp("", "harness-components-")
		if err != nil {
			return err
		}
		h.workDir = dir
		if err := buildComponentCommand(ctx, filepath.Join(dir, "component")); err != nil {
			return err
		}
		if err := envtest.WriteKubeconfig(filepath.Join(dir, "kubeconfig"), "management", h.Config()); err != nil {
			return err
		}
	}
	limits := h.limits(name)
	addressFile := filepath.Join(h.workDir, string(name)+".address")
	args := []string{
		"-component", string(name),
		"-kubeconfig", filepath.Join(h.workDir, "kubeconfig"),
		"-address-file", addressFile,
		"-controller-name", controllerName,
		"-kube-api-qps", strconv.FormatFloat(float64(limits.QPS), 'f', -1, 32),
		"-kube-api-burst", strconv.Itoa(limits.Burst),
		"-clustercache-client-qps", strconv.FormatFloat(float64(limits.ClusterCacheQPS), 'f', -1, 32),
		"-clustercache-client-burst", strconv.Itoa(limits.ClusterCacheBurst),
		"-worker-classes=" + strconv.FormatBool(h.opts.WorkerClasses),
		"-bootstrap-token-ttl", h.opts.BootstrapTokenTTL.String(),
		"-import-failure-restarts", strconv.Itoa(int(h.opts.ImportFailureRestarts)),
	}
	logDir := h.workDir
	if h.opts.ProcessLogDir != "" {
		logDir = h.opts.ProcessLogDir
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(logDir, string(name)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(filepath.Join(h.workDir, "component"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The component dies with this process, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the %s component: %w", name, err)
	}
	p := &ComponentProcess{Name: name, PID: cmd.Process.Pid, LogPath: logPath, cmd: cmd, exited: make(chan struct{})}
	h.processes = append(h.processes, p)
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
		if h.releaseCtx.Err() == nil {
			select {
			case h.errs <- fmt.Errorf("the %s component exited: %v; its log: %s", name, p.err, p.LogPath):
			default:
			}
		}
	}()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, processStartTimeout, true, func(context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("the %s component exited at start: %v: %s", name, p.err, tail(logPath))
		default:
		}
		raw, err := os.ReadFile(addressFile)
		if err != nil {
			return false, nil
		}
		p.Requests = requests.Remote{URL: string(raw)}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s component: %w", name, err)
	}
	return nil
}

// stopProcesses stops the components with SIGTERM, and kills those that
// do not stop in time.
func (h *Harness) stopProcesses() error {
	var errs []error
	for _, p := range h.processes {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range h.processes {
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			errs = append(errs, fmt.Errorf("the %s component did not stop within 30s of SIGTERM", p.Name))
		}
	}
	h.processes = nil
	return errors.Join(errs...)
}

// buildComponentCommand builds test/harness/cmd/component; Go's build
// cache makes every build after the first one short.
func buildComponentCommand(ctx context.Context, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./test/harness/cmd/component")
	cmd.Dir = envtest.RepoRoot()
	cmd.Env = os.Environ()
	if os.Getenv("GOFLAGS") == "" {
		cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the component command: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// tail returns the end of a log for an error message.
func tail(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	return string(raw)
}
