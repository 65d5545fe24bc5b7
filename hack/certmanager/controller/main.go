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

// Command controller runs cert-manager's controller as its upstream
// cmd/controller does (a module of its own, which the module proxy does not
// serve), calling the same packages: the configuration's defaults and
// validation, the controller context factory, leader election with the
// healthz server's watchdog, the metrics server, and every controller
// registered by the packages upstream's start.go imports.
//
// Where it differs from upstream: no --config file, and of the flags only
// those the Helm chart passes by default and the few a test changes (the
// logging flags, --kubeconfig, --master, --namespace, the leader election
// ones, --controllers, --feature-gates, the ACME solver's image and
// challenge limit, --cluster-resource-namespace, --metrics-listen-address,
// --enable-certificate-owner-ref); no TLS on the metrics listener and no
// profiler, which the chart leaves off.
package main

// The blank imports register the controllers and issuers that upstream's
// cmd/controller/app/start.go registers.
import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	config "github.com/cert-manager/cert-manager/internal/apis/config/controller"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/controller/scheme"
	defaults "github.com/cert-manager/cert-manager/internal/apis/config/controller/v1alpha1"
	"github.com/cert-manager/cert-manager/internal/apis/config/controller/validation"
	cmdutil "github.com/cert-manager/cert-manager/internal/cmd/util"
	"github.com/cert-manager/cert-manager/internal/controller/feature"
	"github.com/cert-manager/cert-manager/internal/pem"
	configv1alpha1 "github.com/cert-manager/cert-manager/pkg/apis/config/controller/v1alpha1"
	"github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	shimgateways "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/gateways"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	shimlistenersets "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/listenerset"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	clusterissuerscontroller "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	"github.com/cert-manager/cert-manager/pkg/healthz"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	dnsutil "github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/util"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/vault"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/venafi"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/server"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
)

func main() {
	ctx, exit := cmdutil.SetupExitHandler(context.Background(), cmdutil.GracefulShutdown)
	defer exit() // It may call os.Exit, so it runs last.

	logf.InitLogs()
	defer logf.FlushLogs()
	ctx = logf.NewContext(ctx, logf.Log, "controller")

	if err := runCommand(ctx, os.Args[1:]); err != nil {
		logf.Log.Error(err, "error executing command")
		cmdutil.SetExitCode(err)
	}
}

// runCommand builds the configuration as upstream's options package does
// (the versioned defaults converted to the internal type, then the flags),
// validates it and runs the controller.
func runCommand(ctx context.Context, args []string) error {
	scheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return fmt.Errorf("building the configuration scheme: %w", err)
	}
	versioned := &configv1alpha1.ControllerConfiguration{}
	scheme.Default(versioned)
	cfg := &config.ControllerConfiguration{}
	if err := scheme.Convert(versioned, cfg, nil); err != nil {
		return fmt.Errorf("converting the default configuration: %w", err)
	}

	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	addFlags(fs, cfg)
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return fmt.Errorf("setting feature gates: %w", err)
	}
	if errs := validation.ValidateControllerConfiguration(cfg, nil); len(errs) > 0 {
		return fmt.Errorf("validating flags: %w", errs.ToAggregate())
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return fmt.Errorf("applying the logging flags: %w", err)
	}
	return run(ctx, cfg)
}

