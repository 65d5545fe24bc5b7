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

// Package harness runs the Kairos bootstrap provider and the KubeVirt
// infrastructure provider inside upstream Cluster API, in one process, on
// real apiservers:
//
//   - a management kube-apiserver (envtest) with the Cluster API, KubeVirt,
//     CDI and project CRDs, the admission webhooks of Cluster API and of both
//     providers served in-process, and kube-controller-manager's garbage
//     collector;
//   - per workload cluster, a kube-apiserver with bootstrap-token
//     authentication, the objects `kubeadm init` leaves, and
//     kube-controller-manager's bootstrap signer and token cleaner, fronted
//     in the management cluster by a hosted control plane stand-in;
//   - the upstream Cluster, MachineDeployment, MachineSet, Machine and
//     MachineHealthCheck reconcilers, each component in its own manager as it
//     would run in its own pod;
//   - KubeVirt's real control plane (virt-api as admission webhooks,
//     virt-controller) with the node-side and CDI stand-ins (test/infra),
//     and the node simulator that boots the guests and joins them.
//
// The sandbox (cmd/sandbox) and the integration suites (test/scenarios)
// use it.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	addonsv1beta1 "sigs.k8s.io/cluster-api/api/addons/v1beta1" //nolint:staticcheck // Cluster API's webhooks convert from this version.
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	kubeadmv1beta1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta1" //nolint:staticcheck // Cluster API's kubeadm webhooks convert from this version.
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1" //nolint:staticcheck // Cluster API's webhooks convert from this version.
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1alpha1 "sigs.k8s.io/cluster-api/api/ipam/v1alpha1" //nolint:staticcheck // Cluster API's webhooks convert from this version.
	ipamv1beta1 "sigs.k8s.io/cluster-api/api/ipam/v1beta1"   //nolint:staticcheck // Cluster API's webhooks convert from this version.
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	runtimev1alpha1 "sigs.k8s.io/cluster-api/api/runtime/v1alpha1" //nolint:staticcheck // Cluster API's webhooks convert from this version.
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	infrasetup "github.com/cozystack/cluster-api-workers/infrastructure/setup"
	"github.com/cozystack/cluster-api-workers/test/cdi"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	infra "github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

// ControlPlaneKubernetesVersion is the version the workload apiservers run
// (they are built from k8s.io/kubernetes at this version).
const ControlPlaneKubernetesVersion = "v1.36.3"

// placementPolicy is opts' placement policy: Placement, or the manager's
// flag defaults.
func (opts Options) placementPolicy() placement.Policy {
	if opts.Placement != nil {
		return *opts.Placement
	}
	return placement.DefaultPolicy()
}

