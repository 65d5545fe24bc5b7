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

package kubevirt

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/cozystack/cluster-api-workers/test/process"
)

// Process is a KubeVirt component run as a child process and restarted
// after RestartDelay whenever it exits, as a Deployment's pod restarts.
// Faults are injected with Kill (it comes back) and Down/Up (it stays down
// until Up).
type Process struct {
	// Name is the component's name.
	Name string
	// LogPath holds its output, every run appended.
	LogPath string

	bin          string
	args         []string
	restartDelay time.Duration

	mu   sync.Mutex
	proc *process.Process
	// exited is closed once the run's exit is logged.
	exited   chan struct{}
	down     bool
	stopped  bool
	starts   int
	wake     chan struct{}
	finished chan struct{}
}

// StartProcess starts the component and its supervisor.
func StartProcess(name, bin string, args []string, logPath string, restartDelay time.Duration) *Process {
	p := &Process{Name: name, LogPath: logPath, bin: bin, args: args, restartDelay: restartDelay,
		wake: make(chan struct{}, 1), finished: make(chan struct{})}
	go p.supervise()
	return p
}

func (p *Process) supervise() {
	defer close(p.finished)
	for {
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		if p.down {
			p.mu.Unlock()
			<-p.wake
			continue
		}
		exited, err := p.startLocked()
		p.mu.Unlock()
		if err != nil {
			p.appendLog(fmt.Sprintf("supervisor: starting %s: %v", p.Name, err))
		} else {
			<-exited
		}
		select {
		case <-time.After(p.restartDelay):
		case <-p.wake:
		}
	}
}

// startLocked starts one run; p.mu is held.
func (p *Process) startLocked() (chan struct{}, error) {
	//nolint:gosec,noctx // virt-api or virt-controller, built into the cache; it runs until Stop, not until a context ends.
	proc, err := process.Start(p.Name, p.LogPath, exec.Command(p.bin, p.args...))
	if err != nil {
		return nil, err
	}
	p.starts++
	exited := make(chan struct{})
	p.proc, p.exited = proc, exited
	go func() {
		<-proc.Done()
		p.appendLog(fmt.Sprintf("supervisor: %s exited: %v", p.Name, proc.Err()))
		close(exited)
	}()
	return exited, nil
}

func (p *Process) appendLog(line string) {
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), line)
}

// Starts counts the runs so far.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// PID is the running process's id, or 0 between runs.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.Exited() {
		return 0
	}
	return p.proc.PID()
}

// Kill kills the running process with SIGKILL; the supervisor starts it
// again after the restart delay.
func (p *Process) Kill() {
	p.mu.Lock()
	exited := p.killLocked()
	p.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

func (p *Process) killLocked() chan struct{} {
	if p.proc == nil || p.proc.Exited() {
		return nil
	}
	_ = p.proc.Signal(syscall.SIGKILL)
	return p.exited
}

// Down kills the process and keeps it down until Up.
func (p *Process) Down() {
	p.mu.Lock()
	p.down = true
	exited := p.killLocked()
	p.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// Up starts a process that Down stopped.
func (p *Process) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	p.poke()
}

func (p *Process) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stop ends the process and its supervisor: SIGTERM, then SIGKILL after
// ten seconds.
func (p *Process) Stop() error {
	p.mu.Lock()
	p.stopped = true
	proc, exited := p.proc, p.exited
	p.mu.Unlock()
	p.poke()
	if proc != nil {
		_ = proc.Stop(10 * time.Second)
		<-exited
	}
	<-p.finished
	return nil
}

// Tail returns the end of the process's log.
func (p *Process) Tail() string { return process.Tail(p.LogPath, 3000) }
