// Package envtest starts real kube-apiservers (built from source by
// hack/tools-bins.sh) with the project's CRDs, the Cluster API CRDs and, where
// asked, the project's admission webhooks served in-process, so tests see the
// same validation a cluster applies.
package envtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options select what a management apiserver starts with.
type Options struct {
	// Scheme is used by the client and the manager. It defaults to client-go's
	// scheme plus apiextensions and Cluster API core v1beta2; callers add
	// their own API groups.
	Scheme *kruntime.Scheme
	// CRDPaths are extra CRD files or directories, relative to the repository
	// root unless absolute. The project's own CRDs (config/*/crd/bases) and
	// the Cluster API core CRDs are always installed.
	CRDPaths []string
	// WebhookPaths are webhook manifest files or directories, relative to the
	// repository root. Every webhook they declare must be served by
	// SetupWebhooks, or the apiserver fails closed on the matching requests.
	WebhookPaths []string
	// SetupWebhooks registers the webhook handlers with the manager.
	SetupWebhooks func(mgr ctrl.Manager) error
	// SetupControllers registers reconcilers with the manager.
	SetupControllers func(ctx context.Context, mgr ctrl.Manager) error
	// ManifestPaths are YAML files of other objects to create once the
	// apiserver runs (admission policies, say), relative to the repository
	// root unless absolute.
	ManifestPaths []string
	// APIServerArgs are extra kube-apiserver flags (name to value).
	APIServerArgs map[string]string
}

// Environment is a running apiserver with a client and, when webhooks or
// controllers were asked for, a running manager.
type Environment struct {
	Config  *rest.Config
	Client  client.Client
	Scheme  *kruntime.Scheme
	Manager ctrl.Manager
	env     *crenvtest.Environment
	// dir holds the front proxy CA.
	dir      string
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
	restarts apiServerRestarts
}

// RepoRoot returns the absolute path of the repository root.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0) //nolint:dogsled // Only the file of this source is needed.
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// DefaultScheme returns client-go's scheme plus apiextensions and Cluster API
// core v1beta2.
func DefaultScheme() *kruntime.Scheme {
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("building the default scheme: %v", err))
		}
	}
	return s
}

// BinaryDir returns the directory holding kube-apiserver and etcd: the
// KUBEBUILDER_ASSETS variable when set, otherwise the cache that
// hack/tools-bins.sh fills (building the binaries on first use).
func BinaryDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	return ToolsBinary("envtest")
}

// ToolsBinary runs hack/tools-bins.sh for one target and returns the cache
// directory it reports. The script returns at once when the binaries exist;
// otherwise its progress lines (one every 30 seconds while it builds) go to
// stderr as they come, so a first run says what it is doing.
func ToolsBinary(target string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "tools-bins.sh"), target) //nolint:gosec,noctx // The harness's own command; it ends on its own.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, os.Stderr)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tools-bins.sh %s: %w: %s", target, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ModuleDir returns the directory of a module in the module cache, at the
// version go.mod requires.
func ModuleDir(module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module) //nolint:gosec,noctx // The harness's own command; it ends on its own.
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating module %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not in the module cache; run 'go mod download'", module)
	}
	return dir, nil
}

// CAPICRDPaths returns the Cluster API core CRD directory from the module
// cache.
func CAPICRDPaths() ([]string, error) {
	dir, err := ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(dir, "core", "config", "crd", "bases")}, nil
}

func projectCRDPaths() []string {
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(), "config", "*", "crd", "bases"))
	return matches
}

func abs(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(RepoRoot(), p)
}

