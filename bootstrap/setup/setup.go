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

// Package setup wires the Kairos bootstrap provider into a controller
// manager: the scheme, what the cache holds, the ClusterCache, the
// KairosConfig reconciler and the webhooks. main.go and the benchmark
// harness use the same functions.
package setup

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/reconcilers/kairosconfig"
	"github.com/cozystack/cluster-api-workers/bootstrap/webhooks/admission"
	"github.com/cozystack/cluster-api-workers/internal/inlinekubeconfig"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// Production defaults, the flag defaults of the manager.
const (
	// DefaultKubeAPIQPS and DefaultKubeAPIBurst limit requests to the
	// management API server: Cluster API v1.14's own bootstrap and control
	// plane managers' defaults, since one provider writes for every
	// Machine of the management cluster (at 20/30, a pool scaling by a
	// hundred machines waits for its rate limiter; docs/benchmarks.md).
	DefaultKubeAPIQPS   float32 = 100
	DefaultKubeAPIBurst int     = 200
	// DefaultClusterCacheClientQPS and DefaultClusterCacheClientBurst limit
	// requests to each workload API server.
	DefaultClusterCacheClientQPS   float32 = 20
	DefaultClusterCacheClientBurst int     = 30
	// DefaultClusterCacheConcurrency is how many clusters' connections are
	// handled at once.
	DefaultClusterCacheConcurrency int = 100
	// DefaultKairosConfigConcurrency is how many KairosConfigs are
	// reconciled at once.
	DefaultKairosConfigConcurrency int = 10
)

// AddToScheme adds every API the provider reads or writes.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme,
		bootstrapv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// ManagerCacheOptions are Cluster API's bootstrap provider cache options
// (no managedFields; Secrets only with the cluster-name label, watched
// namespace and sync period applied) with the Secret data the KairosConfig
// reconciler reads kept: the cluster's own Secrets and our token Secrets;
// and Machines cut down to what the providers read (watchview.CachedMachine).
func ManagerCacheOptions(scheme *runtime.Scheme, controllerName, watchNamespace string, syncPeriod time.Duration) ctrlcache.Options {
	opts := kubeadmsetup.ManagerCacheOptions(scheme, controllerName, watchNamespace, syncPeriod)
	// ByObject is keyed by pointer: replace Cluster API's Secret entry
	// rather than adding a second one.
	for obj := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			delete(opts.ByObject, obj)
		}
	}
	opts.ByObject[&corev1.Secret{}] = kairosconfig.SecretCacheOptions()
	opts.ByObject[&clusterv1.Machine{}] = ctrlcache.ByObject{Transform: watchview.CachedMachine}
	return opts
}

// ManagerClientOptions make the manager's client read Secrets and
// ConfigMaps directly (cached Secrets are read through the Secret caching
// client) and every other kind, unstructured ones included, from the cache.
func ManagerClientOptions() client.Options {
	return kubeadmsetup.ManagerClientOptions()
}

// ClusterCacheCacheOptions are Cluster API's workload cache options (no
// managedFields) with Nodes cut down to what the reconciler reads.
func ClusterCacheCacheOptions() clustercache.CacheOptions {
	opts := kubeadmsetup.ClusterCacheCacheOptions()
	opts.ByObject = map[client.Object]ctrlcache.ByObject{&corev1.Node{}: kairosconfig.NodeCacheOptions()}
	return opts
}