// Options configure a harness. The zero value runs everything with
// timings suited to tests.
type Options struct {
	// Logger receives the logs of every component; discarded when unset.
	Logger logr.Logger
	// Infra configures the infrastructure cluster: KubeVirt's control plane
	// (the KubeVirt CR's configuration), the node side (nodes, timings)
	// and CDI (timings).
	Infra infra.Options
	// Nodes are the node simulator's options; Images are merged with
	// Images below.
	Nodes nodesim.Options
	// Images maps root disk sources to what they boot (see
	// nodesim.Options.Images).
	Images map[string]nodesim.Image
	// WorkerClasses turns the WorkerClass feature on: templates naming a
	// class are resolved, the class controller runs, and the WorkerClass,
	// WorkerPlatform and pool (KubernetesNodes) webhooks are served.
	WorkerClasses bool
	// BootstrapTokenTTL is the Kairos bootstrap provider's token lifetime;
	// its default when zero.
	BootstrapTokenTTL time.Duration
	// ImportFailureRestarts is the infrastructure provider's count of
	// importer restarts that fail an import; its default when zero.
	ImportFailureRestarts int32
	// Placement is the infrastructure provider's placement policy (its
	// webhooks' and its machine controller's); the manager's flag
	// defaults, placement.DefaultPolicy, when nil.
	Placement *placement.Policy
	// RemoteConditionsGracePeriod is Cluster API's grace period before the
	// Machine reports node conditions Unknown when the workload cluster is
	// unreachable; at least 2m (Cluster API refuses less), 5m when zero.
	RemoteConditionsGracePeriod time.Duration
	// VMs, when set, runs the guests in place of the node simulator (for
	// example real guests under QEMU); the harness's Nodes is then nil.
	// KubeVirt's control plane and the node-side and CDI stand-ins run
	// either way.
	VMs VMBackend
	// Bootstrap selects the bootstrap provider: Kairos (the default) or
	// Cluster API's own kubeadm provider (with its CRDs and webhooks), the
	// peer the scale benchmark compares with.
	Bootstrap Bootstrap
	// Processes runs the bootstrap and infrastructure providers each as its
	// own OS process (test/harness/cmd/component, built on Start) instead
	// of in this process, so their CPU and memory can be measured alone
	// and they can be killed and restarted (ComponentProcess.Kill,
	// Restart). They run as the same users bound to their ClusterRoles as
	// in-process providers do; their webhooks are still served in this
	// process.
	Processes bool
	// ProcessLogDir, when set, keeps the provider processes' logs there
	// (<component>.log); they are removed with the harness otherwise.
	ProcessLogDir string
	// ProcessVerbosity is the provider processes' --v (klog's verbosity,
	// which controller-runtime's logger and client-go's request logging
	// both follow); at most logcap.MaxVerbosity, the production cap. The
	// binaries' default (0) when zero.
	ProcessVerbosity int
	// Limits overrides the client rate limits of a component (Cluster API
	// core included, as components.CAPICore); every component not listed
	// runs with its production binary's flag defaults
	// (components.DefaultLimits).
	Limits map[components.Name]components.Limits
	// AuditLog, when set, is the file the management apiserver writes the
	// audit log of our providers' requests to (audit.go), for RoleUsage.
	AuditLog string
	// Topology runs Cluster API's ClusterClass and topology reconcilers
	// with the ClusterTopology feature gate on (topology.go), for Clusters
	// made with CreateTopologyCluster.
	Topology bool
	// RemoteInfrastructure runs the infrastructure provider (and its
	// webhooks) in its remote infrastructure cluster mode, with the
	// harness's own apiserver as the infrastructure cluster reached through
	// a config of its own: the VM side carries the provider's labels
	// instead of owner references, so `clusterctl move` leaves it in place
	// (ClusterctlMove).
	RemoteInfrastructure bool
	// InfrastructureOf, when set, starts a management cluster only, the
	// target of a ClusterctlMove from that harness: the same CRDs, webhooks,
	// garbage collector, Cluster API and both providers, whose
	// infrastructure provider keeps the VM side in that harness's
	// apiserver, where KubeVirt and the node simulator run. Infra, Nodes,
	// Images and VMs are unused then, and KubeVirt, Hosts, CDI and Nodes
	// are nil.
	InfrastructureOf *Harness
	// ManagementClusterIdentity is the infrastructure provider's
	// --management-cluster-identity with RemoteInfrastructure or
	// InfrastructureOf: the identity its objects in the infrastructure
	// cluster carry. Empty: the management apiserver's kube-system UID, as
	// in production, so that two harnesses sharing an infrastructure
	// cluster have identities of their own; a ClusterctlMove's target sets
	// the source's (ManagementClusterIdentity) to take its VMs over.
	ManagementClusterIdentity string
}

// Bootstrap is a bootstrap provider the harness can run.
type Bootstrap string

// The bootstrap providers.
const (
	BootstrapKairos  Bootstrap = "Kairos"
	BootstrapKubeadm Bootstrap = "Kubeadm"
)

// VMBackend runs real guests: it configures the infrastructure cluster's
// hypervisor, image pulls and CDI importer (Options.Infra's Hosts and CDI).
type VMBackend interface {
	Configure(opts *infra.Options)
}