// addFlags registers upstream's flags of the same names (see the package
// comment for which).
func addFlags(fs *pflag.FlagSet, c *config.ControllerConfiguration) {
	fs.StringVar(&c.APIServerHost, "master", c.APIServerHost, "Optional apiserver host address to connect to.")
	fs.StringVar(&c.KubeConfig, "kubeconfig", c.KubeConfig, "Paths to a kubeconfig. Only required if out-of-cluster.")
	fs.StringVar(&c.ClusterResourceNamespace, "cluster-resource-namespace", c.ClusterResourceNamespace, "Namespace to store resources owned by cluster scoped resources such as ClusterIssuer in.")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "If set, this limits the scope of cert-manager to a single namespace and ClusterIssuers are disabled.")
	fs.BoolVar(&c.LeaderElectionConfig.Enabled, "leader-elect", c.LeaderElectionConfig.Enabled, "Perform leader election between instances.")
	fs.StringVar(&c.LeaderElectionConfig.Namespace, "leader-election-namespace", c.LeaderElectionConfig.Namespace, "Namespace used to perform leader election.")
	fs.DurationVar(&c.LeaderElectionConfig.LeaseDuration, "leader-election-lease-duration", c.LeaderElectionConfig.LeaseDuration, "Leader election lease duration.")
	fs.DurationVar(&c.LeaderElectionConfig.RenewDeadline, "leader-election-renew-deadline", c.LeaderElectionConfig.RenewDeadline, "Leader election renew deadline.")
	fs.DurationVar(&c.LeaderElectionConfig.RetryPeriod, "leader-election-retry-period", c.LeaderElectionConfig.RetryPeriod, "Leader election retry period.")
	fs.StringSliceVar(&c.Controllers, "controllers", c.Controllers, "A list of controllers to enable ('*' for the defaults, '-foo' to disable foo). All controllers: "+strings.Join(defaults.AllControllers, ", "))
	fs.StringVar(&c.ACMEHTTP01Config.SolverImage, "acme-http01-solver-image", c.ACMEHTTP01Config.SolverImage, "The image of the ACME HTTP01 challenge solver.")
	fs.IntVar(&c.MaxConcurrentChallenges, "max-concurrent-challenges", c.MaxConcurrentChallenges, "The maximum number of challenges that can be scheduled as 'processing' at once.")
	fs.BoolVar(&c.EnableCertificateOwnerRef, "enable-certificate-owner-ref", c.EnableCertificateOwnerRef, "Set the Certificate as the owner of its Secret.")
	fs.StringVar(&c.MetricsListenAddress, "metrics-listen-address", c.MetricsListenAddress, "The host and port of the metrics endpoint.")
	fs.Var(cliflag.NewMapStringBool(&c.FeatureGates), "feature-gates", "A set of key=value pairs for alpha/experimental features: "+strings.Join(utilfeature.DefaultFeatureGate.KnownFeatures(), ", "))
	logf.AddFlags(&c.Logging, fs)
}

// enabledControllers expands --controllers as upstream's
// options.EnabledControllers does.
func enabledControllers(o *config.ControllerConfiguration) sets.Set[string] {
	var disabled []string
	enabled := sets.New[string]()
	for _, c := range o.Controllers {
		switch {
		case c == "*":
			enabled.Insert(defaults.DefaultEnabledControllers...)
		case strings.HasPrefix(c, "-"):
			disabled = append(disabled, strings.TrimPrefix(c, "-"))
		default:
			enabled.Insert(c)
		}
	}
	if len(disabled) > 0 && len(enabled) == 0 {
		enabled.Insert(defaults.DefaultEnabledControllers...)
	}
	if utilfeature.DefaultFeatureGate.Enabled(feature.ExperimentalCertificateSigningRequestControllers) {
		enabled.Insert(defaults.ExperimentalCertificateSigningRequestControllers...)
	}
	if utilfeature.DefaultFeatureGate.Enabled(feature.ExperimentalGatewayAPISupport) && o.GatewayAPIConfig.Enabled {
		enabled.Insert(shimgateways.ControllerName)
	}
	if utilfeature.DefaultFeatureGate.Enabled(feature.ListenerSets) && o.GatewayAPIConfig.Enabled && o.GatewayAPIConfig.EnableListenerSet {
		enabled.Insert(shimlistenersets.ControllerName)
	}
	if o.Namespace != "" {
		enabled.Delete(defaults.ClusterScopedControllers...)
	}
	return enabled.Delete(disabled...)
}

