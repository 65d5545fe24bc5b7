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
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
	"github.com/cozystack/cluster-api-workers/test/process"
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

	// command is its binary and args its flags but the address file.
	command string
	args    []string
	h       *Harness

	mu   sync.Mutex
	proc *process.Process
	// killed is set by Kill, so that the exit is not reported as a failure.
	killed bool
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

// placementArgs are the infrastructure manager's flags of a placement
// policy; an empty list is an empty value.
func placementArgs(p placement.Policy) []string {
	return []string{
		"--" + placement.TolerationKeysFlag + "=" + strings.Join(p.TolerationKeys, ","),
		"--" + placement.NodeAffinityKeysFlag + "=" + strings.Join(p.NodeAffinityKeys, ","),
		"--" + placement.DeviceNamesFlag + "=" + strings.Join(p.DeviceNames, ","),
		"--" + placement.DedicatedCPUPlacementFlag + "=" + strconv.FormatBool(p.DedicatedCPUPlacement),
		"--" + placement.ReservedNodeLabelsFlag + "=" + strings.Join(p.ReservedNodeLabels, ","),
	}
}

// processStartTimeout bounds a component's start up to its caches' sync.
const processStartTimeout = 2 * time.Minute

// startProcess builds the component command once per harness, writes the
// component's kubeconfig (cfg: the identity it runs as) and, in the remote
// mode, its infrastructure cluster's (infraCfg), and starts it.
func (h *Harness) startProcess(ctx context.Context, name components.Name, controllerName string, cfg, infraCfg *rest.Config) error {
	if h.workDir == "" {
		if err := h.makeWorkDir(); err != nil {
			return err
		}
		if err := buildCommand(ctx, "./test/harness/cmd/component", filepath.Join(h.workDir, "component")); err != nil {
			return err
		}
	}
	kubeconfig := filepath.Join(h.workDir, string(name)+".kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "management", cfg); err != nil {
		return err
	}
	limits := h.limits(name)
	args := []string{
		"--component", string(name),
		"--kubeconfig", kubeconfig,
		"--controller-name", controllerName,
		"--kube-api-qps", strconv.FormatFloat(float64(limits.QPS), 'f', -1, 32),
		"--kube-api-burst", strconv.Itoa(limits.Burst),
		"--clustercache-client-qps", strconv.FormatFloat(float64(limits.ClusterCacheQPS), 'f', -1, 32),
		"--clustercache-client-burst", strconv.Itoa(limits.ClusterCacheBurst),
		"--worker-classes=" + strconv.FormatBool(h.opts.WorkerClasses),
		"--bootstrap-token-ttl", h.opts.BootstrapTokenTTL.String(),
		"--import-failure-restarts", strconv.Itoa(int(h.opts.ImportFailureRestarts)),
	}
	args = append(args, placementArgs(h.opts.placementPolicy())...)
	if h.opts.ProcessVerbosity > 0 {
		args = append(args, "--v", strconv.Itoa(h.opts.ProcessVerbosity))
	}
	if infraCfg != nil {
		infraKubeconfig := filepath.Join(h.workDir, string(name)+"-infrastructure.kubeconfig")
		if err := envtest.WriteKubeconfig(infraKubeconfig, "infrastructure", infraCfg); err != nil {
			return err
		}
		args = append(args, "--infrastructure-kubeconfig", infraKubeconfig)
		if h.opts.ManagementClusterIdentity != "" {
			args = append(args, "--management-cluster-identity", h.opts.ManagementClusterIdentity)
		}
	}
	logDir, err := h.processLogDir()
	if err != nil {
		return err
	}
	p := &ComponentProcess{Name: name, LogPath: filepath.Join(logDir, string(name)+".log"), command: filepath.Join(h.workDir, "component"), args: args, h: h}
	if err := p.start(ctx); err != nil {
		return err
	}
	h.processes = append(h.processes, p)
	return nil
}

