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

package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// fakeMonitor serves one QMP connection as QEMU does: a greeting, then a
// reply per command from replies (by command name), each preceded by the
// events queued for that command.
func fakeMonitor(t *testing.T, replies map[string]string, eventsBefore map[string][]string) (socket string, commands <-chan string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket = filepath.Join(dir, "qmp.sock")
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	seen := make(chan string, 16)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = conn.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}` + "\n"))
		in := bufio.NewScanner(conn)
		for in.Scan() {
			var req struct {
				Execute string `json:"execute"`
			}
			if json.Unmarshal(in.Bytes(), &req) != nil {
				return
			}
			seen <- strings.TrimSpace(in.Text())
			for _, e := range eventsBefore[req.Execute] {
				_, _ = conn.Write([]byte(e + "\n"))
			}
			reply, ok := replies[req.Execute]
			if !ok {
				reply = `{"return": {}}`
			}
			_, _ = conn.Write([]byte(reply + "\n"))
		}
	}()
	return socket, seen
}

// TestQMPCommandsAndEvents checks the monitor client against QEMU's
// protocol: capabilities negotiated first, commands sent with their
// arguments, an error reply returned with QEMU's description, and an
// event that arrives before a command's reply still found by waitEvent.
func TestQMPCommandsAndEvents(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	socket, commands := fakeMonitor(t,
		map[string]string{"device_del": `{"error": {"class": "DeviceNotFound", "desc": "Device 'nothing' not found"}}`},
		map[string][]string{"send-key": {
			`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RTC_CHANGE", "data": {"offset": 0}}`,
			`{"timestamp": {"seconds": 1, "microseconds": 3}, "event": "RESET", "data": {"guest": true, "reason": "guest-reset"}}`,
		}})
	q, err := dialQMP(ctx, socket)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = q.Close() }()
	g.Expect(<-commands).To(Equal(`{"execute":"qmp_capabilities"}`))

	g.Expect(q.execute(ctx, "send-key", map[string]any{"keys": []map[string]any{{"type": "qcode", "data": "delete"}}})).To(Succeed())
	g.Expect(<-commands).To(Equal(`{"arguments":{"keys":[{"data":"delete","type":"qcode"}]},"execute":"send-key"}`))
	data, err := q.waitEvent(ctx, "RESET", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring(`"reason": "guest-reset"`))

	err = q.execute(ctx, "device_del", map[string]any{"id": "nothing"})
	g.Expect(err).To(MatchError(`QEMU refused device_del: DeviceNotFound: Device 'nothing' not found`))

	// No further event comes: the wait ends with the context.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	_, err = q.waitEvent(short, "DEVICE_DELETED", nil)
	g.Expect(err).To(MatchError(ContainSubstring("waiting for event DEVICE_DELETED")))
	g.Expect(err).To(MatchError(context.DeadlineExceeded))
}

// TestGuestWithoutMonitor checks that a guest that is not QEMU (the
// runner's tests run sleep processes) says so instead of dialing nothing.
func TestGuestWithoutMonitor(t *testing.T) {
	g := NewWithT(t)
	vm, err := sleepVM("sleeper", t.TempDir(), "600")
	g.Expect(err).NotTo(HaveOccurred())
	defer vm.Kill()
	g.Expect(vm.Reboot(context.Background())).To(MatchError("guest sleeper has no QEMU monitor"))
	g.Expect(vm.DetachSeed(context.Background())).To(MatchError("guest sleeper has no QEMU monitor"))
}

// TestRebootAndDetachSeedThroughTheMonitor checks what the runner's two
// monitor faults ask of QEMU: a reboot keeps QEMU resetting (it is not put
// back to -no-reboot) and presses Ctrl-Alt-Del, then waits for the reset;
// an unplug deletes the seed's device and waits for that device, not for
// the virtio backend QEMU deletes first.
func TestRebootAndDetachSeedThroughTheMonitor(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, err := sleepVM("worker", t.TempDir(), "600")
	g.Expect(err).NotTo(HaveOccurred())
	defer vm.Kill()

	var commands <-chan string
	vm.monitor, commands = fakeMonitor(t, nil, map[string][]string{"send-key": {
		`{"timestamp": {"seconds": 1, "microseconds": 3}, "event": "RESET", "data": {"guest": true, "reason": "guest-reset"}}`,
	}})
	g.Expect(vm.Reboot(ctx)).To(Succeed())
	g.Expect(<-commands).To(Equal(`{"execute":"qmp_capabilities"}`))
	g.Expect(<-commands).To(Equal(`{"arguments":{"reboot":"reset"},"execute":"set-action"}`))
	g.Expect(<-commands).To(Equal(`{"arguments":{"keys":[{"data":"ctrl","type":"qcode"},{"data":"alt","type":"qcode"},{"data":"delete","type":"qcode"}]},"execute":"send-key"}`))
	g.Consistently(commands, 100*time.Millisecond).ShouldNot(Receive(), "nothing after the reset: QEMU keeps resetting")

	vm.monitor, commands = fakeMonitor(t, nil, map[string][]string{"device_del": {
		`{"timestamp": {"seconds": 2, "microseconds": 1}, "event": "DEVICE_DELETED", "data": {"path": "/machine/peripheral/seed/virtio-backend"}}`,
		`{"timestamp": {"seconds": 2, "microseconds": 2}, "event": "DEVICE_DELETED", "data": {"device": "seed", "path": "/machine/peripheral/seed"}}`,
	}})
	g.Expect(vm.DetachSeed(ctx)).To(Succeed())
	g.Expect(<-commands).To(Equal(`{"execute":"qmp_capabilities"}`))
	g.Expect(<-commands).To(Equal(`{"arguments":{"id":"seed"},"execute":"device_del"}`))

	// A reset that never comes fails the reboot when the context ends.
	vm.monitor, _ = fakeMonitor(t, nil, nil)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	g.Expect(vm.Reboot(short)).To(MatchError(ContainSubstring("guest worker did not reboot")))
}
