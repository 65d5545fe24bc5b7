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

// Package components builds the manager of one provider component exactly
// as its production main.go does (cache and client options, the reconcilers
// and their concurrency, the ClusterCache, the client rate limits of the
// flag defaults): the Kairos bootstrap provider, the KubeVirt infrastructure
// provider with the WorkerClass controllers, and Cluster API's own kubeadm
// bootstrap provider (the peer the scale benchmark compares with). The
// harness uses it in-process; test/harness/cmd/component runs one component
// as its own OS process, so its CPU and memory are measured alone.
// Webhooks are not part of a component here: the harness serves them
// in-process with the management apiserver.
package components

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubeadmv1beta1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta1" //nolint:staticcheck // Cluster API's kubeadm provider registers the version it converts from.
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	kubeadmsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/remote"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	bootstrapsetup "github.com/cozystack/cluster-api-workers/bootstrap/setup"
	"github.com/cozystack/cluster-api-workers/exp/workerclass"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	infrasetup "github.com/cozystack/cluster-api-workers/infrastructure/setup"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// Name is a component.
type Name string

// The components, and Cluster API core, whose limits the harness needs too.
const (
	KairosBootstrap  Name = "kairos-bootstrap"
	KubeadmBootstrap Name = "kubeadm-bootstrap"
	Infrastructure   Name = "infrastructure"
	CAPICore         Name = "capi"
)

// Names are the components New builds.
var Names = []Name{KairosBootstrap, KubeadmBootstrap, Infrastructure}

// Role is the component's part in the pipeline, as the request recorder
// attributes requests: both bootstrap providers are "bootstrap".
func (n Name) Role() string {
	switch n {
	case KairosBootstrap, KubeadmBootstrap:
		return requests.ComponentBootstrap
	case Infrastructure:
		return requests.ComponentInfra
	default:
		return string(n)
	}
}

// ControllerName is the name the production binary gives its manager (user
// agent, informer names).
func (n Name) ControllerName() string {
	switch n {
	case KairosBootstrap:
		return "kairos-bootstrap-manager"
	case KubeadmBootstrap:
		return "cluster-api-kubeadm-bootstrap-manager"
	case Infrastructure:
		return "cluster-api-kubevirt-workers-manager"
	default:
		return "cluster-api-controller-manager"
	}
}

// Limits are a component's client-side rate limits.
type Limits struct {
	// QPS and Burst limit the management cluster client
	// (--kube-api-qps, --kube-api-burst).
	QPS   float32 `json:"qps"`
	Burst int     `json:"burst"`
	// ClusterCacheQPS and ClusterCacheBurst limit each workload cluster
	// client (--clustercache-client-qps, --clustercache-client-burst);
	// unused by the infrastructure provider, which has no ClusterCache.
	ClusterCacheQPS   float32 `json:"clusterCacheQPS"`
	ClusterCacheBurst int     `json:"clusterCacheBurst"`
}

// DefaultLimits are the production binaries' flag defaults, the same for
// ours (bootstrap/setup and infrastructure/setup) and Cluster API v1.14's
// core and kubeadm bootstrap main.go: management 100/200, workload 20/30.
func DefaultLimits(n Name) Limits {
	switch n {
	case KairosBootstrap:
		return Limits{
			QPS: bootstrapsetup.DefaultKubeAPIQPS, Burst: bootstrapsetup.DefaultKubeAPIBurst,
			ClusterCacheQPS: bootstrapsetup.DefaultClusterCacheClientQPS, ClusterCacheBurst: bootstrapsetup.DefaultClusterCacheClientBurst,
		}
	case Infrastructure:
		return Limits{QPS: infrasetup.DefaultKubeAPIQPS, Burst: infrasetup.DefaultKubeAPIBurst, ClusterCacheQPS: 20, ClusterCacheBurst: 30}
	default:
		return Limits{QPS: 100, Burst: 200, ClusterCacheQPS: 20, ClusterCacheBurst: 30}
	}
}

