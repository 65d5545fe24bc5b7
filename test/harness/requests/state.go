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

package requests

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"time"
)

// State is everything a recorder counted since its last reset.
type State struct {
	Requests   []RequestCount `json:"requests"`
	Throttling Throttling     `json:"throttling"`
	// LastWrite is when each component last wrote.
	LastWrite map[string]time.Time `json:"lastWrite"`
	// LogErrors counts the errors each component logged.
	LogErrors map[string]int `json:"logErrors"`
}

// State returns what was counted so far.
func (r *Recorder) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return State{
		Requests:   sortedCounts(r.counts),
		Throttling: Throttling{Requests: r.throttled, MaxWait: r.maxWait, TotalWait: r.totalWait, By: sortedCounts(r.throttledBy)},
		LastWrite:  maps.Clone(r.lastWrite),
		LogErrors:  maps.Clone(r.logErrors),
	}
}

// Merge adds the states of several recorders (one per process) together.
func Merge(states ...State) State {
	counts, throttledBy := map[RequestKey]int{}, map[RequestKey]int{}
	out := State{LastWrite: map[string]time.Time{}, LogErrors: map[string]int{}}
	for _, s := range states {
		for _, c := range s.Requests {
			counts[c.RequestKey] += c.Count
		}
		for _, c := range s.Throttling.By {
			throttledBy[c.RequestKey] += c.Count
		}
		out.Throttling.Requests += s.Throttling.Requests
		out.Throttling.TotalWait += s.Throttling.TotalWait
		out.Throttling.MaxWait = max(out.Throttling.MaxWait, s.Throttling.MaxWait)
		for c, t := range s.LastWrite {
			if t.After(out.LastWrite[c]) {
				out.LastWrite[c] = t
			}
		}
		for c, n := range s.LogErrors {
			out.LogErrors[c] += n
		}
	}
	out.Requests, out.Throttling.By = sortedCounts(counts), sortedCounts(throttledBy)
	return out
}

// LastWriteOf returns when any of the components last wrote; zero when
// none did.
func (s State) LastWriteOf(components ...string) time.Time {
	var last time.Time
	for _, c := range components {
		if t := s.LastWrite[c]; t.After(last) {
			last = t
		}
	}
	return last
}

// Paths of the recorder's HTTP endpoint.
const (
	statePath = "/state"
	resetPath = "/reset"
)

// Handler serves the recorder to the driver: GET /state returns the State
// as JSON, POST /reset forgets it. Serve it on loopback only.
func (r *Recorder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+statePath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.State())
	})
	mux.HandleFunc("POST "+resetPath, func(w http.ResponseWriter, _ *http.Request) {
		r.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Remote reads a recorder another process serves with Handler.
type Remote struct {
	// URL is the endpoint's base, e.g. http://127.0.0.1:40123.
	URL string
}

// State fetches the remote recorder's counts.
func (rm Remote) State(ctx context.Context) (State, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rm.URL+statePath, http.NoBody)
	if err != nil {
		return State{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return State{}, fmt.Errorf("reading the request counts at %s: %w", rm.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return State{}, fmt.Errorf("reading the request counts at %s: %s", rm.URL, resp.Status)
	}
	var s State
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return State{}, fmt.Errorf("decoding the request counts of %s: %w", rm.URL, err)
	}
	return s, nil
}

// Reset makes the remote recorder forget its counts.
func (rm Remote) Reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rm.URL+resetPath, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("resetting the request counts at %s: %w", rm.URL, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("resetting the request counts at %s: %s", rm.URL, resp.Status)
	}
	return nil
}
