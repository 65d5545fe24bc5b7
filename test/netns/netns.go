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

// Package netns gives a host process a network namespace of its own,
// reached from the host only through TCP forwards: for components whose
// listening ports are fixed and would collide with another's on the host.
// It needs root.
package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Namespace is a network namespace with only its loopback device, up. It
// is held by an OS thread of this process: it ends with Close, or with the
// process, and leaves nothing on the host.
type Namespace struct {
	// Path names the namespace while it lives (for nsenter --net).
	Path string

	// listen asks the holding thread for a listener in the namespace,
	// dial for a connection made from it.
	listen chan listenRequest
	dial   chan dialRequest
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	ls     []net.Listener
}

type listenRequest struct {
	addr  string
	reply chan listenReply
}

type listenReply struct {
	l   net.Listener
	err error
}

type dialRequest struct {
	addr  string
	reply chan dialReply
}

type dialReply struct {
	c   net.Conn
	err error
}

// New creates a namespace.
func New() (*Namespace, error) {
	ns := &Namespace{listen: make(chan listenRequest), dial: make(chan dialRequest), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in the namespace, must run nothing
		// else, and it exits with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			started <- fmt.Errorf("creating a network namespace: %w", err)
			return
		}
		ns.Path = fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := loopbackUp(); err != nil {
			started <- err
			return
		}
		started <- nil
		for {
			select {
			case req := <-ns.listen:
				// A socket stays in the namespace it was made in, whichever
				// thread accepts on it later.
				l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", req.addr)
				req.reply <- listenReply{l: l, err: err}
			case req := <-ns.dial:
				// Only the namespace's loopback is dialled: at once.
				c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", req.addr)
				req.reply <- dialReply{c: c, err: err}
			case <-ns.done:
				return
			}
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ns, nil
}

// loopbackUp sets the calling thread's namespace's loopback device up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	return nil
}

// ForwardOut listens at addr inside the namespace and forwards each
// connection to upstream, a TCP address dialled from the host's
// namespace: a process in the namespace reaches a host service at the
// address it has on the host when both are the same.
func (ns *Namespace) ForwardOut(addr, upstream string) error {
	reply := make(chan listenReply, 1)
	select {
	case ns.listen <- listenRequest{addr: addr, reply: reply}:
	case <-ns.done:
		return errors.New("the network namespace is closed")
	}
	r := <-reply
	if r.err != nil {
		return fmt.Errorf("listening at %s in the network namespace: %w", addr, r.err)
	}
	ns.mu.Lock()
	ns.ls = append(ns.ls, r.l)
	ns.mu.Unlock()
	go forward(r.l, func() (net.Conn, error) { return dialTCP(upstream) })
	return nil
}

// ForwardIn listens at hostAddr on the host (port 0 picks one) and
// forwards each connection to addr inside the namespace: a host process
// reaches a server in the namespace. It returns the host address.
func (ns *Namespace) ForwardIn(hostAddr, addr string) (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", hostAddr)
	if err != nil {
		return "", fmt.Errorf("listening at %s for the network namespace: %w", hostAddr, err)
	}
	ns.mu.Lock()
	ns.ls = append(ns.ls, l)
	ns.mu.Unlock()
	go forward(l, func() (net.Conn, error) { return ns.dialIn(addr) })
	return l.Addr().String(), nil
}

// dialIn connects to addr from inside the namespace.
func (ns *Namespace) dialIn(addr string) (net.Conn, error) {
	reply := make(chan dialReply, 1)
	select {
	case ns.dial <- dialRequest{addr: addr, reply: reply}:
	case <-ns.done:
		return nil, errors.New("the network namespace is closed")
	}
	r := <-reply
	return r.c, r.err
}

// Close stops the forwards and lets the namespace go once no process is
// left in it.
func (ns *Namespace) Close() error {
	ns.once.Do(func() { close(ns.done) })
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var err error
	for _, l := range ns.ls {
		err = errors.Join(err, l.Close())
	}
	ns.ls = nil
	return err
}

// Forward copies each connection accepted on l to and from a new one to
// upstream (a TCP address) until l is closed.
func Forward(l net.Listener, upstream string) {
	forward(l, func() (net.Conn, error) { return dialTCP(upstream) })
}

func dialTCP(addr string) (net.Conn, error) {
	return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", addr)
}

// forward copies each connection accepted on l to and from a new one
// dial makes, until l is closed.
func forward(l net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			up, err := dial()
			if err != nil {
				return
			}
			defer func() { _ = up.Close() }()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}
