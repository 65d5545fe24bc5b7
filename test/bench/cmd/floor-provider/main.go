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

// Command floor-provider runs one of the scale benchmark's contract-floor
// providers (test/bench/floor) as its own process, as
// test/harness/cmd/component runs ours: it counts its API requests and
// serves them on loopback HTTP, writes that URL to -address-file once its
// caches synced, and stops on SIGTERM. The benchmark starts it with
// harness.StartProcess.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/remote"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/bench/floor"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

func main() {
	var (
		name, addressFile string
		qps, workloadQPS  float64
		burst, workload   int
		concurrency       int
	)
	flag.StringVar(&name, "component", "", fmt.Sprintf("the floor provider to run: %s or %s", floor.BootstrapName, floor.InfrastructureName))
	flag.StringVar(&addressFile, "address-file", "", "file the request counts' URL is written to once the caches synced")
	// Ours' and Cluster API's flag defaults, so the limits are the same.
	flag.Float64Var(&qps, "kube-api-qps", 100, "management client QPS")
	flag.IntVar(&burst, "kube-api-burst", 200, "management client burst")
	flag.Float64Var(&workloadQPS, "workload-qps", 20, "workload client QPS")
	flag.IntVar(&workload, "workload-burst", 30, "workload client burst")
	flag.IntVar(&concurrency, "concurrency", 10, "concurrent reconciles")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(name, addressFile, float32(qps), burst, float32(workloadQPS), workload, concurrency); err != nil {
		fmt.Fprintf(os.Stderr, "floor-provider %s: %v\n", name, err)
		os.Exit(1)
	}
}

func run(name string, addressFile string, qps float32, burst int, workloadQPS float32, workloadBurst, concurrency int) error {
	if addressFile == "" {
		return errors.New("-address-file is required")
	}
	role := map[string]string{floor.BootstrapName: requests.ComponentBootstrap, floor.InfrastructureName: requests.ComponentInfra}[name]
	if role == "" {
		return fmt.Errorf("unknown floor provider %q", name)
	}
	// controller-runtime's -kubeconfig flag.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = remote.DefaultClusterAPIUserAgent(name)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()

	recorder := requests.NewRecorder(requests.Options{ManagementHost: cfg.Host, Component: role, Delegate: klog.Background().GetSink()})
	recorder.Install()
	// The first name a logger gets attributes the requests made in its
	// reconciles: the role, as ours have.
	log := recorder.Logger().WithName(role)
	ctrl.SetLogger(log)
	ctx = ctrl.LoggerInto(ctx, log)

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme, infrav1.AddToScheme, kubevirtv1.AddToScheme, cdiv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// As every Cluster API manager: managed fields are not kept.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return err
	}
	options := controller.Options{MaxConcurrentReconciles: concurrency}
	if name == floor.BootstrapName {
		err = (&floor.Bootstrap{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), WorkloadQPS: workloadQPS, WorkloadBurst: workloadBurst}).SetupWithManager(ctx, mgr, options)
	} else {
		err = (&floor.Infrastructure{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(ctx, mgr, options)
	}
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", name, err)
	}

	log.Info("Starting the floor provider", "component", name, "qps", qps, "burst", burst)
	return recorder.RunManager(ctx, mgr, addressFile)
}