// StartProcess builds the command in pkg (a package path relative to the
// repository, such as the scale benchmark's contract-floor providers) and
// runs it as a component process of this harness with cfg's identity: it
// gets --kubeconfig, args and --address-file, must write the URL of its
// request counts (requests.Recorder.Handler) to the address file once its
// caches synced, and stop on SIGTERM. Stop stops it with the providers.
func (h *Harness) StartProcess(ctx context.Context, name components.Name, pkg string, cfg *rest.Config, args ...string) (*ComponentProcess, error) {
	if h.workDir == "" {
		if err := h.makeWorkDir(); err != nil {
			return nil, err
		}
	}
	command := filepath.Join(h.workDir, string(name))
	if err := buildCommand(ctx, pkg, command); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(h.workDir, string(name)+".kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "management", cfg); err != nil {
		return nil, err
	}
	logDir, err := h.processLogDir()
	if err != nil {
		return nil, err
	}
	p := &ComponentProcess{Name: name, LogPath: filepath.Join(logDir, string(name)+".log"), command: command, args: append([]string{"--kubeconfig", kubeconfig}, args...), h: h}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	h.processes = append(h.processes, p)
	return p, nil
}

// makeWorkDir makes the directory for the processes' binaries,
// kubeconfigs and (without Options.ProcessLogDir) logs.
func (h *Harness) makeWorkDir() error {
	dir, err := os.MkdirTemp("", "harness-components-")
	if err != nil {
		return err
	}
	h.workDir = dir
	return nil
}

// processLogDir is where the processes' logs go: Options.ProcessLogDir, or
// the work directory.
func (h *Harness) processLogDir() (string, error) {
	dir := h.workDir
	if h.opts.ProcessLogDir != "" {
		dir = h.opts.ProcessLogDir
	}
	return dir, os.MkdirAll(dir, 0o750)
}

// start starts the process and waits until its caches synced. The log is
// appended to, so a restarted component's log follows its earlier lives.
func (p *ComponentProcess) start(ctx context.Context) error {
	addressFile := filepath.Join(p.h.workDir, string(p.Name)+".address")
	if err := os.Remove(addressFile); err != nil && !os.IsNotExist(err) {
		return err
	}
	cmd := exec.Command(p.command, append(p.args, "--address-file", addressFile)...) //nolint:gosec,noctx // A command the harness built; it runs until Kill or stopProcesses, not until a context ends.
	proc, err := process.Start(fmt.Sprintf("the %s component", p.Name), p.LogPath, cmd)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.proc, p.PID, p.killed = proc, proc.PID(), false
	p.mu.Unlock()
	go func() {
		<-proc.Done()
		p.mu.Lock()
		killed := p.killed
		p.mu.Unlock()
		if !killed && p.h.releaseCtx.Err() == nil {
			select {
			case p.h.errs <- fmt.Errorf("the %s component exited: %v; its log: %s", p.Name, proc.Err(), p.LogPath):
			default:
			}
		}
	}()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, processStartTimeout, true, func(context.Context) (bool, error) {
		if proc.Exited() {
			return false, fmt.Errorf("the %s component exited at start: %v: %s", p.Name, proc.Err(), proc.Tail(2000))
		}
		raw, err := os.ReadFile(addressFile) //nolint:gosec // A file of the repository or one the harness wrote.
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		p.mu.Lock()
		p.Requests = requests.Remote{URL: string(raw)}
		p.mu.Unlock()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s component: %w", p.Name, err)
	}
	return nil
}

// Kill kills the component with SIGKILL, as a node failure or the OOM
// killer would, and waits until it is gone. The harness does not report
// its exit as an error.
func (p *ComponentProcess) Kill() error {
	p.mu.Lock()
	proc := p.proc
	p.killed = true
	p.mu.Unlock()
	return proc.Kill()
}

// Restart starts a killed component again with the same flags and
// identity, returning once its caches synced.
func (p *ComponentProcess) Restart(ctx context.Context) error {
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if !proc.Exited() {
		return fmt.Errorf("the %s component is running", p.Name)
	}
	return p.start(ctx)
}

// stopProcesses stops the components together with SIGTERM, and kills
// those that do not stop in time.
func (h *Harness) stopProcesses() error {
	errs := make([]error, len(h.processes))
	var wg sync.WaitGroup
	for i, p := range h.processes {
		p.mu.Lock()
		proc := p.proc
		p.mu.Unlock()
		wg.Go(func() { errs[i] = proc.Stop(30 * time.Second) })
	}
	wg.Wait()
	h.processes = nil
	return errors.Join(errs...)
}

// buildCommand builds the command in pkg (test/harness/cmd/component, or
// one StartProcess names); Go's build cache makes every build after the
// first one short.
func buildCommand(ctx context.Context, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg) //nolint:gosec // A command of this repository.
	cmd.Dir = envtest.RepoRoot()
	cmd.Env = os.Environ()
	if os.Getenv("GOFLAGS") == "" {
		cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