// Start starts an apiserver with the CRDs, and a manager serving webhooks and
// running controllers when the options ask for them.
func Start(ctx context.Context, opts Options) (*Environment, error) {
	binDir, err := BinaryDir()
	if err != nil {
		return nil, err
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = DefaultScheme()
	}
	capi, err := CAPICRDPaths()
	if err != nil {
		return nil, err
	}
	crdPaths := append(append(capi, projectCRDPaths()...), mapAbs(opts.CRDPaths)...)
	env := &crenvtest.Environment{
		Scheme:                scheme,
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: true,
		// Established within controller-runtime's default 10 s only on an
		// idle machine: under a load average of 8 (packages testing in
		// parallel beside other builds) the many CRDs once took longer and
		// the start failed. A bound, not a measurement.
		CRDInstallOptions:        crenvtest.CRDInstallOptions{MaxTime: 2 * time.Minute},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		WebhookInstallOptions:    crenvtest.WebhookInstallOptions{Paths: mapAbs(opts.WebhookPaths)},
	}
	dir, err := os.MkdirTemp("", "envtest-")
	if err != nil {
		return nil, err
	}
	frontProxy, err := frontProxyArgs(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for _, set := range []map[string]string{frontProxy, opts.APIServerArgs} {
		for k, v := range set {
			args.Set(k, v)
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// controller-runtime leaves the control plane running when a later
		// step of Start (installing the CRDs) fails.
		_ = env.Stop()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &Environment{Config: cfg, Scheme: scheme, env: env, dir: dir, restarts: apiServerRestarts{config: cfg}}
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.CreateManifests(ctx, mapAbs(opts.ManifestPaths)); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if opts.SetupWebhooks == nil && opts.SetupControllers == nil {
		return e, nil
	}
	if err := e.startManager(ctx, opts); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// CreateManifests creates every object of the YAML files (absolute paths).
func (e *Environment) CreateManifests(ctx context.Context, paths []string) error {
	for _, path := range paths {
		data, err := os.ReadFile(path) //nolint:gosec // A file of the repository or one the harness wrote.
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("decoding %s: %w", path, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := e.Client.Create(ctx, u); err != nil {
				return fmt.Errorf("creating %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
			}
		}
	}
	return nil
}

func mapAbs(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, abs(p))
	}
	return out
}

func (e *Environment) startManager(ctx context.Context, opts Options) error {
	wh := e.env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:  e.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    wh.LocalServingHost,
			Port:    wh.LocalServingPort,
			CertDir: wh.LocalServingCertDir,
		}),
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("creating the test manager: %w", err)
	}
	if opts.SetupWebhooks != nil {
		if err := opts.SetupWebhooks(mgr); err != nil {
			return fmt.Errorf("registering webhooks: %w", err)
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	if opts.SetupControllers != nil {
		if err := opts.SetupControllers(mctx, mgr); err != nil {
			cancel()
			return fmt.Errorf("registering controllers: %w", err)
		}
	}
	e.Manager, e.cancel, e.done = mgr, cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		if err := mgr.Start(mctx); err != nil {
			fmt.Fprintf(os.Stderr, "envtest: test manager stopped: %v\n", err)
		}
	}()
	if opts.SetupWebhooks != nil {
		if err := waitForWebhookServer(mctx, mgr); err != nil {
			cancel()
			return err
		}
	}
	return nil
}

func waitForWebhookServer(ctx context.Context, mgr ctrl.Manager) error {
	deadline := time.Now().Add(30 * time.Second)
	check := mgr.GetWebhookServer().StartedChecker()
	for {
		if err := check(nil); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("webhook server did not start: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StopManager stops the webhook server and controllers while the apiserver
// keeps running, so tests can observe behaviour with the webhooks down.
func (e *Environment) StopManager() {
	e.stopOnce.Do(func() {
		if e.cancel != nil {
			e.cancel()
			<-e.done
		}
	})
}

// RestartAPIServer kills the apiserver (SIGKILL), keeps it down for
// downtime, and starts it again with its etcd, certificates, port and
// flags; it returns once the apiserver is ready.
func (e *Environment) RestartAPIServer(ctx context.Context, downtime time.Duration) error {
	return e.restarts.restart(ctx, downtime)
}

// Stop stops the manager and the apiserver.
func (e *Environment) Stop() error {
	e.StopManager()
	defer func() { _ = os.RemoveAll(e.dir) }()
	return errors.Join(e.restarts.stop(), e.env.Stop())
}

// EtcdURL returns the client URL of the apiserver's etcd, for an extension
// apiserver that keeps its objects there under a prefix of its own.
func (e *Environment) EtcdURL() string {
	return e.env.ControlPlane.Etcd.URL.String()
}