// run is upstream's app.Run less the profiler and the metrics TLS.
func run(rootCtx context.Context, opts *config.ControllerConfiguration) error {
	rootCtx, cancel := context.WithCancel(rootCtx)
	defer cancel()
	log := logf.FromContext(rootCtx)
	g, rootCtx := errgroup.WithContext(rootCtx)

	v := util.VersionInfo()
	log.Info("starting cert-manager controller", "version", v.GitVersion, "go_version", v.GoVersion, "platform", v.Platform)

	factory, err := contextFactory(rootCtx, opts)
	if err != nil {
		return err
	}
	ctx, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	l := opts.PEMSizeLimitsConfig
	pem.SetGlobalSizeLimits(pem.NewSizeLimitsFromConfig(l.MaxCertificateSize, l.MaxPrivateKeySize, l.MaxChainLength, l.MaxBundleSize))

	enabled := enabledControllers(opts)
	log.Info(fmt.Sprintf("enabled controllers: %s", sets.List(enabled)))

	metricsLn, err := server.Listen(rootCtx, "tcp", opts.MetricsListenAddress)
	if err != nil {
		return fmt.Errorf("listening on the metrics address %s: %w", opts.MetricsListenAddress, err)
	}
	ctx.Metrics.SetupACMECollector(ctx.SharedInformerFactory.Acme().V1().Challenges().Lister())
	ctx.Metrics.SetupCertificateCollector(ctx.SharedInformerFactory.Certmanager().V1().Certificates().Lister())
	ctx.Metrics.SetupIssuerCollector(ctx.SharedInformerFactory.Certmanager().V1().Issuers().Lister())
	if enabled.Has(clusterissuerscontroller.ControllerName) {
		ctx.Metrics.SetupClusterIssuerCollector(ctx.SharedInformerFactory.Certmanager().V1().ClusterIssuers().Lister())
	}
	metricsServer := ctx.Metrics.NewServer(metricsLn)
	g.Go(func() error {
		<-rootCtx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return metricsServer.Shutdown(shutdownCtx) //nolint:contextcheck // The root context is done.
	})
	g.Go(func() error {
		if err := metricsServer.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})

	// The chart's liveness probe asks this server's /livez, which fails
	// when the leader's lease has lapsed.
	healthzLn, err := (&net.ListenConfig{}).Listen(rootCtx, "tcp", opts.HealthzListenAddress)
	if err != nil {
		return fmt.Errorf("listening on the healthz address %s: %w", opts.HealthzListenAddress, err)
	}
	healthzServer := healthz.NewServer(opts.LeaderElectionConfig.HealthzTimeout)
	g.Go(func() error { return healthzServer.Start(rootCtx, healthzLn) })

	elected := make(chan struct{})
	if opts.LeaderElectionConfig.Enabled {
		g.Go(func() error { return leaderElection(rootCtx, factory, opts, healthzServer, elected) })
	} else {
		close(elected)
	}
	select {
	case <-rootCtx.Done():
		return g.Wait()
	case <-elected:
	}

	for name, fn := range controller.Known() {
		if !enabled.Has(name) {
			continue
		}
		iface, err := fn(factory)
		if err != nil {
			cancel()
			return errors.Join(fmt.Errorf("starting controller %s: %w", name, err), g.Wait())
		}
		g.Go(func() error {
			log.V(logf.InfoLevel).Info("starting controller", "controller", name)
			return iface.Run(opts.NumberOfConcurrentWorkers, rootCtx)
		})
	}
	ctx.SharedInformerFactory.Start(rootCtx.Done())
	ctx.KubeSharedInformerFactory.Start(rootCtx.Done())
	ctx.HTTP01ResourceMetadataInformersFactory.Start(rootCtx.Done())
	if utilfeature.DefaultFeatureGate.Enabled(feature.ExperimentalGatewayAPISupport) && opts.GatewayAPIConfig.Enabled {
		ctx.GWShared.Start(rootCtx.Done())
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("running the controllers: %w", err)
	}
	return nil
}

