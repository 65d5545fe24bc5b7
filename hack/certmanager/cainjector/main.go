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

// Command cainjector runs cert-manager's CA injector as its upstream
// cmd/cainjector does (a module of its own, which the module proxy does not
// serve), calling the same packages: the configuration's defaults and
// validation, a controller-runtime manager with upstream's cache, client
// and leader election options, and cert-manager's injectors
// (cainjector.RegisterAllInjectors).
//
// Where it differs from upstream: no --config file, and of the flags only
// those the Helm chart passes by default and the few a test changes (the
// logging flags, --kubeconfig, --namespace, the leader election ones, the
// data source and injectable switches, --feature-gates,
// --metrics-listen-address); no TLS on the metrics listener and no
// profiler, which the chart leaves off; it does not poll for the
// Certificate CRD before starting (hack/kind/certmanager.sh applies the
// CRDs first, and the manager's cache fails on a kind it cannot watch).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	config "github.com/cert-manager/cert-manager/internal/apis/config/cainjector"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/cainjector/scheme"
	"github.com/cert-manager/cert-manager/internal/apis/config/cainjector/validation"
	cmdutil "github.com/cert-manager/cert-manager/internal/cmd/util"
	configv1alpha1 "github.com/cert-manager/cert-manager/pkg/apis/config/cainjector/v1alpha1"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	ctx, exit := cmdutil.SetupExitHandler(context.Background(), cmdutil.GracefulShutdown)
	defer exit() // It may call os.Exit, so it runs last.

	logf.InitLogs()
	defer logf.FlushLogs()
	ctrl.SetLogger(logf.Log)
	ctx = logf.NewContext(ctx, logf.Log)

	if err := runCommand(ctx, os.Args[1:]); err != nil {
		logf.Log.Error(err, "error executing command")
		cmdutil.SetExitCode(err)
	}
}

// runCommand builds the configuration as upstream's options package does
// (the versioned defaults converted to the internal type, then the flags),
// validates it and runs the injector.
func runCommand(ctx context.Context, args []string) error {
	scheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return fmt.Errorf("building the configuration scheme: %w", err)
	}
	versioned := &configv1alpha1.CAInjectorConfiguration{}
	scheme.Default(versioned)
	cfg := &config.CAInjectorConfiguration{}
	if err := scheme.Convert(versioned, cfg, nil); err != nil {
		return fmt.Errorf("converting the default configuration: %w", err)
	}

	fs := pflag.NewFlagSet("cainjector", pflag.ContinueOnError)
	addFlags(fs, cfg)
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return fmt.Errorf("setting feature gates: %w", err)
	}
	if errs := validation.ValidateCAInjectorConfiguration(cfg, nil); len(errs) > 0 {
		return fmt.Errorf("validating flags: %w", errs.ToAggregate())
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return fmt.Errorf("applying the logging flags: %w", err)
	}
	v := util.VersionInfo()
	logf.FromContext(ctx, "cainjector").Info("starting cert-manager ca-injector", "version", v.GitVersion, "go_version", v.GoVersion, "platform", v.Platform)
	return run(ctx, cfg)
}

