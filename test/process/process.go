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

// Package process runs the test tiers' child processes (apiservers,
// controller-managers, the providers' components, KubeVirt's, QEMU, a
// node's init) one way: the output appended to a log file, the child
// killed with the test binary however it ends, stopped with SIGTERM and
// then SIGKILL, and the end of its log for error messages (Tail).
package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a started child process.
type Process struct {
	// Name says what it is in errors ("kube-apiserver", "the
	// infrastructure component").
	Name string
	// LogPath holds its output.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd with its output appended to logPath (created if
// missing). cmd's SysProcAttr is kept (a caller sets Setpgid there), with
// Pdeathsig set so the child dies with this process.
func Start(name, logPath string, cmd *exec.Cmd) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // A log in a directory the test made.
	if err != nil {
		return nil, err
	}
	// The child holds its own copy of the descriptor.
	defer func() { _ = log.Close() }()
	cmd.Stdout, cmd.Stderr = log, log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process exited (cmd.Wait's error), once Done is closed.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the process; one that has exited is not an error.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", p.Name, err)
	}
	return nil
}

// Kill kills the process with SIGKILL and waits until it has exited.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Stop sends SIGTERM and waits until the process has exited; after grace
// it kills it and says so.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM: killed", p.Name, grace)
	}
}

// Tail returns the last limit bytes of the process's log.
func (p *Process) Tail(limit int) string { return Tail(p.LogPath, limit) }

// Tail returns the last limit bytes of a log, for an error message; what
// cannot be read says why.
func Tail(path string, limit int) string {
	raw, err := os.ReadFile(path) //nolint:gosec // A log in a directory the test made.
	if err != nil {
		return err.Error()
	}
	return TailOf(string(raw), limit)
}

// TailOf returns the last limit bytes of s: the end of a log or console
// read some other way, for an error message.
func TailOf(s string, limit int) string {
	if len(s) > limit {
		return s[len(s)-limit:]
	}
	return s
}

// WorkDir is where a supervised component keeps its logs and files: the
// directory given (created if missing, kept afterwards, so a test's
// artifacts survive) or, when none is, a temporary one that Remove deletes.
// It reports whether it made a temporary directory.
func WorkDir(given, tempPrefix string) (dir string, temporary bool, err error) {
	if given == "" {
		dir, err = os.MkdirTemp("", tempPrefix)
		return dir, err == nil, err
	}
	return given, false, os.MkdirAll(given, 0o750)
}