// Harness is a running management cluster with Cluster API, both providers
// and the simulators.
type Harness struct {
	// Management is the management apiserver.
	Management *envtest.Environment
	// Client writes with strict field validation, so a test object with a
	// field the schema does not know fails instead of losing it.
	Client client.Client
	// Scheme knows every API the harness serves.
	Scheme *runtime.Scheme
	// KubeVirt is KubeVirt's control plane: virt-api and virt-controller.
	KubeVirt *kubevirt.ControlPlane
	// Hosts are the infrastructure nodes: scheduler, kubelets and
	// virt-handler; nil with Options.Infra.RealNodes.
	Hosts *kubevirtsim.Hosts
	// CDI is the CDI stand-in (with Options.Infra.RealCDI, its storage
	// provisioner alone).
	CDI *cdisim.CDI
	// RealCDI is CDI's real controller; nil unless Options.Infra.RealCDI.
	RealCDI *cdi.Controller
	// Nodes is the node simulator; nil with Options.VMs or
	// Options.Infra.RealNodes.
	Nodes *nodesim.Simulator

	opts      Options
	log       logr.Logger
	gc        *envtest.ControllerManager
	cancel    context.CancelFunc
	managers  sync.WaitGroup
	mu        sync.Mutex
	workloads map[client.ObjectKey]*WorkloadCluster
	errs      chan error
	// clusterCaches are Cluster API's and the bootstrap provider's.
	clusterCaches []clustercache.ClusterCache
	// infra is the infrastructure cluster's control plane and stand-ins.
	infra *infra.Infra
	// processes are the components run as processes, and workDir holds
	// their binary, kubeconfig and logs.
	processes  []*ComponentProcess
	workDir    string
	webhookDir string
	// releases are clusters being deleted in the background.
	releases      sync.WaitGroup
	releaseCtx    context.Context //nolint:containedctx // Ends the background releases when the harness stops; they outlive any caller's context.
	cancelRelease context.CancelFunc
	// verdicts and infrastructureFailures keep, for Describe, why a
	// Machine was remediated: a replaced Machine is gone by the time a
	// test fails.
	verdicts, infrastructureFailures *ConditionHistory
	stopHistories                    []func()
}

// Scheme returns a scheme with every API the harness serves.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		infrasetup.AddToScheme, // client-go, Cluster API, infrastructure, WorkerClass, KubeVirt, CDI
		infra.AddToScheme,      // what the node-side and CDI stand-ins read
		apiextensionsv1.AddToScheme,
		bootstrapv1.AddToScheme,
		// The older Cluster API versions its webhooks convert from.
		clusterv1beta1.AddToScheme,
		addonsv1beta1.AddToScheme, addonsv1.AddToScheme,
		runtimev1alpha1.AddToScheme, runtimev1.AddToScheme,
		ipamv1alpha1.AddToScheme, ipamv1beta1.AddToScheme, ipamv1.AddToScheme,
		// Cluster API's kubeadm bootstrap provider, the benchmark's peer.
		kubeadmv1beta1.AddToScheme, kubeadmv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// KubeadmCRDPath returns a directory with the CRDs of Cluster API's kubeadm
// bootstrap provider from the module cache, labelled with the contract
// versions as the provider's kustomization labels them (Cluster API reads
// the contract from those labels). The directory is in the project's cache
// (envtest.CacheDir, which follows KUBEVIRT_WORKERS_CACHE) and rewritten on
// every call.
func KubeadmCRDPath() (string, error) {
	dir, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return "", err
	}
	cache, err := envtest.CacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, "capi-kubeadm-crds-"+filepath.Base(dir))
	if err := os.MkdirAll(out, 0o750); err != nil {
		return "", err
	}
	files, err := filepath.Glob(filepath.Join(dir, "bootstrap", "kubeadm", "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		raw, err := os.ReadFile(f) //nolint:gosec // A file of the repository or one the harness wrote.
		if err != nil {
			return "", err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := sigsyaml.Unmarshal(raw, crd); err != nil {
			return "", fmt.Errorf("reading %s: %w", f, err)
		}
		labels := crd.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["cluster.x-k8s.io/v1beta1"] = "v1beta1"
		labels["cluster.x-k8s.io/v1beta2"] = "v1beta2"
		crd.SetLabels(labels)
		labelled, err := sigsyaml.Marshal(crd)
		if err != nil {
			return "", err
		}
		tmp := filepath.Join(out, "."+filepath.Base(f))
		if err := os.WriteFile(tmp, labelled, 0o600); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, filepath.Join(out, filepath.Base(f))); err != nil {
			return "", err
		}
	}
	return out, nil
}