// addFlags registers upstream's flags of the same names (see the package
// comment for which).
func addFlags(fs *pflag.FlagSet, c *config.CAInjectorConfiguration) {
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "If set, this limits the scope of cainjector to a single namespace.")
	fs.StringSliceVar(&c.IgnoreNamespaces, "ignore-namespaces", c.IgnoreNamespaces, "Comma-separated list of namespaces to ignore secrets from.")
	fs.BoolVar(&c.LeaderElectionConfig.Enabled, "leader-elect", c.LeaderElectionConfig.Enabled, "Perform leader election between instances.")
	fs.StringVar(&c.LeaderElectionConfig.Namespace, "leader-election-namespace", c.LeaderElectionConfig.Namespace, "Namespace used to perform leader election.")
	fs.DurationVar(&c.LeaderElectionConfig.LeaseDuration, "leader-election-lease-duration", c.LeaderElectionConfig.LeaseDuration, "Leader election lease duration.")
	fs.DurationVar(&c.LeaderElectionConfig.RenewDeadline, "leader-election-renew-deadline", c.LeaderElectionConfig.RenewDeadline, "Leader election renew deadline.")
	fs.DurationVar(&c.LeaderElectionConfig.RetryPeriod, "leader-election-retry-period", c.LeaderElectionConfig.RetryPeriod, "Leader election retry period.")
	fs.BoolVar(&c.EnableDataSourceConfig.Certificates, "enable-certificates-data-source", c.EnableDataSourceConfig.Certificates, "Use Certificates as sources of CA data.")
	fs.BoolVar(&c.EnableInjectableConfig.ValidatingWebhookConfigurations, "enable-validatingwebhookconfigurations-injectable", c.EnableInjectableConfig.ValidatingWebhookConfigurations, "Inject CA data into annotated ValidatingWebhookConfigurations.")
	fs.BoolVar(&c.EnableInjectableConfig.MutatingWebhookConfigurations, "enable-mutatingwebhookconfigurations-injectable", c.EnableInjectableConfig.MutatingWebhookConfigurations, "Inject CA data into annotated MutatingWebhookConfigurations.")
	fs.BoolVar(&c.EnableInjectableConfig.CustomResourceDefinitions, "enable-customresourcedefinitions-injectable", c.EnableInjectableConfig.CustomResourceDefinitions, "Inject CA data into annotated CustomResourceDefinitions.")
	fs.BoolVar(&c.EnableInjectableConfig.APIServices, "enable-apiservices-injectable", c.EnableInjectableConfig.APIServices, "Inject CA data into annotated APIServices.")
	fs.StringVar(&c.MetricsListenAddress, "metrics-listen-address", c.MetricsListenAddress, "The host and port of the metrics endpoint ('0' disables it).")
	fs.Var(cliflag.NewMapStringBool(&c.FeatureGates), "feature-gates", "A set of key=value pairs for alpha/experimental features: "+strings.Join(utilfeature.DefaultFeatureGate.KnownFeatures(), ", "))
	logf.AddFlags(&c.Logging, fs)
	// controller-runtime's --kubeconfig, a flag of the standard library's.
	var crFlags flag.FlagSet
	ctrlconfig.RegisterFlags(&crFlags)
	crFlags.VisitAll(func(f *flag.Flag) { fs.AddGoFlag(f) })
}

// run is upstream's app.Run less the profiler, the metrics TLS and the
// wait for the Certificate CRD.
func run(ctx context.Context, opts *config.CAInjectorConfiguration) error {
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the client configuration: %w", err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")

	var namespaces map[string]cache.Config
	if opts.Namespace != "" {
		namespaces = map[string]cache.Config{opts.Namespace: {}}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultNamespaces:           namespaces,
		},
		// Upstream reads Secrets uncached: clusters hold many large ones,
		// and listing them all at start loads the API server.
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:                opts.LeaderElectionConfig.Enabled,
		LeaderElectionNamespace:       opts.LeaderElectionConfig.Namespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionLabels:          map[string]string{"app.kubernetes.io/managed-by": "cert-manager-cainjector"},
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaseDuration:                 &opts.LeaderElectionConfig.LeaseDuration,
		RenewDeadline:                 &opts.LeaderElectionConfig.RenewDeadline,
		RetryPeriod:                   &opts.LeaderElectionConfig.RetryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsListenAddress},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    opts.Namespace,
		IgnoreNamespaces:             opts.IgnoreNamespaces,
		EnableCertificatesDataSource: opts.EnableDataSourceConfig.Certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   opts.EnableInjectableConfig.MutatingWebhookConfigurations,
			cainjector.ValidatingWebhookConfigurationName: opts.EnableInjectableConfig.ValidatingWebhookConfigurations,
			cainjector.APIServiceName:                     opts.EnableInjectableConfig.APIServices,
			cainjector.CustomResourceDefinitionName:       opts.EnableInjectableConfig.CustomResourceDefinitions,
		},
	})
	if err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