// Options configure a component.
type Options struct {
	// Manager are the base manager options (scheme, logger, metrics and
	// probe addresses); New sets the cache and client options as the
	// production binary does. A nil Scheme gets Scheme().
	Manager ctrl.Options
	// ControllerName overrides Name.ControllerName (several harnesses in
	// one process need distinct informer names).
	ControllerName string
	// Limits are the client rate limits; DefaultLimits when zero.
	Limits Limits
	// SyncPeriod is the cache resync period; 10m (the flag default) when
	// zero.
	SyncPeriod time.Duration
	// WorkerClasses turns on the WorkerClass feature gate (infrastructure).
	WorkerClasses bool
	// BootstrapTokenTTL is the bootstrap providers' token lifetime; their
	// defaults when zero.
	BootstrapTokenTTL time.Duration
	// ImportFailureRestarts is the infrastructure provider's count of
	// importer restarts that fail an import; its default when zero.
	ImportFailureRestarts int32
	// Infrastructure is the infrastructure provider's infrastructure
	// cluster (--infrastructure-kubeconfig); the management cluster when
	// nil.
	Infrastructure *rest.Config
	// ManagementClusterIdentity is the infrastructure provider's
	// --management-cluster-identity; the management cluster's kube-system
	// UID when empty.
	ManagementClusterIdentity string
	// Placement is the infrastructure provider's placement policy (the
	// --tenant-* and --reserved-node-labels flags); the zero Policy allows
	// nothing and reserves nothing.
	Placement placement.Policy
}

// Component is one component's manager, not started.
type Component struct {
	Name    Name
	Manager ctrl.Manager
	// ClusterCache is Cluster API's kubeadm provider's workload cluster
	// cache; it runs workload caches outside the manager, so it is shut
	// down after the manager stops. Nil for the other components (the
	// Kairos provider's shuts down with its manager).
	ClusterCache clustercache.ClusterCache
}

// Scheme returns a scheme with every API the components read or write.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		infrasetup.AddToScheme, // client-go, Cluster API, infrastructure, WorkerClass, KubeVirt, CDI
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		bootstrapv1.AddToScheme,
		kubeadmv1beta1.AddToScheme,
		kubeadmv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// New builds the component's manager on cfg with the component's limits.
func New(ctx context.Context, cfg *rest.Config, name Name, opts Options) (*Component, error) {
	if opts.Manager.Scheme == nil {
		s, err := Scheme()
		if err != nil {
			return nil, err
		}
		opts.Manager.Scheme = s
	}
	if opts.ControllerName == "" {
		opts.ControllerName = name.ControllerName()
	}
	if opts.Limits == (Limits{}) {
		opts.Limits = DefaultLimits(name)
	}
	if opts.SyncPeriod == 0 {
		opts.SyncPeriod = 10 * time.Minute
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = opts.Limits.QPS, opts.Limits.Burst
	cfg.UserAgent = remote.DefaultClusterAPIUserAgent(opts.ControllerName)
	c := &Component{Name: name}
	var err error
	switch name {
	case KairosBootstrap:
		err = c.kairos(ctx, cfg, opts)
	case KubeadmBootstrap:
		err = c.kubeadm(ctx, cfg, opts)
	case Infrastructure:
		err = c.infrastructure(ctx, cfg, opts)
	default:
		err = fmt.Errorf("unknown component %q", name)
	}
	if err != nil {
		return nil, fmt.Errorf("setting up the %s component: %w", name, err)
	}
	return c, nil
}

// kairos wires the Kairos bootstrap provider through bootstrap/setup, as
// bootstrap/main.go does; the ClusterCache shuts down with the manager.
func (c *Component) kairos(ctx context.Context, cfg *rest.Config, opts Options) error {
	mopts := opts.Manager
	mopts.Cache = bootstrapsetup.ManagerCacheOptions(mopts.Scheme, opts.ControllerName, "", opts.SyncPeriod)
	mopts.Client = bootstrapsetup.ManagerClientOptions()
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return err
	}
	c.Manager = mgr
	return bootstrapsetup.Reconcilers(ctx, mgr, bootstrapsetup.Options{
		ControllerName:          opts.ControllerName,
		TokenTTL:                opts.BootstrapTokenTTL,
		ClusterCacheClientQPS:   opts.Limits.ClusterCacheQPS,
		ClusterCacheClientBurst: opts.Limits.ClusterCacheBurst,
	})
}