// contextFactory passes the configuration to the controller context
// factory field by field, as upstream's buildControllerContextFactory does.
func contextFactory(ctx context.Context, opts *config.ControllerConfiguration) (*controller.ContextFactory, error) {
	nameservers := opts.ACMEDNS01Config.RecursiveNameservers
	if len(nameservers) == 0 {
		nameservers = dnsutil.RecursiveNameservers
	}
	h := opts.ACMEHTTP01Config
	quantities := map[string]resource.Quantity{}
	for name, q := range map[string]string{
		"ACME HTTP01 solver CPU request": h.SolverResourceRequestCPU, "ACME HTTP01 solver memory request": h.SolverResourceRequestMemory,
		"ACME HTTP01 solver CPU limit": h.SolverResourceLimitsCPU, "ACME HTTP01 solver memory limit": h.SolverResourceLimitsMemory,
	} {
		parsed, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, fmt.Errorf("parsing the %s %q: %w", name, q, err)
		}
		quantities[name] = parsed
	}
	return controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         opts.KubeConfig,
		KubernetesAPIQPS:   opts.KubernetesAPIQPS,
		KubernetesAPIBurst: opts.KubernetesAPIBurst,
		APIServerHost:      opts.APIServerHost,
		Namespace:          opts.Namespace,
		ACMEOptions: controller.ACMEOptions{
			HTTP01SolverResourceRequestCPU:    quantities["ACME HTTP01 solver CPU request"],
			HTTP01SolverResourceRequestMemory: quantities["ACME HTTP01 solver memory request"],
			HTTP01SolverResourceLimitsCPU:     quantities["ACME HTTP01 solver CPU limit"],
			HTTP01SolverResourceLimitsMemory:  quantities["ACME HTTP01 solver memory limit"],
			ACMEHTTP01SolverRunAsNonRoot:      h.SolverRunAsNonRoot,
			HTTP01SolverImage:                 h.SolverImage,
			HTTP01SolverNameservers:           h.SolverNameservers,
			HTTP01SolverExtraLabels:           h.SolverExtraLabels,
			HTTP01SolverRuntimeClassName:      h.SolverRuntimeClassName,
			DNS01Nameservers:                  nameservers,
			DNS01CheckRetryPeriod:             opts.ACMEDNS01Config.CheckRetryPeriod,
			DNS01CheckAuthoritative:           !opts.ACMEDNS01Config.RecursiveNameserversOnly,
		},
		SchedulerOptions: controller.SchedulerOptions{MaxConcurrentChallenges: opts.MaxConcurrentChallenges},
		IssuerOptions: controller.IssuerOptions{
			ClusterIssuerAmbientCredentials: opts.ClusterIssuerAmbientCredentials,
			IssuerAmbientCredentials:        opts.IssuerAmbientCredentials,
			ClusterResourceNamespace:        opts.ClusterResourceNamespace,
		},
		IngressShimOptions: controller.IngressShimOptions{
			DefaultIssuerName:                 opts.IngressShimConfig.DefaultIssuerName,
			DefaultIssuerKind:                 opts.IngressShimConfig.DefaultIssuerKind,
			DefaultIssuerGroup:                opts.IngressShimConfig.DefaultIssuerGroup,
			DefaultAutoCertificateAnnotations: opts.IngressShimConfig.DefaultAutoCertificateAnnotations,
			ExtraCertificateAnnotations:       opts.IngressShimConfig.ExtraCertificateAnnotations,
			GatewayAPIExtraProtocols:          sets.New(opts.GatewayAPIConfig.ExtraProtocols...),
		},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef:                           opts.EnableCertificateOwnerRef,
			CopiedAnnotationPrefixes:                 opts.CopiedAnnotationPrefixes,
			CertificateRequestMinimumBackoffDuration: opts.CertificateRequestMinimumBackoffDuration,
			CertificateRequestMaximumBackoffDuration: opts.CertificateRequestMaximumBackoffDuration,
		},
		ConfigOptions: controller.ConfigOptions{
			EnableGatewayAPI:            opts.GatewayAPIConfig.Enabled,
			EnableGatewayAPIListenerSet: opts.GatewayAPIConfig.EnableListenerSet,
		},
	})
}

// leaderElection holds upstream's Lease (cert-manager-controller, labelled
// as upstream labels it) and closes elected once it leads; losing the
// lease is an error, which stops the process.
func leaderElection(ctx context.Context, factory *controller.ContextFactory, opts *config.ControllerConfiguration, hz *healthz.Server, elected chan struct{}) error {
	cctx, err := factory.Build("leader-election")
	if err != nil {
		return fmt.Errorf("building the leader election context: %w", err)
	}
	id, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("reading the hostname: %w", err)
	}
	lock, err := resourcelock.NewWithLabels(resourcelock.LeasesResourceLock,
		opts.LeaderElectionConfig.Namespace, "cert-manager-controller",
		cctx.Client.CoreV1(), cctx.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id + "-external-cert-manager-controller", EventRecorder: cctx.Recorder},
		map[string]string{"app.kubernetes.io/managed-by": "cert-manager"},
	)
	if err != nil {
		return fmt.Errorf("creating the leader election lock: %w", err)
	}
	lost := make(chan error, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   opts.LeaderElectionConfig.LeaseDuration,
		RenewDeadline:   opts.LeaderElectionConfig.RenewDeadline,
		RetryPeriod:     opts.LeaderElectionConfig.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        hz.LeaderHealthzAdaptor,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(elected) },
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost <- errors.New("leader election lost")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the leader elector: %w", err)
	}
	le.Run(ctx)
	select {
	case err := <-lost:
		return err
	default:
		return nil
	}
}
