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

// Package manager is what the two providers' managers do alike: parse the
// command line, apply the logging flags, load the REST config and build
// the controller-runtime manager's options and health probes from the
// flags they share. Each main.go keeps its own flags' registration (the
// names and defaults are alike, the help texts each provider's own) and
// its provider's scheme, caches, reconcilers and webhooks.
package manager

import (
	"flag"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/controllers/remote"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/cozystack/cluster-api-workers/internal/logcap"
)

// Flags are the values of the flags both managers take.
type Flags struct {
	LeaderElect                 bool
	LeaderElectionLeaseDuration time.Duration
	LeaderElectionRenewDeadline time.Duration
	LeaderElectionRetryPeriod   time.Duration
	RESTConfigQPS               float32
	RESTConfigBurst             int
	HealthAddr                  string
	ProfilerAddress             string
	WebhookPort                 int
	WebhookCertDir              string
	WebhookCertName             string
	WebhookKeyName              string
	Manager                     flags.ManagerOptions
	Logs                        *logsv1.LoggingConfiguration
}

// ParseCommandLine parses the process's flags as Cluster API's managers
// do: a word in a flag's name may be separated by - or _, and the Go flag
// set's flags (klog's) are taken too.
func ParseCommandLine() {
	pflag.CommandLine.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()
}

// ApplyLogging checks the logging flags against what the managers
// support, applies them and makes klog controller-runtime's logger.
func (f *Flags) ApplyLogging() error {
	if err := logcap.Validate(f.Logs); err != nil {
		return err
	}
	if err := logsv1.ValidateAndApply(f.Logs, nil); err != nil {
		return fmt.Errorf("applying the logging flags: %w", err)
	}
	ctrl.SetLogger(klog.Background())
	return nil
}

// RESTConfig loads the management cluster's kubeconfig with the flags'
// rate limits and Cluster API's user agent for the controller.
func (f *Flags) RESTConfig(controllerName string) (*rest.Config, error) {
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	restConfig.QPS = f.RESTConfigQPS
	restConfig.Burst = f.RESTConfigBurst
	restConfig.UserAgent = remote.DefaultClusterAPIUserAgent(controllerName)
	return restConfig, nil
}

// ManagerOptions are the manager's options the shared flags set: leader
// election by a Lease of that ID, the health probes' and the profiler's
// addresses, the metrics endpoint and the webhook server. The caller adds
// its scheme, cache and client options.
func (f *Flags) ManagerOptions(leaderElectionID string) (ctrl.Options, error) {
	tlsOptions, metricsOptions, err := flags.GetManagerOptions(f.Manager)
	if err != nil {
		return ctrl.Options{}, fmt.Errorf("invalid manager flags: %w", err)
	}
	// /debug/flags/v is bounded like --v.
	logcap.CapVerbosityEndpoint(metricsOptions)
	return ctrl.Options{
		LeaderElection:             f.LeaderElect,
		LeaderElectionID:           leaderElectionID,
		LeaseDuration:              &f.LeaderElectionLeaseDuration,
		RenewDeadline:              &f.LeaderElectionRenewDeadline,
		RetryPeriod:                &f.LeaderElectionRetryPeriod,
		LeaderElectionResourceLock: resourcelock.LeasesResourceLock,
		HealthProbeBindAddress:     f.HealthAddr,
		PprofBindAddress:           f.ProfilerAddress,
		Metrics:                    *metricsOptions,
		WebhookServer: webhook.NewServer(webhook.Options{
			Port:     f.WebhookPort,
			CertDir:  f.WebhookCertDir,
			CertName: f.WebhookCertName,
			KeyName:  f.WebhookKeyName,
			TLSOpts:  tlsOptions,
		}),
	}, nil
}

// AddWebhookProbes makes the manager ready, and healthy, once its webhook
// server has started: both managers serve webhooks, and a replica that
// cannot answer them must not receive the apiserver's calls.
func AddWebhookProbes(mgr ctrl.Manager) error {
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	if err := mgr.AddHealthzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	return nil
}