// kubeadm wires Cluster API's kubeadm bootstrap provider as its
// bootstrap/kubeadm/main.go does, without the CRD migrator (which only
// rewrites stored objects after an upgrade of its CRDs).
func (c *Component) kubeadm(ctx context.Context, cfg *rest.Config, opts Options) error {
	mopts := opts.Manager
	mopts.Cache = kubeadmsetup.ManagerCacheOptions(mopts.Scheme, opts.ControllerName, "", opts.SyncPeriod)
	mopts.Client = kubeadmsetup.ManagerClientOptions()
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return err
	}
	secretCachingClient, err := kubeadmsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return err
	}
	cache, err := clusterCache(ctx, mgr, opts)
	if err != nil {
		return err
	}
	c.Manager, c.ClusterCache = mgr, cache
	tokenTTL := opts.BootstrapTokenTTL
	if tokenTTL == 0 {
		tokenTTL = kubeadmconfig.DefaultTokenTTL
	}
	return (&kubeadmconfig.Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretCachingClient,
		APIReader:           mgr.GetAPIReader(),
		ClusterCache:        cache,
		TokenTTL:            tokenTTL,
	}).SetupWithManager(ctx, mgr, concurrency(100)) // --kubeadmconfig-concurrency
}

// infrastructure wires the KubeVirt provider as infrastructure/main.go
// does, with the WorkerClass controllers behind their gate.
func (c *Component) infrastructure(ctx context.Context, cfg *rest.Config, opts Options) error {
	mopts := opts.Manager
	var err error
	if mopts.Cache, err = infrasetup.ManagerCacheOptions(mopts.Scheme, opts.ControllerName, "", opts.SyncPeriod); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return err
	}
	c.Manager = mgr
	if err := infrasetup.Reconcilers(ctx, mgr, infrasetup.Options{
		ControllerName:            opts.ControllerName,
		WorkerClasses:             opts.WorkerClasses,
		ImportFailureRestarts:     opts.ImportFailureRestarts,
		Infrastructure:            opts.Infrastructure,
		ManagementClusterIdentity: opts.ManagementClusterIdentity,
		SyncPeriod:                opts.SyncPeriod,
		Placement:                 opts.Placement,
		// The flag defaults.
		MachineConcurrency:  infrasetup.DefaultMachineConcurrency,
		TemplateConcurrency: infrasetup.DefaultTemplateConcurrency,
		ClusterConcurrency:  infrasetup.DefaultClusterConcurrency,
	}); err != nil {
		return err
	}
	if opts.WorkerClasses {
		return workerclass.SetupWithManager(ctx, mgr, workerclass.Options{})
	}
	return nil
}

// clusterCache sets up a bootstrap provider's ClusterCache as its main.go
// does.
func clusterCache(ctx context.Context, mgr ctrl.Manager, opts Options) (clustercache.ClusterCache, error) {
	secretClient, err := kubeadmsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, err
	}
	return clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        kubeadmsetup.ClusterCacheCacheOptions(),
		Client:       kubeadmsetup.ClusterCacheClientOptions(opts.ControllerName, opts.Limits.ClusterCacheQPS, opts.Limits.ClusterCacheBurst),
	}, concurrency(100)) // --clustercache-concurrency
}

func concurrency(n int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: n}
}
