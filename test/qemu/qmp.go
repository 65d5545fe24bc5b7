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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// qmp is a connection to a QEMU's machine protocol monitor (QMP): commands
// and their replies, and the events QEMU sends meanwhile.
type qmp struct {
	conn net.Conn
	dec  *json.Decoder
	// events were received while waiting for a command's reply, oldest
	// first, for waitEvent.
	events []qmpMessage
}

// qmpMessage is one message from QEMU: a greeting, a reply (return or
// error) or an event.
type qmpMessage struct {
	Greeting json.RawMessage `json:"QMP"`
	Return   json.RawMessage `json:"return"`
	Error    *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// dialQMP connects to the monitor socket, reads QEMU's greeting and leaves
// capabilities negotiation, after which QEMU takes commands.
func dialQMP(ctx context.Context, socket string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("connecting to the QEMU monitor: %w", err)
	}
	q := &qmp{conn: conn, dec: json.NewDecoder(conn)}
	greeting, err := q.read(ctx)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if greeting.Greeting == nil {
		_ = conn.Close()
		return nil, errors.New("the QEMU monitor did not greet with its version")
	}
	if err := q.execute(ctx, "qmp_capabilities", nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return q, nil
}

// Close closes the connection; QEMU keeps running.
func (q *qmp) Close() error { return q.conn.Close() }

// read reads the next message, until ctx ends.
func (q *qmp) read(ctx context.Context) (qmpMessage, error) {
	// Ending ctx interrupts the read; the connection is of no use after.
	stop := context.AfterFunc(ctx, func() { _ = q.conn.SetReadDeadline(time.Now()) })
	defer stop()
	var m qmpMessage
	if err := q.dec.Decode(&m); err != nil {
		if ctx.Err() != nil {
			return m, fmt.Errorf("reading from the QEMU monitor: %w", ctx.Err())
		}
		return m, fmt.Errorf("reading from the QEMU monitor: %w", err)
	}
	return m, nil
}

// execute runs a command and waits for its reply; an error reply is
// returned as an error with QEMU's description.
func (q *qmp) execute(ctx context.Context, command string, arguments any) error {
	req := map[string]any{"execute": command}
	if arguments != nil {
		req["arguments"] = arguments
	}
	if err := json.NewEncoder(q.conn).Encode(req); err != nil {
		return fmt.Errorf("sending %s to the QEMU monitor: %w", command, err)
	}
	for {
		m, err := q.read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the reply to %s: %w", command, err)
		}
		switch {
		case m.Event != "":
			q.events = append(q.events, m)
		case m.Error != nil:
			return fmt.Errorf("QEMU refused %s: %s: %s", command, m.Error.Class, m.Error.Desc)
		case m.Return != nil:
			return nil
		}
	}
}

// waitEvent waits for an event of that name whose data match (any data
// when match is nil), received since the connection was made, until ctx
// ends.
func (q *qmp) waitEvent(ctx context.Context, name string, match func(data json.RawMessage) bool) (json.RawMessage, error) {
	for {
		for i, m := range q.events {
			if m.Event == name && (match == nil || match(m.Data)) {
				q.events = q.events[i+1:]
				return m.Data, nil
			}
		}
		q.events = q.events[:0]
		m, err := q.read(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for event %s: %w", name, err)
		}
		if m.Event != "" {
			q.events = append(q.events, m)
		}
	}
}
