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

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/infra"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

// The sandbox's hoster setup: the platform Kairos disk for Kubernetes 1.36
// and what the simulated guests find on it.
const (
	kubernetesMinor = "v1.36"
	kairosImage     = "registry.example.com/cozystack/kairos-worker@sha256:5a4d1b0e0c6f2d7e8a9b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"
	kairosOSImage   = "Kairos v3.5.3 (Ubuntu 24.04, simulated)"
)

// config is the sandbox's command line.
type config struct {
	once      bool
	dir       string
	namespace string
	cluster   string
	replicas  int
	timeout   time.Duration
	vars      variables
	verbose   bool
	// metricsAddress serves the process's metrics when set.
	metricsAddress string
}

// variables collects repeated --set NAME=value flags.
type variables map[string]string

func (v variables) String() string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k+"="+v[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (v variables) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q is not NAME=value", s)
	}
	v[name] = value
	return nil
}

func parseFlags(args []string, out io.Writer) (config, error) {
	c := config{vars: variables{}}
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.BoolVar(&c.once, "once", false, "exit 0 once the pool has joined (non-zero if it does not within --timeout), instead of running until Ctrl-C")
	fs.StringVar(&c.dir, "dir", filepath.Join(os.TempDir(), "kubevirt-workers-sandbox"), "directory for the kubeconfigs and the controllers' log")
	fs.StringVar(&c.namespace, "namespace", "sandbox", "namespace of the workload Cluster and its pool")
	fs.StringVar(&c.cluster, "cluster", "tenant", "name of the workload Cluster")
	fs.IntVar(&c.replicas, "replicas", 3, "machines of the example Kairos pool (WORKER_MACHINE_COUNT)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "with --once, how long the pool may take to join")
	fs.Var(c.vars, "set", "a variable of templates/cluster-template-kairos.yaml, NAME=value (repeatable), e.g. --set KAIROS_JOIN_MODE=ClusterProvider")
	fs.BoolVar(&c.verbose, "v", false, "log the controllers in detail (to the log file)")
	fs.StringVar(&c.metricsAddress, "metrics-address", "", "serve the providers' and controller-runtime's metrics at http://ADDRESS/metrics, as each manager's metrics endpoint serves its own (e.g. 127.0.0.1:8080; empty: not served)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.replicas < 0 {
		return c, fmt.Errorf("--replicas must not be negative")
	}
	return c, nil
}

// run runs the sandbox until ctx is done, or with --once until the pool has
// joined. An interruption (ctx done) is a clean stop, not an error.
func run(ctx context.Context, args []string, out io.Writer) error {
	err := sandbox(ctx, args, out)
	if ctx.Err() != nil {
		return nil //nolint:nilerr // An interruption is a clean stop, whatever it cut short.
	}
	return err
}

func sandbox(ctx context.Context, args []string, out io.Writer) (rerr error) {
	c, err := parseFlags(args, out)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(c.dir, "controllers.log")
	logFile, err := os.Create(logPath) //nolint:gosec // The log in the sandbox's own directory.
	if err != nil {
		return err
	}
	defer func() { rerr = errors.Join(rerr, logFile.Close()) }()
	log := fileLogger(logFile, c.verbose)
	klog.SetLogger(log)

	start := time.Now()
	fmt.Fprintf(out, "Starting the management cluster, Cluster API, both providers, KubeVirt's virt-api and virt-controller, and the node, CDI and guest stand-ins\n")
	fmt.Fprintf(out, "  (a first run builds kube-apiserver, etcd, kube-controller-manager, kubeadm, virt-api and virt-controller from source: about 9 minutes on two cores, 2026-12-03)\n")
	fmt.Fprintf(out, "  controller logs: %s\n", logPath)
	if c.metricsAddress != "" {
		stop, err := serveMetrics(ctx, c.metricsAddress, out)
		if err != nil {
			return err
		}
		defer stop()
	}
	h, err := harness.Start(ctx, harness.Options{
		Logger:        log,
		WorkerClasses: true,
		Images:        map[string]nodesim.Image{kairosImage: {KubernetesVersion: harness.ControlPlaneKubernetesVersion, OSImage: kairosOSImage}},
		// Slow enough to watch, fast enough to wait for.
		Infra: infra.Options{Hosts: kubevirtsim.Options{ScheduleDelay: time.Second, BootDelay: 3 * time.Second}},
	})
	if err != nil {
		return fmt.Errorf("starting the sandbox: %w", err)
	}
	defer func() {
		fmt.Fprintln(out, "Stopping the sandbox")
		rerr = errors.Join(rerr, h.Stop())
	}()

	// What the hoster configures once: the exact patch and the Kairos disk
	// for the Kubernetes minor pools select.
	if err := h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: kubernetesMinor, Patch: harness.ControlPlaneKubernetesVersion}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: kubernetesMinor, Reference: kairosImage}}
	}); err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: c.namespace, Name: c.cluster}
	w, err := h.CreateCluster(ctx, key, harness.ClusterOptions{})
	if err != nil {
		return err
	}
	management, tenant := filepath.Join(c.dir, "management.kubeconfig"), filepath.Join(c.dir, c.cluster+".kubeconfig")
	if err := envtest.WriteKubeconfig(management, "sandbox-management", h.Config()); err != nil {
		return err
	}
	if err := envtest.WriteKubeconfig(tenant, c.cluster, w.API.Config); err != nil {
		return err
	}
	fmt.Fprintf(out, "Cluster %s is up (%s); its control plane is %s\n", key, time.Since(start).Round(time.Second), w.Endpoint)

	vars := map[string]string{
		"CLUSTER_NAME":         c.cluster,
		"NAMESPACE":            c.namespace,
		"WORKER_MACHINE_COUNT": fmt.Sprint(c.replicas),
		"KUBERNETES_VERSION":   harness.ControlPlaneKubernetesVersion,
		"KUBERNETES_MINOR":     kubernetesMinor,
	}
	for k, v := range c.vars {
		vars[k] = v
	}
	objs, err := harness.RenderTemplate(harness.KairosPoolTemplate(), vars)
	if err != nil {
		return err
	}
	if err := h.Apply(ctx, objs); err != nil {
		return err
	}
	fmt.Fprintf(out, "Applied the example Kairos pool (templates/cluster-template-kairos.yaml) with %d machines\n", c.replicas)
	fmt.Fprintf(out, "Look around with:\n  kubectl --kubeconfig %s get machines,kubevirtmachines,virtualmachines -n %s\n  clusterctl describe cluster %s -n %s --kubeconfig %s\n  kubectl --kubeconfig %s get nodes\n",
		management, c.namespace, c.cluster, c.namespace, management, tenant)

	watchCtx := ctx
	if c.once {
		var cancel context.CancelFunc
		watchCtx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	joined, err := watch(watchCtx, h, key, c.once, out)
	switch {
	case c.once && !joined && ctx.Err() == nil:
		return fmt.Errorf("the pool did not join within %s:\n%s", c.timeout, h.Describe(context.Background(), key))
	case err != nil && ctx.Err() == nil:
		return err
	}
	if c.once {
		fmt.Fprintf(out, "The pool joined in %s\n", time.Since(start).Round(time.Second))
	}
	return nil
}

