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

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmadmission "sigs.k8s.io/cluster-api/bootstrap/kubeadm/webhooks/admission"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	capisetup "sigs.k8s.io/cluster-api/core/setup"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	"sigs.k8s.io/cluster-api/util/index"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	sigsyaml "sigs.k8s.io/yaml"

	bootstrapsetup "github.com/cozystack/cluster-api-workers/bootstrap/setup"
	"github.com/cozystack/cluster-api-workers/exp/workerclass"
	infrasetup "github.com/cozystack/cluster-api-workers/infrastructure/setup"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	infra "github.com/cozystack/cluster-api-workers/test/infra"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
)

// Cluster API core's controller name, as it goes in user agents and
// informer names, and its resync period.
const (
	capiControllerName = "cluster-api-controller-manager"
	syncPeriod         = 10 * time.Minute
)

// instances counts the harnesses started in this process.
var instances atomic.Int32

// webhooks are the admission webhooks the management apiserver calls: Cluster
// API's and both providers', served by envtest's manager.
type webhooks struct {
	paths []string
	// dir holds the renamed webhook configurations; removed on Stop.
	dir   string
	setup func(ctrl.Manager) error
}

func webhookSetup(opts Options, caches *lazyClusterCache) (webhooks, error) {
	workerClasses := opts.WorkerClasses
	capiDir, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return webhooks{}, err
	}
	parts := map[string]string{
		"capi":           filepath.Join(capiDir, "core", "config", "webhook", "manifests.yaml"),
		"bootstrap":      filepath.Join(envtest.RepoRoot(), "config", "bootstrap", "webhook"),
		"infrastructure": filepath.Join(envtest.RepoRoot(), "config", "infrastructure", "webhook"),
	}
	if workerClasses {
		parts["workerclass"] = filepath.Join(envtest.RepoRoot(), envtest.WorkerClassWebhookPath)
	}
	kubeadm := opts.Bootstrap == BootstrapKubeadm
	if kubeadm {
		parts["kubeadm"] = filepath.Join(capiDir, "bootstrap", "kubeadm", "config", "webhook", "manifests.yaml")
	}
	dir, err := prefixWebhookConfigurations(parts)
	if err != nil {
		return webhooks{}, err
	}
	paths := []string{dir}
	return webhooks{paths: paths, dir: dir, setup: func(mgr ctrl.Manager) error {
		// Every webhook Cluster API's manifests declare must be served, or
		// the apiserver fails closed on those kinds.
		for name, setup := range map[string]func(ctrl.Manager) error{
			"ClusterClass":              (&coreadmission.ClusterClass{Client: mgr.GetClient()}).SetupWebhookWithManager,
			"Cluster":                   (&coreadmission.Cluster{Client: mgr.GetClient(), ClusterCacheReader: caches}).SetupWebhookWithManager,
			"Machine":                   (&coreadmission.Machine{}).SetupWebhookWithManager,
			"MachineSet":                (&coreadmission.MachineSet{}).SetupWebhookWithManager,
			"MachineDeployment":         (&coreadmission.MachineDeployment{}).SetupWebhookWithManager,
			"MachineDrainRule":          (&coreadmission.MachineDrainRule{}).SetupWebhookWithManager,
			"MachinePool":               (&coreadmission.MachinePool{}).SetupWebhookWithManager,
			"ClusterResourceSet":        (&coreadmission.ClusterResourceSet{}).SetupWebhookWithManager,
			"ClusterResourceSetBinding": (&coreadmission.ClusterResourceSetBinding{}).SetupWebhookWithManager,
			"MachineHealthCheck":        (&coreadmission.MachineHealthCheck{}).SetupWebhookWithManager,
			"ExtensionConfig":           (&coreadmission.ExtensionConfig{}).SetupWebhookWithManager,
			"IPAddress":                 (&coreadmission.IPAddress{Client: mgr.GetAPIReader()}).SetupWebhookWithManager,
			"IPAddressClaim":            (&coreadmission.IPAddressClaim{}).SetupWebhookWithManager,
			"Kairos bootstrap":          bootstrapsetup.Webhooks,
			"KubeVirt infrastructure": func(mgr ctrl.Manager) error {
				return infrasetup.Webhooks(mgr, webhookInfrastructure(opts, mgr), opts.placementPolicy())
			},
		} {
			if err := setup(mgr); err != nil {
				return fmt.Errorf("serving the %s webhooks: %w", name, err)
			}
		}
		if opts.Topology {
			// As Cluster API's main.go indexes the manager that serves its
			// webhooks: the ClusterClass webhook finds a class's Clusters so.
			if err := index.ByClusterClassRef(context.Background(), mgr); err != nil {
				return fmt.Errorf("indexing Clusters by ClusterClass: %w", err)
			}
		}
		if kubeadm {
			// As Cluster API's bootstrap/kubeadm/main.go serves them.
			if err := (&kubeadmadmission.KubeadmConfig{}).SetupWebhookWithManager(mgr); err != nil {
				return fmt.Errorf("serving the KubeadmConfig webhook: %w", err)
			}
			if err := (&kubeadmadmission.KubeadmConfigTemplate{}).SetupWebhookWithManager(mgr); err != nil {
				return fmt.Errorf("serving the KubeadmConfigTemplate webhook: %w", err)
			}
		}
		if workerClasses {
			return workerclass.SetupWebhooksWithManager(mgr, workerclass.DefaultWebhookOptions())
		}
		return nil
	}}, nil
}