// Options configure the ClusterCache and the KairosConfig reconciler.
type Options struct {
	// ControllerName names the manager in the workload clients' user agent.
	ControllerName string
	// TokenTTL is the bootstrap token lifetime between refreshes;
	// kairosconfig.DefaultTokenTTL when zero.
	TokenTTL time.Duration
	// TokenKeepAlive bounds how long after its mint a token is extended
	// while its node has not joined; kairosconfig.DefaultTokenKeepAlive
	// when zero.
	TokenKeepAlive time.Duration
	// KairosConfigConcurrency bounds parallel KairosConfig reconciles;
	// DefaultKairosConfigConcurrency when zero.
	KairosConfigConcurrency int
	// ClusterCacheClientQPS and ClusterCacheClientBurst limit requests to
	// each workload API server; the defaults when zero.
	ClusterCacheClientQPS   float32
	ClusterCacheClientBurst int
	// ClusterCacheConcurrency bounds parallel ClusterCache reconciles;
	// DefaultClusterCacheConcurrency when zero.
	ClusterCacheConcurrency int
	// WatchFilterValue restricts the controllers to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

func (o Options) withDefaults() Options {
	if o.TokenTTL == 0 {
		o.TokenTTL = kairosconfig.DefaultTokenTTL
	}
	if o.KairosConfigConcurrency == 0 {
		o.KairosConfigConcurrency = DefaultKairosConfigConcurrency
	}
	if o.ClusterCacheClientQPS == 0 {
		o.ClusterCacheClientQPS = DefaultClusterCacheClientQPS
	}
	if o.ClusterCacheClientBurst == 0 {
		o.ClusterCacheClientBurst = DefaultClusterCacheClientBurst
	}
	if o.ClusterCacheConcurrency == 0 {
		o.ClusterCacheConcurrency = DefaultClusterCacheConcurrency
	}
	return o
}

// The bounds of --bootstrap-token-ttl. Below a minute a token would be
// refreshed several times a minute per Machine; above a day (kubeadm's own
// default token lifetime) a token that cannot be revoked (a workload
// cluster out of reach) stays valid for longer than any join needs.
const (
	MinTokenTTL = time.Minute
	MaxTokenTTL = 24 * time.Hour
)

// ValidateTokenTTL checks a bootstrap token lifetime against its bounds.
func ValidateTokenTTL(ttl time.Duration) error {
	if ttl < MinTokenTTL || ttl > MaxTokenTTL {
		return fmt.Errorf("--bootstrap-token-ttl must be between %s and %s, got %s", MinTokenTTL, MaxTokenTTL, ttl)
	}
	return nil
}

// MaxTokenKeepAlive bounds --bootstrap-token-keep-alive: a week covers any
// join a hoster could wait for, and a token kept alive longer is a
// credential nothing uses.
const MaxTokenKeepAlive = 7 * 24 * time.Hour

// ValidateTokenKeepAlive checks the keep-alive against the TTL (a token
// lives at least one TTL) and its bound.
func ValidateTokenKeepAlive(keepAlive, ttl time.Duration) error {
	if keepAlive < ttl || keepAlive > MaxTokenKeepAlive {
		return fmt.Errorf("--bootstrap-token-keep-alive must be between --bootstrap-token-ttl (%s) and %s, got %s", ttl, MaxTokenKeepAlive, keepAlive)
	}
	return nil
}

// Reconcilers creates the ClusterCache (workload clients and watches)
// and registers the KairosConfig controller. The ClusterCache's workload
// connections are closed when the manager stops, so several managers can
// come and go in one process.
func Reconcilers(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.ControllerName == "" {
		return errors.New("bootstrap setup: Options.ControllerName is required")
	}
	if opts.TokenTTL < 0 {
		return fmt.Errorf("bootstrap setup: Options.TokenTTL must not be negative, got %s", opts.TokenTTL)
	}
	opts = opts.withDefaults()
	secretCachingClient, err := kubeadmsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return fmt.Errorf("creating the Secret caching client: %w", err)
	}
	clusterCache, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		// A tenant writes the kubeconfig Secret: one that names a file, a
		// command or a plugin is never connected with.
		SecretClient:     inlinekubeconfig.SecretReader{Reader: secretCachingClient},
		Cache:            ClusterCacheCacheOptions(),
		Client:           kubeadmsetup.ClusterCacheClientOptions(opts.ControllerName, opts.ClusterCacheClientQPS, opts.ClusterCacheClientBurst),
		WatchFilterValue: opts.WatchFilterValue,
	}, controller.Options{MaxConcurrentReconciles: opts.ClusterCacheConcurrency})
	if err != nil {
		return fmt.Errorf("setting up the ClusterCache: %w", err)
	}
	if shutdown, ok := clusterCache.(interface{ Shutdown() }); ok {
		if err := mgr.Add(shutdownOnStop(shutdown.Shutdown)); err != nil {
			return fmt.Errorf("registering the ClusterCache shutdown: %w", err)
		}
	}
	if err := (&kairosconfig.Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretCachingClient,
		APIReader:           mgr.GetAPIReader(),
		ClusterCache:        clusterCache,
		WatchFilterValue:    opts.WatchFilterValue,
		TokenTTL:            opts.TokenTTL,
		TokenKeepAlive:      opts.TokenKeepAlive,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: opts.KairosConfigConcurrency}); err != nil {
		return fmt.Errorf("setting up the KairosConfig controller: %w", err)
	}
	return nil
}

// shutdownOnStop runs stop once the manager is stopping. It runs on every
// replica, leader or not, since every replica's ClusterCache connects.
type shutdownOnStop func()

func (s shutdownOnStop) Start(ctx context.Context) error {
	<-ctx.Done()
	s()
	return nil
}

func (shutdownOnStop) NeedLeaderElection() bool { return false }

var _ manager.LeaderElectionRunnable = shutdownOnStop(nil)

// Webhooks registers the KairosConfig and KairosConfigTemplate
// admission webhooks.
func Webhooks(mgr ctrl.Manager) error {
	if err := admission.SetupWebhooksWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the webhooks: %w", err)
	}
	return nil
}
