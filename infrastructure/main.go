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

// Command infrastructure is the manager of the KubeVirt infrastructure
// provider (Cluster API provider infrastructure-kubevirt-workers).
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/apiwarnings"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cozystack/cluster-api-workers/exp/workerclass"
	"github.com/cozystack/cluster-api-workers/feature"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/kubevirtmachine"
	"github.com/cozystack/cluster-api-workers/infrastructure/setup"
	"github.com/cozystack/cluster-api-workers/internal/manager"
	"github.com/cozystack/cluster-api-workers/internal/redact"
)

const controllerName = "cluster-api-kubevirt-workers-manager"

// options are the manager's command-line flags.
type options struct {
	manager.Flags
	watchNamespace            string
	watchFilterValue          string
	syncPeriod                time.Duration
	infrastructureKubeconfig  string
	managementClusterIdentity string
	importFailureRestarts     int32
	machineConcurrency        int
	templateConcurrency       int
	clusterConcurrency        int
	workerClassWebhooks       workerclass.WebhookOptions
	placement                 placement.Policy
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	logsv1.AddFlags(o.Logs, fs)
	fs.BoolVar(&o.LeaderElect, "leader-elect", false,
		"Enable leader election, so that only one replica of the manager is active.")
	fs.DurationVar(&o.LeaderElectionLeaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long non-leaders wait before they force-acquire leadership.")
	fs.DurationVar(&o.LeaderElectionRenewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader retries refreshing leadership before giving up.")
	fs.DurationVar(&o.LeaderElectionRetryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How long leader election clients wait between tries.")
	fs.StringVar(&o.watchNamespace, "namespace", "",
		"Namespace whose objects the manager reconciles; all namespaces when empty.")
	fs.StringVar(&o.watchFilterValue, "watch-filter", "",
		fmt.Sprintf("Reconcile only objects whose %s label has this value; all objects when empty.", clusterv1.WatchLabel))
	fs.StringVar(&o.ProfilerAddress, "profiler-address", "",
		"Bind address of the pprof profiler (e.g. localhost:6060); off when empty.")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute,
		"Minimum interval at which every watched object is reconciled again.")
	fs.Float32Var(&o.RESTConfigQPS, "kube-api-qps", setup.DefaultKubeAPIQPS,
		"Queries per second to the Kubernetes API server.")
	fs.IntVar(&o.RESTConfigBurst, "kube-api-burst", setup.DefaultKubeAPIBurst,
		"Burst of queries to the Kubernetes API server.")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory of the webhook server's certificate.")
	fs.StringVar(&o.WebhookCertName, "webhook-cert-name", "tls.crt", "File name of the webhook server's certificate.")
	fs.StringVar(&o.WebhookKeyName, "webhook-key-name", "tls.key", "File name of the webhook server's key.")
	fs.StringVar(&o.HealthAddr, "health-addr", ":9440", "Bind address of the health and readiness probes.")
	fs.StringVar(&o.infrastructureKubeconfig, "infrastructure-kubeconfig", "",
		"Kubeconfig of the cluster the machines' VirtualMachines run in (mounted from a Secret of the provider's namespace); the management cluster when empty.")
	fs.StringVar(&o.managementClusterIdentity, "management-cluster-identity", "",
		"Identity of this management cluster that every object made in --infrastructure-kubeconfig's cluster carries, so that management clusters sharing it never adopt or delete each other's VMs; the UID of the management cluster's kube-system namespace when empty. Set the source's on a clusterctl move's target.")
	fs.Int32Var(&o.importFailureRestarts, "import-failure-restarts", kubevirtmachine.DefaultImportFailureRestarts,
		"Importer pod restarts of a root DataVolume that count as a failed import (reported as ImportFailed).")
	fs.IntVar(&o.machineConcurrency, "kubevirtmachine-concurrency", setup.DefaultMachineConcurrency, "KubeVirtMachines reconciled in parallel.")
	fs.IntVar(&o.templateConcurrency, "kubevirtmachinetemplate-concurrency", setup.DefaultTemplateConcurrency, "KubeVirtMachineTemplates reconciled in parallel.")
	fs.IntVar(&o.clusterConcurrency, "kubevirtcluster-concurrency", setup.DefaultClusterConcurrency, "KubeVirtClusters reconciled in parallel.")
	o.workerClassWebhooks.AddFlags(fs)
	o.placement.AddFlags(fs)
	flags.AddManagerOptions(fs, &o.Manager)
	feature.MutableGates.AddFlag(fs)
}

// The authorized metrics endpoint reviews tokens and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func main() {
	o := &options{Flags: manager.Flags{Logs: logs.NewOptions()}}
	o.addFlags(pflag.CommandLine)
	manager.ParseCommandLine()
	if err := run(o); err != nil {
		ctrl.Log.WithName("setup").Error(err, "The manager stopped")
		os.Exit(1)
	}
}

func run(o *options) error {
	if err := o.ApplyLogging(); err != nil {
		return err
	}
	if err := o.placement.Check(); err != nil {
		return fmt.Errorf("the placement flags: %w", err)
	}
	setupLog := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := setup.AddToScheme(scheme); err != nil {
		return err
	}
	restConfig, err := o.RESTConfig(controllerName)
	if err != nil {
		return err
	}
	restConfig.WarningHandler = apiwarnings.DefaultHandler(klog.Background().WithName("API Server Warning"))

	opts, err := o.ManagerOptions("infrastructure-kubevirt-workers-leader-election")
	if err != nil {
		return err
	}
	opts.Scheme = scheme
	if opts.Cache, err = setup.ManagerCacheOptions(scheme, controllerName, o.watchNamespace, o.syncPeriod); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restConfig, opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := manager.AddWebhookProbes(mgr); err != nil {
		return err
	}

	var infraConfig *rest.Config
	if o.infrastructureKubeconfig != "" {
		if infraConfig, err = clientcmd.BuildConfigFromFlags("", o.infrastructureKubeconfig); err != nil {
			return fmt.Errorf("loading --infrastructure-kubeconfig: %w", err)
		}
		infraConfig.QPS, infraConfig.Burst = o.RESTConfigQPS, o.RESTConfigBurst
		infraConfig.UserAgent = restConfig.UserAgent
		infraConfig.WarningHandler = restConfig.WarningHandler
	}

	ctx := ctrl.SetupSignalHandler()
	workerClasses := feature.Gates.Enabled(feature.WorkerClass)
	if err := setup.Webhooks(mgr, infraConfig, o.placement); err != nil {
		return err
	}
	if err := setup.Reconcilers(ctx, mgr, setup.Options{
		ControllerName:            controllerName,
		WatchFilterValue:          o.watchFilterValue,
		WatchNamespace:            o.watchNamespace,
		WorkerClasses:             workerClasses,
		ImportFailureRestarts:     o.importFailureRestarts,
		MachineConcurrency:        o.machineConcurrency,
		TemplateConcurrency:       o.templateConcurrency,
		ClusterConcurrency:        o.clusterConcurrency,
		Infrastructure:            infraConfig,
		ManagementClusterIdentity: o.managementClusterIdentity,
		SyncPeriod:                o.syncPeriod,
		Placement:                 o.placement,
	}); err != nil {
		return err
	}
	// The WorkerClass API (class controller, class and pool admission) is
	// alpha and runs in this manager only behind its feature gate.
	if workerClasses {
		if err := workerclass.SetupWebhooksWithManager(mgr, o.workerClassWebhooks); err != nil {
			return err
		}
		if err := workerclass.SetupWithManager(ctx, mgr, workerclass.Options{}); err != nil {
			return err
		}
	}
	setupLog.Info("Starting the manager", "namespace", o.watchNamespace, "watchFilter", o.watchFilterValue, "workerClasses", workerClasses,
		"infrastructureCluster", infrastructureClusterName(infraConfig),
		"tenantTolerationKeys", o.placement.TolerationKeys, "tenantNodeAffinityKeys", o.placement.NodeAffinityKeys,
		"tenantDeviceNames", o.placement.DeviceNames, "tenantDedicatedCPUPlacement", o.placement.DedicatedCPUPlacement,
		"reservedNodeLabels", o.placement.ReservedNodeLabels)
	return mgr.Start(ctx)
}

// infrastructureClusterName names the infrastructure cluster in the start-up
// log line: its API server's address, never its credentials.
func infrastructureClusterName(cfg *rest.Config) string {
	if cfg == nil {
		return "the management cluster"
	}
	return redact.URL(cfg.Host)
}