// CRDPath holds the harness's hosted control plane CRD.
func CRDPath() string {
	return filepath.Join(envtest.RepoRoot(), "test", "harness", "crds")
}

// Start starts the management apiserver, its webhooks and controllers, and
// the simulators. Stop releases everything.
func Start(ctx context.Context, opts Options) (_ *Harness, rerr error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	ctrl.SetLogger(log)
	h := &Harness{Scheme: scheme, opts: opts, log: log, workloads: map[client.ObjectKey]*WorkloadCluster{}, errs: make(chan error, 16)}
	h.releaseCtx, h.cancelRelease = context.WithCancel(context.Background())
	defer func() {
		if rerr != nil {
			rerr = errors.Join(rerr, h.Stop())
		}
	}()

	caches := &lazyClusterCache{}
	switch opts.Bootstrap {
	case "":
		opts.Bootstrap = BootstrapKairos
		h.opts.Bootstrap = BootstrapKairos
	case BootstrapKairos, BootstrapKubeadm:
	default:
		return nil, fmt.Errorf("unknown bootstrap provider %q", opts.Bootstrap)
	}
	webhooks, err := webhookSetup(opts, caches)
	if err != nil {
		return nil, err
	}
	h.webhookDir = webhooks.dir
	inventoryCRD, err := ClusterctlProviderCRDPath()
	if err != nil {
		return nil, err
	}
	crdPaths := append(envtest.ExternalCRDPaths(), CRDPath(), inventoryCRD)
	if opts.WorkerClasses {
		crdPaths = append(crdPaths, envtest.PoolCRDPath)
	}
	if opts.Bootstrap == BootstrapKubeadm {
		kubeadmCRDs, err := KubeadmCRDPath()
		if err != nil {
			return nil, err
		}
		crdPaths = append(crdPaths, kubeadmCRDs)
	}
	apiserverArgs, err := auditArgs(opts.AuditLog)
	if err != nil {
		return nil, err
	}
	if opts.Infra.RealNodes {
		// envtest turns the ServiceAccount admission plugin off; a real
		// node's Pods (virt-handler's in-cluster client) need their tokens.
		if apiserverArgs == nil {
			apiserverArgs = map[string]string{}
		}
		apiserverArgs["disable-admission-plugins"] = ""
	}
	if h.Management, err = envtest.Start(ctx, envtest.Options{
		Scheme:        scheme,
		CRDPaths:      crdPaths,
		WebhookPaths:  webhooks.paths,
		SetupWebhooks: webhooks.setup,
		APIServerArgs: apiserverArgs,
	}); err != nil {
		return nil, err
	}
	h.Client = client.WithFieldValidation(h.Management.Client, "Strict")
	if err := h.recordMachineHistory(); err != nil {
		return nil, err
	}
	if err := h.registerWithClusterctl(ctx); err != nil {
		return nil, err
	}
	if h.gc, err = h.Management.StartControllerManager(envtest.ManagementControllers...); err != nil {
		return nil, err
	}

	mctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	managers, err := h.setupManagers(mctx, caches)
	if err != nil {
		return nil, err
	}
	for name, mgr := range managers {
		h.managers.Add(1)
		go func() {
			defer h.managers.Done()
			if err := mgr.Start(mctx); err != nil {
				select {
				case h.errs <- fmt.Errorf("the %s manager stopped: %w", name, err):
				default:
				}
			}
		}()
	}
	for name, mgr := range managers {
		if !mgr.GetCache().WaitForCacheSync(mctx) {
			return nil, fmt.Errorf("the %s manager's cache did not sync", name)
		}
	}
	return h, nil
}