// serveMetrics serves controller-runtime's metrics.Registry, where every
// manager of the sandbox (one process) and both providers register theirs,
// at http://address/metrics, without the authentication the managers'
// endpoints have in a cluster.
func serveMetrics(ctx context.Context, address string, out io.Writer) (stop func(), _ error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("serving the metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(out, "  metrics: http://%s/metrics\n", ln.Addr())
	return func() { _ = srv.Close() }, nil
}

// watch prints the machines by phase whenever that changes, and a table of
// the pool once it has joined. With once it returns when the pool joined;
// otherwise when ctx is done.
func watch(ctx context.Context, h *harness.Harness, key client.ObjectKey, once bool, out io.Writer) (bool, error) {
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last, joined := "", false
	for {
		s, err := h.State(ctx, key)
		if err != nil && ctx.Err() == nil {
			return joined, err
		}
		want, err := desiredReplicas(ctx, h, key)
		if err != nil && ctx.Err() == nil {
			return joined, err
		}
		if summary := s.Summary(); summary != last {
			fmt.Fprintf(out, "[%4ds] %s\n", int(time.Since(start).Seconds()), summary)
			last = summary
		}
		now := s.Joined(want)
		if now && !joined {
			printPool(out, s)
			if once {
				return true, nil
			}
			fmt.Fprintln(out, "The pool has joined. Scale it, delete machines or the Cluster with kubectl and watch here; Ctrl-C stops the sandbox.")
		}
		joined = now
		select {
		case <-ctx.Done():
			return joined, nil
		case <-tick.C:
		}
		if err := h.Err(); err != nil {
			return joined, err
		}
	}
}

// desiredReplicas is what the pool's MachineDeployment asks for now, so a
// pool scaled with kubectl is followed.
func desiredReplicas(ctx context.Context, h *harness.Harness, key client.ObjectKey) (int, error) {
	list := &clusterv1.MachineDeploymentList{}
	if err := h.Client.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: key.Name}); err != nil {
		return 0, err
	}
	n := 0
	for _, md := range list.Items {
		n += int(ptr.Deref(md.Spec.Replicas, 0))
	}
	return n, nil
}

func printPool(out io.Writer, s harness.PoolState) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tPHASE\tNODE\tPROVIDER ID\tKUBELET")
	kubelets := map[string]string{}
	for _, n := range s.Nodes {
		kubelets[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	for _, m := range s.Machines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.Status.Phase, m.Status.NodeRef.Name, m.Spec.ProviderID, kubelets[m.Status.NodeRef.Name])
	}
	_ = tw.Flush()
}

// fileLogger logs the controllers, with timestamps, to a file.
func fileLogger(w io.Writer, verbose bool) logr.Logger {
	var mu sync.Mutex
	verbosity := 0
	if verbose {
		verbosity = 4
	}
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, prefix, args)
	}, funcr.Options{LogTimestamp: true, Verbosity: verbosity})
}