// managerOptions are the settings every manager shares: no metrics or
// probes (several run in one process), and controller names that may repeat
// across managers, as they do across pods.
func (h *Harness) managerOptions(name string) ctrl.Options {
	return ctrl.Options{
		Scheme:                 h.Scheme,
		Logger:                 h.log.WithName(name),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// setupManagers builds one manager per component: Cluster API core, the
// bootstrap provider (Kairos, or Cluster API's kubeadm for the peer), the
// KubeVirt infrastructure provider, and the simulators. With
// Options.Processes the bootstrap and infrastructure providers run as
// processes instead and are not among the managers returned.
func (h *Harness) setupManagers(ctx context.Context, caches *lazyClusterCache) (map[string]ctrl.Manager, error) {
	cfg := h.Config()
	managers := map[string]ctrl.Manager{}
	// Cluster API registers informer names process-wide, so a second
	// harness in one process (tests) needs its own controller names.
	instance := instances.Add(1)
	named := func(name string) string {
		if instance == 1 {
			return name
		}
		return fmt.Sprintf("%s-%d", name, instance)
	}
	capiControllerName := named(capiControllerName)

	// Cluster API core, wired as its main.go does, with its limits.
	capiLimits := h.limits(components.CAPICore)
	capiCfg := rest.CopyConfig(cfg)
	capiCfg.QPS, capiCfg.Burst = capiLimits.QPS, capiLimits.Burst
	capiOpts := h.managerOptions("capi")
	capiOpts.Cache = capisetup.ManagerCacheOptions(h.Scheme, capiControllerName, "", syncPeriod)
	capiOpts.Client = capisetup.ManagerClientOptions()
	capiMgr, err := ctrl.NewManager(capiCfg, capiOpts)
	if err != nil {
		return nil, err
	}
	if h.opts.Topology {
		// Before the indexes: Cluster API indexes Clusters by ClusterClass,
		// which topology maps a changed class to its Clusters by, only
		// with the gate on.
		if err := enableTopology(); err != nil {
			return nil, err
		}
	}
	if err := index.AddDefaultIndexes(ctx, capiMgr); err != nil {
		return nil, err
	}
	capiCache, err := newClusterCache(ctx, capiMgr, capiControllerName, capiLimits)
	if err != nil {
		return nil, err
	}
	caches.set(capiCache)
	h.clusterCaches = append(h.clusterCaches, capiCache)
	conditionsGrace := h.opts.RemoteConditionsGracePeriod
	if conditionsGrace == 0 {
		conditionsGrace = 5 * time.Minute
	}
	for name, setup := range map[string]func() error{
		"Cluster": func() error {
			return (&cluster.Reconciler{
				Client: capiMgr.GetClient(), APIReader: capiMgr.GetAPIReader(), ClusterCache: capiCache,
				RemoteConnectionGracePeriod: 50 * time.Second,
			}).SetupWithManager(ctx, capiMgr, concurrency(4))
		},
		"Machine": func() error {
			return (&machine.Reconciler{
				Client: capiMgr.GetClient(), APIReader: capiMgr.GetAPIReader(), ClusterCache: capiCache,
				RemoteConditionsGracePeriod: conditionsGrace,
			}).SetupWithManager(ctx, capiMgr, concurrency(10))
		},
		"MachineSet": func() error {
			return (&machineset.Reconciler{
				Client: capiMgr.GetClient(), APIReader: capiMgr.GetAPIReader(), ClusterCache: capiCache,
				PreflightChecks: sets.New(clusterv1.MachineSetPreflightCheckAll),
			}).SetupWithManager(ctx, capiMgr, concurrency(10))
		},
		"MachineDeployment": func() error {
			return (&machinedeployment.Reconciler{
				Client: capiMgr.GetClient(), APIReader: capiMgr.GetAPIReader(),
			}).SetupWithManager(ctx, capiMgr, concurrency(10))
		},
		"MachineHealthCheck": func() error {
			return (&machinehealthcheck.Reconciler{
				Client: capiMgr.GetClient(), ClusterCache: capiCache,
			}).SetupWithManager(ctx, capiMgr, concurrency(10))
		},
	} {
		if err := setup(); err != nil {
			return nil, fmt.Errorf("setting up the Cluster API %s controller: %w", name, err)
		}
	}
	if h.opts.Topology {
		if err := setupTopology(ctx, capiMgr, capiCache); err != nil {
			return nil, err
		}
	}
	managers["capi"] = capiMgr

	// Our providers (or the kubeadm peer) as their main.go files wire them,
	// in-process or each in its own process.
	for _, name := range h.componentNames() {
		controllerName := named(name.ControllerName())
		providerCfg, err := h.providerConfig(ctx, cfg, name, int64(instance))
		if err != nil {
			return nil, err
		}
		infraCfg, err := h.infrastructureConfig(ctx, name, providerCfg, int64(instance))
		if err != nil {
			return nil, err
		}
		if h.opts.Processes {
			if err := h.startProcess(ctx, name, controllerName, providerCfg, infraCfg); err != nil {
				return nil, err
			}
			continue
		}
		c, err := components.New(ctx, providerCfg, name, components.Options{
			Manager:                   h.managerOptions(name.Role()),
			ControllerName:            controllerName,
			Limits:                    h.limits(name),
			WorkerClasses:             h.opts.WorkerClasses,
			BootstrapTokenTTL:         h.opts.BootstrapTokenTTL,
			ImportFailureRestarts:     h.opts.ImportFailureRestarts,
			Infrastructure:            infraCfg,
			ManagementClusterIdentity: h.opts.ManagementClusterIdentity,
			Placement:                 h.opts.placementPolicy(),
		})
		if err != nil {
			return nil, err
		}
		if c.ClusterCache != nil {
			h.clusterCaches = append(h.clusterCaches, c.ClusterCache)
		}
		managers[name.Role()] = c.Manager
	}

	if h.opts.InfrastructureOf != nil {
		// A management cluster only: the VMs run in the other harness's
		// infrastructure cluster, with its KubeVirt and simulators.
		return managers, nil
	}

	// The infrastructure cluster: KubeVirt's real control plane, and the
	// node-side and CDI stand-ins in their own manager; then the guests,
	// the node simulator's or the backend's.
	simMgr, err := ctrl.NewManager(cfg, h.managerOptions("simulators"))
	if err != nil {
		return nil, err
	}
	infraOpts := h.opts.Infra
	if h.opts.VMs != nil {
		h.opts.VMs.Configure(&infraOpts)
	}
	if infraOpts.Hosts.ControllerNamePrefix == "" && instance > 1 {
		infraOpts.Hosts.ControllerNamePrefix = fmt.Sprintf("h%d-", instance)
		infraOpts.CDI.ControllerNamePrefix = fmt.Sprintf("h%d-", instance)
	}
	if h.infra, err = infra.Start(ctx, h.Management, simMgr, infraOpts); err != nil {
		return nil, err
	}
	h.KubeVirt, h.Hosts, h.CDI, h.RealCDI = h.infra.KubeVirt, h.infra.Hosts, h.infra.CDI, h.infra.RealCDI
	managers["simulators"] = simMgr
	if h.opts.VMs != nil || infraOpts.RealNodes {
		// Real guests: the backend's, or KubeVirt's on real nodes.
		return managers, nil
	}
	nodeOpts := h.opts.Nodes
	nodeOpts.Images = map[string]nodesim.Image{}
	for k, v := range h.opts.Nodes.Images {
		nodeOpts.Images[k] = v
	}
	for k, v := range h.opts.Images {
		nodeOpts.Images[k] = v
	}
	if nodeOpts.KubeadmBinary == "" {
		if nodeOpts.KubeadmBinary, err = envtest.KubeadmBinary(); err != nil {
			return nil, err
		}
	}
	h.Nodes = nodesim.New(nodeOpts)
	if err := h.Nodes.SetupWithManager(ctx, simMgr); err != nil {
		return nil, err
	}
	return managers, nil
}

// infrastructureConfig is the infrastructure provider's config for its
// infrastructure cluster in the remote mode, nil otherwise (and for other
// components): with RemoteInfrastructure a copy of its own restricted
// config, the harness's apiserver being the infrastructure cluster; with
// InfrastructureOf a user of that harness's apiserver bound to the role the
// provider ships for a remote infrastructure cluster.
func (h *Harness) infrastructureConfig(ctx context.Context, name components.Name, providerCfg *rest.Config, instance int64) (*rest.Config, error) {
	switch {
	case name != components.Infrastructure:
		return nil, nil
	case h.opts.InfrastructureOf != nil:
		return h.opts.InfrastructureOf.infrastructureClusterConfig(ctx, instance)
	case h.opts.RemoteInfrastructure:
		return rest.CopyConfig(providerCfg), nil
	}
	return nil, nil
}

// webhookInfrastructure is the infrastructure cluster the infrastructure
// provider's webhooks read, nil for the management cluster. The harness
// serves every webhook as the envtest manager's admin (mgr), so the
// remote cluster's admin it is.
func webhookInfrastructure(opts Options, mgr ctrl.Manager) *rest.Config {
	switch {
	case opts.InfrastructureOf != nil:
		return opts.InfrastructureOf.Config()
	case opts.RemoteInfrastructure:
		return rest.CopyConfig(mgr.GetConfig())
	}
	return nil
}

func newClusterCache(ctx context.Context, mgr ctrl.Manager, controllerName string, limits components.Limits) (clustercache.ClusterCache, error) {
	secretClient, err := capisetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, err
	}
	return clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        capisetup.ClusterCacheCacheOptions(),
		Client:       capisetup.ClusterCacheClientOptions(controllerName, limits.ClusterCacheQPS, limits.ClusterCacheBurst),
	}, concurrency(10))
}

