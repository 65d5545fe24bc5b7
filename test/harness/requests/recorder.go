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

// Package requests counts the API requests of every client-go client in a
// process by component, cluster, verb and resource, and the time they
// waited in client-side rate limiters. The harness runs each component in
// its own manager with its own named logger; controller-runtime puts that
// logger into every reconcile's context, and client-go hands the context to
// its metrics hooks, which is how a request is traced back to the component
// that sent it. A component run as its own process serves its counts over
// loopback HTTP (Handler), and the driver reads them (Remote).
package requests

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/metrics"
)

// Components the requests are attributed to: the manager names the harness
// gives each component's logger, the driver, and requests outside any
// reconcile.
const (
	ComponentDriver    = "driver"
	ComponentUnknown   = "unattributed"
	ComponentBootstrap = "bootstrap"
	ComponentInfra     = "infrastructure"
	ComponentCAPI      = "capi"
	ComponentSim       = "simulators"
)

// OurComponents are the providers this project ships (in a kubeadm peer
// run, "bootstrap" is Cluster API's kubeadm bootstrap provider).
var OurComponents = []string{ComponentBootstrap, ComponentInfra}

// RequestKey is one row of the request table.
type RequestKey struct {
	Component string `json:"component"`
	// Cluster is "management" or "workload".
	Cluster  string `json:"cluster"`
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
}

// IsWrite reports whether the verb changes state.
func (k RequestKey) IsWrite() bool {
	switch k.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// RequestCount is a row of the request table with its count.
type RequestCount struct {
	RequestKey
	Count int `json:"count"`
}

// Recorder counts the API requests of every client in the process by
// component, cluster, verb and resource, and the time they waited in
// client-side rate limiters.
type Recorder struct {
	managementHost string
	// unattributed is the component requests outside any reconcile belong
	// to: a component's own process sends nothing but its own requests.
	unattributed string
	// delegate receives the log lines; nil discards them.
	delegate logr.LogSink

	mu          sync.Mutex
	counts      map[RequestKey]int
	lastWrite   map[string]time.Time
	throttled   int
	throttledBy map[RequestKey]int
	maxWait     time.Duration
	totalWait   time.Duration
	logErrors   map[string]int
	previousReq metrics.LatencyMetric
	previousRL  metrics.LatencyMetric
}

// throttleThreshold is the rate limiter wait above which a request counts
// as throttled: client-go's own threshold for reporting client-side
// throttling. Shorter waits are goroutine scheduling on a busy machine.
const throttleThreshold = 50 * time.Millisecond

// Options configure a recorder.
type Options struct {
	// ManagementHost is the management apiserver's URL or host:port; other
	// hosts are workload clusters. Settable later with SetManagementHost.
	ManagementHost string
	// Component, when set, owns the requests made outside any reconcile
	// (informers, event recorders): set in a component's own process.
	Component string
	// Delegate, when set, receives the log lines of Logger; they are
	// discarded otherwise.
	Delegate logr.LogSink
}

// NewRecorder returns a recorder; Install hooks it into client-go.
func NewRecorder(opts Options) *Recorder {
	unattributed := opts.Component
	if unattributed == "" {
		unattributed = ComponentUnknown
	}
	return &Recorder{
		managementHost: hostOf(opts.ManagementHost),
		unattributed:   unattributed,
		delegate:       opts.Delegate,
		counts:         map[RequestKey]int{},
		lastWrite:      map[string]time.Time{},
		logErrors:      map[string]int{},
		throttledBy:    map[RequestKey]int{},
	}
}

// SetManagementHost names the management apiserver once it is known.
func (r *Recorder) SetManagementHost(hostOrURL string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.managementHost = hostOf(hostOrURL)
}

// Install makes client-go report every request and every rate limiter wait
// to the recorder (and still to whatever listened before). client-go's
// metrics are process globals, so one recorder is installed per process.
func (r *Recorder) Install() {
	r.previousReq, r.previousRL = metrics.RequestLatency, metrics.RateLimiterLatency
	metrics.RequestLatency = requestObserver{r}
	metrics.RateLimiterLatency = throttleObserver{r}
}

// Uninstall restores the hooks Install replaced, so a later recorder in
// the same process does not chain to this one.
func (r *Recorder) Uninstall() {
	metrics.RequestLatency, metrics.RateLimiterLatency = r.previousReq, r.previousRL
}

// Reset forgets what was counted so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = map[RequestKey]int{}
	r.lastWrite = map[string]time.Time{}
	r.throttled, r.maxWait, r.totalWait = 0, 0, 0
	r.throttledBy = map[RequestKey]int{}
}

func sortedCounts(counts map[RequestKey]int) []RequestCount {
	out := make([]RequestCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, RequestCount{RequestKey: k, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].RequestKey, out[j].RequestKey
		if a.Component != b.Component {
			return a.Component < b.Component
		}
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Verb < b.Verb
	})
	return out
}

// Throttling is what the rate limiters cost.
type Throttling struct {
	// Requests waited longer than 50ms for a rate limiter token.
	Requests int `json:"requests"`
	// MaxWait and TotalWait are over all requests.
	MaxWait   time.Duration `json:"maxWait"`
	TotalWait time.Duration `json:"totalWait"`
	// By are the throttled requests by who sent them.
	By []RequestCount `json:"by,omitempty"`
}

