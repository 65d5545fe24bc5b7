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

package kairosconfig

import (
	"context"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// requestLog records the API requests sent on behalf of a context that
// carries it: every request a manager sends (its base context carries the
// manager's log), or those of one Reconcile call. Management requests are
// recorded at the transport, so cache hits never show; workload requests
// are recorded at the ClusterCache's client for the kinds it does not
// cache (Secrets) and for every write.
type requestLog struct {
	mu       sync.Mutex
	requests []request
}

// request is one API request.
type request struct {
	// cluster is "management" or "workload".
	cluster string
	// verb is the HTTP method: GET, POST, PUT, PATCH, DELETE.
	verb string
	// resource is e.g. secrets or kairosconfigs/status; "(list)" marks
	// a list.
	resource  string
	namespace string
	name      string
}

func (r request) String() string {
	return r.cluster + " " + r.verb + " " + r.resource + " " + r.namespace + "/" + r.name
}

type requestLogKey struct{}

func (l *requestLog) into(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestLogKey{}, l)
}

func requestLogFrom(ctx context.Context) *requestLog {
	l, _ := ctx.Value(requestLogKey{}).(*requestLog)
	return l
}

func (l *requestLog) add(r request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, r)
}

// all returns the recorded requests as strings.
func (l *requestLog) all() []string {
	return l.matching(func(request) bool { return true })
}

// matching returns the recorded requests that match, as strings.
func (l *requestLog) matching(match func(request) bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.requests {
		if match(r) {
			out = append(out, r.String())
		}
	}
	return out
}

// wrapConfig records the management requests of contexts with a log;
// watches are long-running and not counted.
func (l *requestLog) wrapConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if log := requestLogFrom(req.Context()); log != nil && req.URL.Query().Get("watch") != "true" {
				log.add(managementRequest(req))
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// managementRequest names a request the way the tests list them
// (secrets ns/name; kairosconfigs/status ns/name; "secrets (list)"),
// parsed by the apiserver's own RequestInfoFactory.
func managementRequest(req *http.Request) request {
	r := request{cluster: "management", verb: req.Method}
	info, err := requestInfos.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		r.resource = "/"
		return r
	}
	r.namespace, r.name, r.resource = info.Namespace, info.Name, info.Resource
	switch {
	case info.Subresource != "":
		r.resource += "/" + info.Subresource
	case info.Name == "":
		r.resource += " (list)"
	}
	return r
}

var requestInfos = &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// recordingClusterCache hands out workload clients that record requests.
type recordingClusterCache struct {
	clustercache.ClusterCache
}

func (c recordingClusterCache) GetClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error) {
	cl, err := c.ClusterCache.GetClient(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return recordingClient{Client: cl}, nil
}

// recordingClient records every write and every read of a Secret, which
// the ClusterCache's client reads directly; other reads are cache hits.
type recordingClient struct {
	client.Client
}

func record(ctx context.Context, verb string, key client.ObjectKey, obj client.Object) {
	log := requestLogFrom(ctx)
	if log == nil {
		return
	}
	kind := "object"
	switch obj.(type) {
	case *corev1.Secret:
		kind = "secrets"
	case *corev1.Node:
		kind = "nodes"
	}
	log.add(request{cluster: "workload", verb: verb, resource: kind, namespace: key.Namespace, name: key.Name})
}

func (c recordingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		record(ctx, "GET", key, obj)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c recordingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	record(ctx, "POST", client.ObjectKeyFromObject(obj), obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c recordingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	record(ctx, "PUT", client.ObjectKeyFromObject(obj), obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	record(ctx, "PATCH", client.ObjectKeyFromObject(obj), obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c recordingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	record(ctx, "DELETE", client.ObjectKeyFromObject(obj), obj)
	return c.Client.Delete(ctx, obj, opts...)
}