// recordMachineHistory watches every Machine's health check verdict and
// infrastructure failure from the start, so Describe can say why a Machine
// was replaced after it is gone.
func (h *Harness) recordMachineHistory() error {
	watcher, err := client.NewWithWatch(h.Management.Config, client.Options{Scheme: h.Scheme})
	if err != nil {
		return err
	}
	var stop func()
	h.verdicts, stop = watchConditions(watcher, &clusterv1.MachineList{}, clusterv1.MachineHealthCheckSucceededCondition)
	h.stopHistories = append(h.stopHistories, stop)
	h.infrastructureFailures, stop = watchConditions(watcher, &clusterv1.MachineList{}, clusterv1.MachineInfrastructureReadyCondition)
	h.stopHistories = append(h.stopHistories, stop)
	return nil
}

// infrastructure is the harness that runs the infrastructure cluster
// (KubeVirt, CDI, the node simulator) this harness's VMs run in.
func (h *Harness) infrastructure() *Harness {
	if h.opts.InfrastructureOf != nil {
		return h.opts.InfrastructureOf
	}
	return h
}

// Config returns an admin rest.Config of the management apiserver.
func (h *Harness) Config() *rest.Config { return rest.CopyConfig(h.Management.Config) }

// Err returns the first error of a manager that stopped, or nil.
func (h *Harness) Err() error {
	select {
	case err := <-h.errs:
		return err
	default:
		return nil
	}
}

// Stop stops the controllers, the workload apiservers and the management
// apiserver, in that order.
func (h *Harness) Stop() error {
	var errs []error
	// Releases in flight need the controllers to finish deleting.
	h.cancelRelease()
	h.releases.Wait()
	if h.cancel != nil {
		h.cancel()
		h.managers.Wait()
	}
	if err := h.stopProcesses(); err != nil {
		errs = append(errs, err)
	}
	if err := h.infra.Stop(); err != nil {
		errs = append(errs, err)
	}
	// ClusterCaches run their workload caches outside the managers; their
	// watches would keep the workload apiservers from shutting down.
	for _, c := range h.clusterCaches {
		if s, ok := c.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	}
	h.mu.Lock()
	for _, w := range h.workloads {
		if err := w.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	h.workloads = map[client.ObjectKey]*WorkloadCluster{}
	h.mu.Unlock()
	if h.gc != nil {
		h.gc.Stop()
	}
	for _, stop := range h.stopHistories {
		stop()
	}
	if h.Management != nil {
		if err := h.Management.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.webhookDir != "" {
		_ = os.RemoveAll(h.webhookDir)
	}
	if h.workDir != "" {
		_ = os.RemoveAll(h.workDir)
	}
	return kerrors.NewAggregate(errs)
}

// lazyClusterCache lets Cluster API's Cluster webhook, which is served
// before the Cluster API manager exists, read through its ClusterCache.
type lazyClusterCache struct {
	mu     sync.RWMutex
	reader interface {
		GetReader(ctx context.Context, cluster client.ObjectKey) (client.Reader, error)
	}
}

func (l *lazyClusterCache) GetReader(ctx context.Context, cluster client.ObjectKey) (client.Reader, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.reader == nil {
		return nil, errors.New("the Cluster API ClusterCache is not running yet")
	}
	return l.reader.GetReader(ctx, cluster)
}

func (l *lazyClusterCache) set(r interface {
	GetReader(ctx context.Context, cluster client.ObjectKey) (client.Reader, error)
}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reader = r
}

// clusterLabel selects the objects of one Cluster.
func clusterLabel(name string) client.MatchingLabels {
	return client.MatchingLabels{clusterv1.ClusterNameLabel: name}
}
