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

// Command component runs one provider component (test/harness/components)
// as its own process against a management apiserver, so its CPU seconds and
// peak RSS can be read alone. It counts its API requests and rate limiter
// waits and serves them on loopback HTTP; once its caches have synced it
// writes that endpoint's URL to -address-file. SIGTERM stops it. The
// harness starts it with Options.Processes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cozystack/cluster-api-workers/internal/logcap"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

func main() {
	var (
		name        string
		addressFile string
		opts        components.Options
		qps, ccQPS  float64
		logOpts     = logs.NewOptions()
	)
	fs := pflag.CommandLine
	// The production binaries' logging flags (--v, --vmodule, ...), capped
	// and applied as they apply them: one verbosity for controller-runtime's
	// logger and client-go's request logging.
	logsv1.AddFlags(logOpts, fs)
	fs.StringVar(&name, "component", "", fmt.Sprintf("the component to run: one of %v", components.Names))
	fs.StringVar(&addressFile, "address-file", "", "file the request counts' URL is written to once the caches synced")
	fs.StringVar(&opts.ControllerName, "controller-name", "", "manager name (user agent, informer names); the production binary's when empty")
	fs.Float64Var(&qps, "kube-api-qps", 0, "management client QPS; the production default when 0")
	fs.IntVar(&opts.Limits.Burst, "kube-api-burst", 0, "management client burst; the production default when 0")
	fs.Float64Var(&ccQPS, "clustercache-client-qps", 0, "workload client QPS; the production default when 0")
	fs.IntVar(&opts.Limits.ClusterCacheBurst, "clustercache-client-burst", 0, "workload client burst; the production default when 0")
	fs.BoolVar(&opts.WorkerClasses, "worker-classes", false, "turn the WorkerClass feature gate on (infrastructure)")
	fs.DurationVar(&opts.BootstrapTokenTTL, "bootstrap-token-ttl", 0, "bootstrap token lifetime; the provider's default when 0")
	var infraKubeconfig string
	fs.StringVar(&infraKubeconfig, "infrastructure-kubeconfig", "", "kubeconfig of the infrastructure cluster the VMs run in (infrastructure); the management cluster when empty")
	fs.StringVar(&opts.ManagementClusterIdentity, "management-cluster-identity", "", "identity of the management cluster in the infrastructure cluster (infrastructure); its kube-system UID when empty")
	// The infrastructure manager's placement flags, as it binds them.
	opts.Placement.AddFlags(fs)
	var restarts int
	fs.IntVar(&restarts, "import-failure-restarts", 0, "importer restarts that fail an import; the provider's default when 0")
	// controller-runtime's --kubeconfig, as the production binaries bind it.
	fs.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()
	if err := logcap.Validate(logOpts); err != nil {
		fmt.Fprintf(os.Stderr, "component %s: %v\n", name, err)
		os.Exit(1)
	}
	if err := logsv1.ValidateAndApply(logOpts, nil); err != nil {
		fmt.Fprintf(os.Stderr, "component %s: applying the logging flags: %v\n", name, err)
		os.Exit(1)
	}
	opts.Limits.QPS, opts.Limits.ClusterCacheQPS = float32(qps), float32(ccQPS)
	opts.ImportFailureRestarts = int32(restarts)
	if infraKubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", infraKubeconfig)
		if err != nil {
			fmt.Fprintf(os.Stderr, "component %s: loading the infrastructure cluster's kubeconfig: %v\n", name, err)
			os.Exit(1)
		}
		opts.Infrastructure = cfg
	}
	if err := run(components.Name(name), addressFile, opts); err != nil {
		fmt.Fprintf(os.Stderr, "component %s: %v\n", name, err)
		os.Exit(1)
	}
}

func run(name components.Name, addressFile string, opts components.Options) error {
	if addressFile == "" {
		return errors.New("-address-file is required")
	}
	defaults := components.DefaultLimits(name)
	if opts.Limits.QPS == 0 {
		opts.Limits.QPS = defaults.QPS
	}
	if opts.Limits.Burst == 0 {
		opts.Limits.Burst = defaults.Burst
	}
	if opts.Limits.ClusterCacheQPS == 0 {
		opts.Limits.ClusterCacheQPS = defaults.ClusterCacheQPS
	}
	if opts.Limits.ClusterCacheBurst == 0 {
		opts.Limits.ClusterCacheBurst = defaults.ClusterCacheBurst
	}
	// The Deployments set GOMEMLIMIT from the container's memory limit
	// (config/base/manager.yaml); HARNESS_GOMEMLIMIT_BOOTSTRAP, ..._INFRASTRUCTURE
	// (a quantity, as the limit is written: 64Mi) sets it for one
	// component, so that a benchmark run measures what it costs and saves
	// without limiting the other Go processes of the run. No limit when
	// unset.
	if v := os.Getenv("HARNESS_GOMEMLIMIT_" + strings.ToUpper(name.Role())); v != "" {
		limit, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("HARNESS_GOMEMLIMIT_%s: %w", strings.ToUpper(name.Role()), err)
		}
		debug.SetMemoryLimit(limit.Value())
	}
	// controller-runtime's --kubeconfig flag, as the production binaries read it.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()

	// Every request this process makes is the component's.
	recorder := requests.NewRecorder(requests.Options{ManagementHost: cfg.Host, Component: name.Role(), Delegate: klog.Background().GetSink()})
	recorder.Install()
	log := recorder.Logger().WithName(name.Role())
	ctrl.SetLogger(log)
	opts.Manager = ctrl.Options{
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The production binaries' --profiler-address, from the
		// environment so that a benchmark run can profile one component
		// (HARNESS_PROFILER_ADDRESS_BOOTSTRAP, ..._INFRASTRUCTURE): off
		// when unset.
		PprofBindAddress: os.Getenv("HARNESS_PROFILER_ADDRESS_" + strings.ToUpper(name.Role())),
	}
	c, err := components.New(ctx, cfg, name, opts)
	if err != nil {
		return err
	}

	log.Info("Starting the component", "component", name, "qps", opts.Limits.QPS, "burst", opts.Limits.Burst)
	err = recorder.RunManager(ctx, c.Manager, addressFile)
	if c.ClusterCache != nil {
		if s, ok := c.ClusterCache.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	}
	return err
}