func concurrency(n int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: n}
}

// prefixWebhookConfigurations copies the webhook configurations of each part
// into one directory, each configuration's name prefixed with its part's,
// as each provider's kustomization does. controller-gen names every part's
// configurations alike, and envtest installs same-named configurations over
// one another, which would silently drop all but one part's webhooks.
func prefixWebhookConfigurations(parts map[string]string) (string, error) {
	dir, err := os.MkdirTemp("", "harness-webhooks-")
	if err != nil {
		return "", err
	}
	for part, path := range parts {
		files := []string{path}
		if info, err := os.Stat(path); err != nil {
			return "", err
		} else if info.IsDir() {
			if files, err = filepath.Glob(filepath.Join(path, "*.yaml")); err != nil {
				return "", err
			}
		}
		for _, f := range files {
			raw, err := os.ReadFile(f) //nolint:gosec // A file of the repository or one the harness wrote.
			if err != nil {
				return "", err
			}
			objs, err := utilyaml.ToUnstructured(raw)
			if err != nil {
				return "", fmt.Errorf("reading %s: %w", f, err)
			}
			var docs [][]byte
			for _, o := range objs {
				switch o.GetKind() {
				case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
				default:
					continue
				}
				o.SetName(part + "-" + o.GetName())
				doc, err := sigsyaml.Marshal(o.Object)
				if err != nil {
					return "", err
				}
				docs = append(docs, doc)
			}
			if len(docs) == 0 {
				continue
			}
			out := filepath.Join(dir, part+"-"+filepath.Base(f))
			if err := os.WriteFile(out, utilyaml.JoinYaml(docs...), 0o600); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// ManagementClusterIdentity is the identity the harness's infrastructure
// provider gives the objects it makes in a remote infrastructure cluster:
// Options.ManagementClusterIdentity, or the management apiserver's
// kube-system UID, as the provider derives it.
func (h *Harness) ManagementClusterIdentity(ctx context.Context) (string, error) {
	if h.opts.ManagementClusterIdentity != "" {
		return h.opts.ManagementClusterIdentity, nil
	}
	return infrasetup.DefaultManagementClusterIdentity(ctx, h.Client)
}