// key classifies a request; r.mu is held.
func (r *Recorder) key(ctx context.Context, verb string, u url.URL) RequestKey {
	key := classify(verb, u)
	key.Component = componentOf(ctx)
	key.Cluster = "workload"
	if hostOf(u.Host) == r.managementHost {
		key.Cluster = "management"
	}
	if key.Component != ComponentUnknown {
		return key
	}
	if r.unattributed != ComponentUnknown {
		key.Component = r.unattributed
		return key
	}
	// The simulated kubelets heartbeat outside any reconcile; nothing else
	// renews node Leases or writes Node status.
	if key.Cluster == "workload" {
		switch key.Resource {
		case "leases", "nodes", "nodes/status":
			key.Component = ComponentSim
		}
	}
	return key
}

func (r *Recorder) observe(ctx context.Context, verb string, u url.URL) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := r.key(ctx, verb, u)
	r.counts[key]++
	if key.IsWrite() {
		r.lastWrite[key.Component] = time.Now()
	}
}

func (r *Recorder) observeWait(ctx context.Context, verb string, u url.URL, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := r.key(ctx, verb, u)
	r.totalWait += wait
	if wait > r.maxWait {
		r.maxWait = wait
	}
	if wait > throttleThreshold {
		r.throttled++
		r.throttledBy[key]++
	}
}

type requestObserver struct{ r *Recorder }

func (o requestObserver) Observe(ctx context.Context, verb string, u url.URL, latency time.Duration) {
	o.r.observe(ctx, verb, u)
	o.r.previousReq.Observe(ctx, verb, u, latency)
}

type throttleObserver struct{ r *Recorder }

func (o throttleObserver) Observe(ctx context.Context, verb string, u url.URL, latency time.Duration) {
	o.r.observeWait(ctx, verb, u, latency)
	o.r.previousRL.Observe(ctx, verb, u, latency)
}

func hostOf(hostOrURL string) string {
	if u, err := url.Parse(hostOrURL); err == nil && u.Host != "" {
		return u.Host
	}
	return hostOrURL
}

// classify turns client-go's URL template (names and namespaces already
// replaced by placeholders) into a verb and resource.
func classify(method string, u url.URL) RequestKey {
	info, err := requestInfos.NewRequestInfo(&http.Request{Method: method, URL: &u})
	if err != nil || !info.IsResourceRequest {
		return RequestKey{Verb: strings.ToLower(method), Resource: u.Path}
	}
	resource := info.Resource
	if info.Subresource != "" {
		resource += "/" + info.Subresource
	}
	return RequestKey{Verb: info.Verb, Resource: resource}
}

// requestInfos parses request paths as the apiserver does.
var requestInfos = &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// componentOf reads the component from the logger in the context.
func componentOf(ctx context.Context) string {
	if ctx == nil {
		return ComponentUnknown
	}
	log, err := logr.FromContext(ctx)
	if err != nil {
		return ComponentUnknown
	}
	if s, ok := log.GetSink().(*attributingSink); ok && s.component != "" {
		return s.component
	}
	return ComponentUnknown
}

// attributingSink is a logger that remembers the first name it was given
// (the harness names each manager's logger after its component), counts
// errors, and passes every line on to the recorder's delegate, if any.
type attributingSink struct {
	component string
	recorder  *Recorder
	delegate  logr.LogSink
}

// Logger returns the logger to hand to the harness or a component.
func (r *Recorder) Logger() logr.Logger {
	return logr.New(&attributingSink{recorder: r, delegate: r.delegate})
}

// DriverContext marks the driver's own requests.
func (r *Recorder) DriverContext(ctx context.Context) context.Context {
	return logr.NewContext(ctx, logr.New(&attributingSink{component: ComponentDriver, recorder: r}))
}

func (s *attributingSink) Init(info logr.RuntimeInfo) {
	if s.delegate != nil {
		// One more frame: this sink's.
		info.CallDepth++
		s.delegate.Init(info)
	}
}

func (s *attributingSink) Enabled(level int) bool {
	return s.delegate != nil && s.delegate.Enabled(level)
}

func (s *attributingSink) Info(level int, msg string, kv ...any) {
	if s.delegate != nil {
		s.delegate.Info(level, msg, kv...)
	}
}

func (s *attributingSink) WithValues(kv ...any) logr.LogSink {
	if s.delegate == nil {
		return s
	}
	return &attributingSink{component: s.component, recorder: s.recorder, delegate: s.delegate.WithValues(kv...)}
}

func (s *attributingSink) Error(err error, msg string, kv ...any) {
	c := s.component
	if c == "" {
		c = s.recorder.unattributed
	}
	s.recorder.mu.Lock()
	s.recorder.logErrors[c]++
	s.recorder.mu.Unlock()
	if s.delegate != nil {
		s.delegate.Error(err, msg, kv...)
	}
}

func (s *attributingSink) WithName(name string) logr.LogSink {
	next := &attributingSink{component: s.component, recorder: s.recorder, delegate: s.delegate}
	if next.component == "" {
		next.component = name
	}
	if s.delegate != nil {
		next.delegate = s.delegate.WithName(name)
	}
	return next
}
