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

// Command manager runs the Kairos bootstrap provider: the KairosConfig
// reconciler and the KairosConfig and KairosConfigTemplate webhooks.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cozystack/cluster-api-workers/bootstrap/reconcilers/kairosconfig"
	"github.com/cozystack/cluster-api-workers/bootstrap/setup"
	"github.com/cozystack/cluster-api-workers/internal/manager"
)

const controllerName = "kairos-bootstrap-manager"

// The secure diagnostics endpoint authenticates and authorizes its callers.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// options are the manager's command-line flags.
type options struct {
	manager.Flags
	watchNamespace          string
	watchFilterValue        string
	syncPeriod              time.Duration
	clusterCacheClientQPS   float32
	clusterCacheClientBurst int
	clusterCacheConcurrency int
	kairosConfigConcurrency int
	tokenTTL                time.Duration
	tokenKeepAlive          time.Duration
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	logsv1.AddFlags(o.Logs, fs)
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Enable leader election, so that only one manager replica is active.")
	fs.DurationVar(&o.LeaderElectionLeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits before forcing a takeover.")
	fs.DurationVar(&o.LeaderElectionRenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing leadership before giving up.")
	fs.DurationVar(&o.LeaderElectionRetryPeriod, "leader-elect-retry-period", 2*time.Second, "How long clients wait between leader election attempts.")
	fs.StringVar(&o.watchNamespace, "namespace", "", "Namespace to watch for Cluster API objects; all namespaces when empty.")
	fs.StringVar(&o.watchFilterValue, "watch-filter", "", fmt.Sprintf("Only reconcile objects whose %s label has this value; all objects when empty.", clusterv1.WatchLabel))
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute, "Minimum interval at which watched objects are reconciled again.")
	fs.Float32Var(&o.RESTConfigQPS, "kube-api-qps", setup.DefaultKubeAPIQPS, "Queries per second to the management API server.")
	fs.IntVar(&o.RESTConfigBurst, "kube-api-burst", setup.DefaultKubeAPIBurst, "Burst of queries to the management API server.")
	fs.Float32Var(&o.clusterCacheClientQPS, "clustercache-client-qps", setup.DefaultClusterCacheClientQPS, "Queries per second to each workload API server.")
	fs.IntVar(&o.clusterCacheClientBurst, "clustercache-client-burst", setup.DefaultClusterCacheClientBurst, "Burst of queries to each workload API server.")
	fs.IntVar(&o.clusterCacheConcurrency, "clustercache-concurrency", setup.DefaultClusterCacheConcurrency, "Number of clusters whose connections are handled at once.")
	fs.IntVar(&o.kairosConfigConcurrency, "kairosconfig-concurrency", setup.DefaultKairosConfigConcurrency, "Number of KairosConfigs reconciled at once.")
	fs.DurationVar(&o.tokenTTL, "bootstrap-token-ttl", kairosconfig.DefaultTokenTTL,
		"Lifetime of a Machine's bootstrap token. It is extended every third of this while the node has not joined and deleted once it has.")
	fs.DurationVar(&o.tokenKeepAlive, "bootstrap-token-keep-alive", kairosconfig.DefaultTokenKeepAlive,
		"How long after its mint a bootstrap token is extended while the node has not joined. Then it ends with its expiry and no new one is minted for that Machine, which its MachineHealthCheck replaces.")
	fs.StringVar(&o.HealthAddr, "health-addr", ":9440", "Address the health probes bind to.")
	fs.StringVar(&o.ProfilerAddress, "profiler-address", "", "Address of the pprof profiler (e.g. localhost:6060); off when empty.")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "Webhook server port.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Webhook certificate directory.")
	fs.StringVar(&o.WebhookCertName, "webhook-cert-name", "tls.crt", "Webhook certificate file name.")
	fs.StringVar(&o.WebhookKeyName, "webhook-key-name", "tls.key", "Webhook key file name.")
	flags.AddManagerOptions(fs, &o.Manager)
}

func main() {
	o := &options{Flags: manager.Flags{Logs: logs.NewOptions()}}
	o.addFlags(pflag.CommandLine)
	manager.ParseCommandLine()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "kairos bootstrap manager: %v\n", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	if err := o.ApplyLogging(); err != nil {
		return err
	}
	if err := setup.ValidateTokenTTL(o.tokenTTL); err != nil {
		return err
	}
	if err := setup.ValidateTokenKeepAlive(o.tokenKeepAlive, o.tokenTTL); err != nil {
		return err
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
	opts, err := o.ManagerOptions("kairos-bootstrap-manager-leader-election")
	if err != nil {
		return err
	}
	opts.Scheme = scheme
	// Only cluster-labelled Secrets are cached, with managedFields
	// stripped; other Secrets are read directly.
	opts.Cache = setup.ManagerCacheOptions(scheme, controllerName, o.watchNamespace, o.syncPeriod)
	opts.Client = setup.ManagerClientOptions()
	mgr, err := ctrl.NewManager(restConfig, opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	if err := manager.AddWebhookProbes(mgr); err != nil {
		return err
	}
	if err := setup.Webhooks(mgr); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setup.Reconcilers(ctx, mgr, setup.Options{
		ControllerName:          controllerName,
		TokenTTL:                o.tokenTTL,
		TokenKeepAlive:          o.tokenKeepAlive,
		KairosConfigConcurrency: o.kairosConfigConcurrency,
		ClusterCacheClientQPS:   o.clusterCacheClientQPS,
		ClusterCacheClientBurst: o.clusterCacheClientBurst,
		ClusterCacheConcurrency: o.clusterCacheConcurrency,
		WatchFilterValue:        o.watchFilterValue,
	}); err != nil {
		return err
	}
	setupLog.Info("Starting the manager", "bootstrapTokenTTL", o.tokenTTL, "namespace", o.watchNamespace, "watchFilter", o.watchFilterValue)
	return mgr.Start(ctx)
}
