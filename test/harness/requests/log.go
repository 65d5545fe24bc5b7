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
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Clusters a logged request is sent to.
const (
	ClusterManagement = "management"
	ClusterWorkload   = "workload"
)

// Log keeps the API requests one by one, where the Recorder only counts
// them: for tests that pin which objects a controller reads and writes.
// Requests reach it through a rest.Config (WrapConfig) or a ClusterCache
// (ClusterCache) it wraps; a request whose context carries a Log (Into)
// goes to that Log instead, so one Reconcile's requests can be told apart
// from its manager's.
type Log struct {
	// Keep, when set, says which requests are kept; the others are
	// dropped.
	Keep func(Request) bool

	mu       sync.Mutex
	requests []Request
}

// Request is one API request.
type Request struct {
	// Cluster is ClusterManagement or ClusterWorkload.
	Cluster string
	// Verb is the apiserver's: get, list, create, update, patch, delete,
	// deletecollection.
	Verb string
	// Resource is e.g. secrets or kairosconfigs/status.
	Resource  string
	Namespace string
	// Name is the object's (a create's is read from its body); empty for a
	// list.
	Name string
	// Body is what a write sent.
	Body string
	// Failed says the API server refused the request, or did not answer.
	Failed bool
}

// String is "cluster verb resource namespace/name".
func (r Request) String() string {
	return r.Cluster + " " + r.Verb + " " + r.Resource + " " + r.Namespace + "/" + r.Name
}

// IsWrite reports whether the request changes state.
func (r Request) IsWrite() bool {
	return RequestKey{Verb: r.Verb}.IsWrite()
}

// Writes keeps only writes (a Log's Keep).
func Writes(r Request) bool { return r.IsWrite() }

type logKey struct{}

// Into returns ctx carrying l: the requests sent on ctx go to l.
func (l *Log) Into(ctx context.Context) context.Context {
	return context.WithValue(ctx, logKey{}, l)
}

// logFor returns the Log the context carries, or l.
func (l *Log) logFor(ctx context.Context) *Log {
	if ctx != nil {
		if carried, ok := ctx.Value(logKey{}).(*Log); ok {
			return carried
		}
	}
	return l
}

func (l *Log) add(r Request) {
	if l == nil || (l.Keep != nil && !l.Keep(r)) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, r)
}

// Requests returns the requests that match (all of them when match is
// nil), in the order they were sent.
func (l *Log) Requests(match func(Request) bool) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Request, 0, len(l.requests))
	for _, r := range l.requests {
		if match == nil || match(r) {
			out = append(out, r)
		}
	}
	return out
}

// Strings returns the requests that match as strings.
func (l *Log) Strings(match func(Request) bool) []string {
	return Strings(l.Requests(match))
}

// Strings returns each request's String.
func Strings(requests []Request) []string {
	out := make([]string, 0, len(requests))
	for _, r := range requests {
		out = append(out, r.String())
	}
	return out
}

// WrapConfig returns a copy of cfg, a management cluster's, whose requests
// are logged. Watches are long-running and not logged; cache hits never
// reach the transport.
func (l *Log) WrapConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("watch") == "true" {
				return rt.RoundTrip(req)
			}
			r := parseRequest(req)
			resp, err := rt.RoundTrip(req)
			r.Failed = err != nil || resp.StatusCode >= http.StatusBadRequest
			l.logFor(req.Context()).add(r)
			return resp, err
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// parseRequest reads what a request is to, as the apiserver parses it, and
// a copy of a write's body.
func parseRequest(req *http.Request) Request {
	r := Request{Cluster: ClusterManagement, Verb: req.Method, Resource: req.URL.Path}
	if info, err := requestInfos.NewRequestInfo(req); err == nil && info.IsResourceRequest {
		r.Verb, r.Namespace, r.Name, r.Resource = info.Verb, info.Namespace, info.Name, info.Resource
		if info.Subresource != "" {
			r.Resource += "/" + info.Subresource
		}
	}
	if !r.IsWrite() || req.GetBody == nil {
		return r
	}
	body, err := req.GetBody()
	if err != nil {
		return r
	}
	defer body.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, body); err == nil {
		r.Body = b.String()
	}
	if r.Verb == "create" && r.Name == "" {
		r.Name = createdName(b.Bytes())
	}
	return r
}

// createdName reads the name of the object a create sends: from
// protobuf, as client-go sends built-in kinds, or from JSON.
func createdName(body []byte) string {
	if obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(body, nil, nil); err == nil {
		if o, err := meta.Accessor(obj); err == nil {
			return o.GetName()
		}
	}
	var created struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &created) != nil {
		return ""
	}
	return created.Metadata.Name
}

// ClusterCache hands out workload clients whose requests are logged: every
// write, and the reads of the kinds in Uncached, which the ClusterCache's
// clients send to the API server (its other reads are cache hits). The
// ClusterCache builds its own rest.Configs, so requests are logged at the
// client rather than the transport, and only on contexts that carry a Log.
type ClusterCache struct {
	clustercache.ClusterCache
	// Uncached are the kinds the ClusterCache's clients read directly.
	Uncached []client.Object
}

// GetClient returns the workload cluster's client, logging its requests.
func (c ClusterCache) GetClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error) {
	cl, err := c.ClusterCache.GetClient(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return loggingClient{Client: cl, uncached: c.Uncached}, nil
}

// loggingClient logs the requests of a workload cluster's client.
type loggingClient struct {
	client.Client
	uncached []client.Object
}

func (c loggingClient) log(ctx context.Context, verb string, obj client.Object, key client.ObjectKey, err error) error {
	l := (*Log)(nil).logFor(ctx)
	if l == nil {
		return err
	}
	r := Request{Cluster: ClusterWorkload, Verb: verb, Namespace: key.Namespace, Name: key.Name, Failed: err != nil}
	if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); err == nil {
		// The plural is all a test names; guessing it needs no discovery.
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		r.Resource = plural.Resource
	}
	l.add(r)
	return err
}

func (c loggingClient) isUncached(obj client.Object) bool {
	return slices.ContainsFunc(c.uncached, func(u client.Object) bool {
		want, err := apiutil.GVKForObject(u, c.Scheme())
		if err != nil {
			return false
		}
		got, err := apiutil.GVKForObject(obj, c.Scheme())
		return err == nil && got == want
	})
}

func (c loggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Client.Get(ctx, key, obj, opts...)
	if c.isUncached(obj) {
		return c.log(ctx, "get", obj, key, err)
	}
	return err
}

func (c loggingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	key := client.ObjectKeyFromObject(obj)
	return c.log(ctx, "create", obj, key, c.Client.Create(ctx, obj, opts...))
}

func (c loggingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	key := client.ObjectKeyFromObject(obj)
	return c.log(ctx, "update", obj, key, c.Client.Update(ctx, obj, opts...))
}

func (c loggingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	key := client.ObjectKeyFromObject(obj)
	return c.log(ctx, "patch", obj, key, c.Client.Patch(ctx, obj, patch, opts...))
}

func (c loggingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	key := client.ObjectKeyFromObject(obj)
	return c.log(ctx, "delete", obj, key, c.Client.Delete(ctx, obj, opts...))
}
