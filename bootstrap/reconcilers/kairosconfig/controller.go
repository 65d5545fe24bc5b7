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

package kairosconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/cloudconfig"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/clustersecrets"
	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
)

// ProviderIDPrefix is the providerID scheme of the KubeVirt provider: the
// kubelet registers kubevirt://<infrastructure machine name>.
const ProviderIDPrefix = "kubevirt://"

// Requeue intervals for waits that no watch ends.
const (
	waitForInfrastructureInterval = 10 * time.Second
	waitForFileSourceInterval     = 10 * time.Second
	waitForWorkloadInterval       = 15 * time.Second
)

// Writes go through Cluster API's patch helper, which patches and never
// updates; finalizers/update is what our Secrets' owner references
// (blockOwnerDeletion) need where OwnerReferencesPermissionEnforcement
// admits them.
// +kubebuilder:rbac:groups=bootstrap.cozystack.io,resources=kairosconfigs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bootstrap.cozystack.io,resources=kairosconfigs/status,verbs=patch
// +kubebuilder:rbac:groups=bootstrap.cozystack.io,resources=kairosconfigs/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machines,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cozystack.io,resources=kubevirtmachines;kubevirtmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=*,verbs=get;list;watch

// Reconciler reconciles KairosConfigs.
type Reconciler struct {
	// Client reads management objects from the cache (infrastructure
	// objects and templates of any provider as unstructured) and writes
	// them; it reads Secrets directly.
	Client client.Client
	// SecretCachingClient reads cluster-labelled Secrets (the cluster CA,
	// our token records) from the cache.
	SecretCachingClient client.Client
	// APIReader reads what the cache cannot be trusted with: a Secret that
	// already exists although the cache has not seen it, and the token
	// record before the finalizer goes.
	APIReader client.Reader
	// ClusterCache gives clients and watches for workload clusters.
	ClusterCache clustercache.ClusterCache
	// WatchFilterValue, when set, limits reconciliation to objects with the
	// cluster.x-k8s.io/watch-filter label of that value.
	WatchFilterValue string
	// TokenTTL is the bootstrap token lifetime between refreshes.
	TokenTTL time.Duration

	controller controller.Controller
	// templates adds a watch per infrastructure template kind, the first
	// time a config waits for a template of that kind to resolve.
	templates *external.ObjectTracker
	now       func() time.Time
	expect    *expectations
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.SecretCachingClient == nil || r.APIReader == nil || r.ClusterCache == nil {
		return errors.New("kairosconfig reconciler: Client, SecretCachingClient, APIReader and ClusterCache are required")
	}
	if r.TokenTTL <= 0 {
		r.TokenTTL = DefaultTokenTTL
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.expect = newExpectations()
	if err := indexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the kairosconfig controller: %w", err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "kairosconfig")
	c, err := capicontrollerutil.NewControllerManagedBy(mgr, log).
		For(&bootstrapv1.KairosConfig{}).
		Named("kairosconfig").
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToKairosConfig)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToKairosConfigs)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretToKairosConfigs)).
		WatchesRawSource(r.ClusterCache.GetClusterSource("kairosconfig", r.clusterToKairosConfigs)).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Build(ctx, r)
	if err != nil {
		return fmt.Errorf("setting up the kairosconfig controller: %w", err)
	}
	r.controller = c
	r.templates = &external.ObjectTracker{Controller: c, Cache: mgr.GetCache(), Scheme: mgr.GetScheme(), PredicateLogger: &log}
	return nil
}

// scope is what one reconcile works on.
type scope struct {
	config  *bootstrapv1.KairosConfig
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
}

// Reconcile brings one KairosConfig closer to having bootstrap data and,
// afterwards, keeps its token alive until the node joins.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	log := ctrl.LoggerFrom(ctx)
	config := &bootstrapv1.KairosConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, config); err != nil {
		if apierrors.IsNotFound(err) {
			r.expect.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.expect.CacheBehind(req.NamespacedName, config.ResourceVersion) {
		// The event of our last write will reconcile the config again.
		log.V(4).Info("The cache has not seen the last write to the KairosConfig yet, waiting")
		return ctrl.Result{}, nil
	}

	machine, machineGone, err := r.ownerMachine(ctx, config)
	if err != nil {
		return ctrl.Result{}, err
	}
	if machine == nil && !machineGone {
		log.V(4).Info("KairosConfig has no owner Machine yet, waiting")
		return ctrl.Result{}, nil
	}
	clusterName := config.Labels[clusterv1.ClusterNameLabel]
	if machine != nil {
		clusterName = machine.Spec.ClusterName
		log = log.WithValues("Machine", klog.KObj(machine))
	}
	log = log.WithValues("Cluster", klog.KRef(config.Namespace, clusterName))
	ctx = ctrl.LoggerInto(ctx, log)

	cluster, err := util.GetClusterByName(ctx, r.Client, config.Namespace, clusterName)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if !config.DeletionTimestamp.IsZero() || machineGone {
			// Without a Cluster there is no workload cluster left to hold a
			// token, so nothing can leak.
			t, found, err := r.liveStoredToken(ctx, config)
			if err != nil {
				return ctrl.Result{}, err
			}
			if found {
				if err := r.forgetToken(ctx, config, t); err != nil {
					return ctrl.Result{}, err
				}
			}
			return ctrl.Result{}, r.removeFinalizer(ctx, config)
		}
		log.Info("Cluster does not exist yet, waiting")
		return ctrl.Result{}, r.markClusterMissing(ctx, config, clusterName)
	}

	// Our writes to the config go through writes, so that a reconcile on a
	// cache that has not seen them yet can be told apart.
	before, writes := config.ResourceVersion, ownwrites.NewRecorder(r.Client)
	if added, err := finalizers.EnsureFinalizer(ctx, writes, config, bootstrapv1.ConfigFinalizer); err != nil || added {
		r.expect.Wrote(req.NamespacedName, before, writes.Written())
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(config, writes)
	if err != nil {
		return ctrl.Result{}, err
	}
	if annotations.IsPaused(cluster, config) {
		// Record that, and nothing else, as Cluster API's controllers do.
		_, _, err := paused.EnsurePausedCondition(ctx, writes, cluster, config)
		r.expect.Wrote(req.NamespacedName, before, writes.Written())
		return ctrl.Result{}, err
	}
	// Not paused: the condition goes out with this reconcile's patch rather
	// than a patch of its own (one write fewer per Machine).
	conditions.Set(config, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
	s := &scope{config: config, machine: machine, cluster: cluster}
	defer func() {
		if err := r.patch(ctx, patchHelper, config, rerr == nil); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
		}
		r.expect.Wrote(req.NamespacedName, before, writes.Written())
	}()

	if !config.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if machineGone || !machine.DeletionTimestamp.IsZero() {
		// The Machine is going: its token must not outlive it.
		return r.revokeToken(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func (r *Reconciler) patch(ctx context.Context, h *patch.Helper, config *bootstrapv1.KairosConfig, observed bool) error {
	if err := conditions.SetSummaryCondition(config, config, bootstrapv1.ReadyCondition,
		conditions.ForConditionTypes{bootstrapv1.DataSecretAvailableCondition},
		conditions.CustomMergeStrategy{MergeStrategy: conditions.DefaultMergeStrategy(
			conditions.ComputeReasonFunc(conditions.GetDefaultComputeMergeReasonFunc(
				bootstrapv1.NotReadyReason, bootstrapv1.ReadyUnknownReason, bootstrapv1.ReadyReason)),
		)},
	); err != nil {
		return err
	}
	opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
		clusterv1.PausedCondition, bootstrapv1.ReadyCondition, bootstrapv1.DataSecretAvailableCondition,
	}}}
	if observed {
		opts = append(opts, patch.WithStatusObservedGeneration{})
	}
	return h.Patch(ctx, config, opts...)
}

// markClusterMissing says on the config that its Cluster does not exist,
// once: the Cluster watch reconciles the config when it appears. No token
// is made for a Cluster that does not exist.
func (r *Reconciler) markClusterMissing(ctx context.Context, config *bootstrapv1.KairosConfig, clusterName string) error {
	// Only a config with a live Machine gets here, and a Machine always
	// names its Cluster (spec.clusterName is required).
	message := fmt.Sprintf("Cluster %s does not exist", klog.KRef(config.Namespace, clusterName))
	if c := conditions.Get(config, bootstrapv1.DataSecretAvailableCondition); c != nil && c.Reason == bootstrapv1.WaitingForClusterReason && c.Message == message {
		return nil
	}
	key, before, writes := client.ObjectKeyFromObject(config), config.ResourceVersion, ownwrites.NewRecorder(r.Client)
	defer func() { r.expect.Wrote(key, before, writes.Written()) }()
	h, err := patch.NewHelper(config, writes)
	if err != nil {
		return err
	}
	markWaiting(config, bootstrapv1.WaitingForClusterReason, message)
	return r.patch(ctx, h, config, false)
}

// ownerMachine returns the owning Machine; machineGone is true when the
// config names a Machine owner that no longer exists.
func (r *Reconciler) ownerMachine(ctx context.Context, config *bootstrapv1.KairosConfig) (machine *clusterv1.Machine, machineGone bool, err error) {
	machine, err = util.GetOwnerMachine(ctx, r.Client, config.ObjectMeta)
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the owner Machine: %w", err)
	}
	return machine, false, nil
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	config, machine := s.config, s.machine

	// A restored or moved config (status is not moved) whose Machine already
	// points at our Secret: take the Secret over instead of rendering anew.
	if name := ptr.Deref(machine.Spec.Bootstrap.DataSecretName, ""); name != "" && !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
		config.Status.DataSecretName = name
		config.Status.Initialization.DataSecretCreated = ptr.To(true)
	}

	if ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
		markAvailable(config)
		joined, err := r.nodeJoined(ctx, s)
		if err != nil {
			return r.workloadUnavailable(ctx, s, err)
		}
		if joined {
			return r.revokeToken(ctx, s)
		}
		stored, found, err := r.storedToken(ctx, config)
		if err != nil {
			return ctrl.Result{}, err
		}
		if found {
			return r.keepTokenAlive(ctx, s, stored)
		}
		// The token is gone while the node has not joined (restored config,
		// or a Secret deleted by hand): render again with a new token.
	}
	return r.render(ctx, s)
}

// render waits for everything the join needs, ensures the token and writes
// the bootstrap data Secret.
func (r *Reconciler) render(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	config, machine, cluster := s.config, s.machine, s.cluster

	switch {
	case !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false):
		markWaiting(config, bootstrapv1.WaitingForClusterInfrastructureReason, "Waiting for the Cluster's infrastructure to be provisioned")
		return ctrl.Result{}, nil
	case !controlPlaneInitialized(cluster):
		markWaiting(config, bootstrapv1.WaitingForControlPlaneInitializedReason, "Waiting for the Cluster's control plane to be initialized")
		return ctrl.Result{}, nil
	case !cluster.Spec.ControlPlaneEndpoint.IsValid():
		markWaiting(config, bootstrapv1.WaitingForControlPlaneEndpointReason, "Waiting for Cluster spec.controlPlaneEndpoint to be set")
		return ctrl.Result{}, nil
	case machine.Spec.InfrastructureRef.Name == "":
		markWaiting(config, bootstrapv1.WaitingForInfrastructureNameReason, "Waiting for Machine spec.infrastructureRef.name, which names the VM, its hostname and providerID")
		return ctrl.Result{}, nil
	}

	hashes, err := r.clusterCAHashes(ctx, cluster)
	if err != nil {
		if errors.Is(err, errClusterCAMissing) {
			markWaiting(config, bootstrapv1.WaitingForClusterCAReason, fmt.Sprintf("Waiting for the cluster CA Secret %s with a certificate", secret.Name(cluster.Name, secret.ClusterCA)))
			return ctrl.Result{}, nil
		}
		markInternalError(config)
		return ctrl.Result{}, err
	}

	template, err := infrastructureTemplate(ctx, r.Client, machine)
	if err != nil {
		if errors.Is(err, errInfrastructureNotFound) {
			markWaiting(config, bootstrapv1.WaitingForInfrastructureReason,
				fmt.Sprintf("Waiting for %s %s to exist to check the image's WorkerClass and Kubernetes version", machine.Spec.InfrastructureRef.Kind, machine.Spec.InfrastructureRef.Name))
			return ctrl.Result{RequeueAfter: waitForInfrastructureInterval}, nil
		}
		markInternalError(config)
		return ctrl.Result{}, err
	}
	if template != nil {
		if blocked, err := r.checkTemplate(ctx, s, template); blocked || err != nil {
			return ctrl.Result{}, err
		}
	}
	files, err := r.resolveFiles(ctx, config, cluster.Name)
	if err != nil {
		var forbidden *forbiddenFileSourceError
		if errors.As(err, &forbidden) {
			markWaiting(config, bootstrapv1.FileSourceForbiddenReason, forbidden.Error())
			return ctrl.Result{}, nil
		}
		var missing *fileSourceError
		if errors.As(err, &missing) {
			markWaiting(config, bootstrapv1.FileSourceNotAvailableReason, missing.Error())
			return ctrl.Result{RequeueAfter: waitForFileSourceInterval}, nil
		}
		markInternalError(config)
		return ctrl.Result{}, err
	}

	// A token is minted only for data a Secret can hold: measured with a
	// placeholder of a token's length, which is all the token changes.
	if size, err := renderedSize(s, hashes, files); err != nil {
		markInternalError(config)
		return ctrl.Result{}, fmt.Errorf("rendering the cloud-config: %w", err)
	} else if size > corev1.MaxSecretSize {
		markWaiting(config, bootstrapv1.BootstrapDataTooLargeReason, fmt.Sprintf(
			"The rendered bootstrap data is %d bytes and a Secret holds at most %d: shrink spec.files", size, corev1.MaxSecretSize))
		return ctrl.Result{}, nil
	}

	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(cluster))
	if err != nil {
		return r.workloadUnavailable(ctx, s, err)
	}
	t, err := r.ensureToken(ctx, s, remote)
	if err != nil {
		markInternalError(config)
		return ctrl.Result{}, err
	}

	data, err := cloudconfig.Render(renderInput(s, t, hashes, files))
	if err != nil {
		markInternalError(config)
		return ctrl.Result{}, fmt.Errorf("rendering the cloud-config: %w", err)
	}
	if err := r.storeBootstrapData(ctx, s, data); err != nil {
		markInternalError(config)
		return ctrl.Result{}, err
	}
	log.Info("Wrote the bootstrap data", "Secret", klog.KRef(config.Namespace, config.Name), "joinMode", joinMode(config))
	config.Status.DataSecretName = config.Name
	config.Status.Initialization.DataSecretCreated = ptr.To(true)
	markAvailable(config)
	if err := r.watchNodes(ctx, cluster); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: refreshInterval(r.TokenTTL)}, nil
}

// renderedSize is the size of the bootstrap data Secret's data for s, with
// a placeholder token of a real token's length.
func renderedSize(s *scope, hashes []string, files []cloudconfig.File) (int, error) {
	placeholder := token{ID: strings.Repeat("0", 6), Secret: strings.Repeat("0", 16)}
	data, err := cloudconfig.Render(renderInput(s, placeholder, hashes, files))
	return len(data) + len(bootstrapv1.DataFormatCloudConfig), err
}

func controlPlaneInitialized(cluster *clusterv1.Cluster) bool {
	return ptr.Deref(cluster.Status.Initialization.ControlPlaneInitialized, false) ||
		conditions.IsTrue(cluster, clusterv1.ClusterControlPlaneInitializedCondition)
}

func joinMode(config *bootstrapv1.KairosConfig) bootstrapv1.JoinMode {
	if config.Spec.JoinMode == "" {
		return bootstrapv1.JoinModeStages
	}
	return config.Spec.JoinMode
}

func renderInput(s *scope, t token, hashes []string, files []cloudconfig.File) cloudconfig.Input {
	spec := s.config.Spec
	vm := s.machine.Spec.InfrastructureRef.Name
	in := cloudconfig.Input{
		Mode:              joinMode(s.config),
		Hostname:          vm,
		ProviderID:        ProviderIDPrefix + vm,
		APIServerEndpoint: s.cluster.Spec.ControlPlaneEndpoint.String(),
		CACertHashes:      hashes,
		Token:             t.String(),
		ClusterToken:      string(s.cluster.UID),
		NodeLabels:        spec.NodeLabels,
		Files:             files,
		Timeouts: cloudconfig.Timeouts{
			Discovery:          seconds(spec.JoinTimeouts.DiscoverySeconds),
			TLSBootstrap:       seconds(spec.JoinTimeouts.TLSBootstrapSeconds),
			KubeletHealthCheck: seconds(spec.JoinTimeouts.KubeletHealthCheckSeconds),
			KubernetesAPICall:  seconds(spec.JoinTimeouts.KubernetesAPICallSeconds),
		},
	}
	if len(spec.SSHKeys) > 0 {
		in.SSHAuthorizedKey = strings.TrimSpace(spec.SSHKeys[0])
	}
	for _, t := range spec.NodeTaints {
		in.NodeTaints = append(in.NodeTaints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	for _, a := range spec.KubeletExtraArgs {
		in.KubeletExtraArgs = append(in.KubeletExtraArgs, cloudconfig.Arg{Name: a.Name, Value: a.Value})
	}
	return in
}

func seconds(s *int32) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s) * time.Second
}

var errClusterCAMissing = errors.New("the cluster CA Secret is missing or has no certificate")

// clusterCAHashes pins the cluster CA from the <cluster>-ca Secret. Only
// the certificate is needed: a worker never signs anything with the key.
func (r *Reconciler) clusterCAHashes(ctx context.Context, cluster *clusterv1.Cluster) ([]string, error) {
	s, err := secret.GetFromNamespacedName(ctx, r.SecretCachingClient, util.ObjectKey(cluster), secret.ClusterCA)
	if apierrors.IsNotFound(err) {
		return nil, errClusterCAMissing
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA Secret: %w", err)
	}
	crt := s.Data[secret.TLSCrtDataName]
	if len(crt) == 0 {
		return nil, errClusterCAMissing
	}
	ca := &secret.Certificate{Purpose: secret.ClusterCA, KeyPair: &certs.KeyPair{Cert: crt}}
	hashes, err := ca.Hashes()
	if err != nil {
		return nil, fmt.Errorf("pinning the cluster CA: %w", err)
	}
	if len(hashes) == 0 {
		return nil, errClusterCAMissing
	}
	return hashes, nil
}

// fileSourceError names a missing contentFrom Secret or key.
type fileSourceError struct{ msg string }

func (e *fileSourceError) Error() string { return e.msg }

// forbiddenFileSourceError names a contentFrom Secret of Cluster API's own.
type forbiddenFileSourceError struct{ msg string }

func (e *forbiddenFileSourceError) Error() string { return e.msg }

func (r *Reconciler) resolveFiles(ctx context.Context, config *bootstrapv1.KairosConfig, clusterName string) ([]cloudconfig.File, error) {
	files := make([]cloudconfig.File, 0, len(config.Spec.Files))
	for i, f := range config.Spec.Files {
		out := cloudconfig.File{Path: f.Path, Owner: f.Owner}
		fromSecret := f.ContentFrom.Secret.Name != ""
		perm, err := filePermissions(f.Permissions, fromSecret)
		if err != nil {
			return nil, fmt.Errorf("spec.files[%d].permissions: %w", i, err)
		}
		out.Permissions = perm
		if fromSecret {
			src := &corev1.Secret{}
			key := client.ObjectKey{Namespace: config.Namespace, Name: f.ContentFrom.Secret.Name}
			if err := r.Client.Get(ctx, key, src); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, &fileSourceError{msg: fmt.Sprintf("spec.files[%d].contentFrom.secret: Secret %s not found", i, key.Name)}
				}
				return nil, fmt.Errorf("reading spec.files[%d].contentFrom.secret %s: %w", i, key.Name, err)
			}
			if clustersecrets.Is(clusterName, src) {
				return nil, &forbiddenFileSourceError{msg: fmt.Sprintf("spec.files[%d].contentFrom.secret: Secret %s is one of Cluster API's own Secrets of the cluster and is never copied into a worker", i, key.Name)}
			}
			content, ok := src.Data[f.ContentFrom.Secret.Key]
			if !ok {
				return nil, &fileSourceError{msg: fmt.Sprintf("spec.files[%d].contentFrom.secret: Secret %s has no key %s", i, key.Name, f.ContentFrom.Secret.Key)}
			}
			out.Content = content
		} else {
			out.Content = []byte(f.Content)
		}
		files = append(files, out)
	}
	return files, nil
}

// filePermissions parses an octal mode; content from a Secret defaults to
// 0600, inline content to 0644.
func filePermissions(s string, fromSecret bool) (uint32, error) {
	if s == "" {
		if fromSecret {
			return 0o600, nil
		}
		return 0o644, nil
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode", s)
	}
	return uint32(v), nil
}

// checkTemplate checks the infrastructure machine template against the
// Machine before anything is rendered: its WorkerClass must boot Kairos,
// and its image's Kubernetes version must match the Machine's. blocked
// means the condition says why nothing is rendered. A template's
// resolution is frozen once written, so a refusal is final: it is not
// requeued (a new template means new Machines with new configs).
func (r *Reconciler) checkTemplate(ctx context.Context, s *scope, template *unstructured.Unstructured) (blocked bool, _ error) {
	log := ctrl.LoggerFrom(ctx)
	config, machine := s.config, s.machine
	class, err := templateClassFrom(template)
	if err != nil {
		markInternalError(config)
		return true, err
	}
	if class.awaitingResolution() {
		// The template's resolution reconciles the config again.
		if err := r.watchTemplates(ctx, template); err != nil {
			markInternalError(config)
			return true, err
		}
		markWaiting(config, bootstrapv1.WaitingForInfrastructureTemplateReason, class.waitingMessage())
		return true, nil
	}
	if mismatch := class.familyMismatch(); mismatch != "" {
		log.Info("Not rendering bootstrap data: the infrastructure template's WorkerClass does not boot Kairos",
			"template", class.Source, "workerClass", class.WorkerClass, "bootstrap", class.Bootstrap)
		markWaiting(config, bootstrapv1.BootstrapFamilyMismatchReason, mismatch)
		return true, nil
	}

	if machine.Spec.Version == "" {
		return false, nil
	}
	image, err := imageVersionFrom(template)
	if err != nil {
		markInternalError(config)
		return true, err
	}
	if image == nil {
		return false, nil
	}
	mismatch, err := checkVersion(machine.Spec.Version, *image)
	if err != nil {
		markWaiting(config, bootstrapv1.KubernetesVersionMismatchReason, err.Error())
		return true, nil
	}
	if mismatch != "" {
		log.Info("Not rendering bootstrap data: Kubernetes version mismatch", "machineVersion", machine.Spec.Version, "imageVersion", image.Version, "match", image.Match)
		markWaiting(config, bootstrapv1.KubernetesVersionMismatchReason, mismatch)
		return true, nil
	}
	return false, nil
}

// storedToken reads the token kept in our management Secret, from the
// cache.
func (r *Reconciler) storedToken(ctx context.Context, config *bootstrapv1.KairosConfig) (token, bool, error) {
	t, found, err := readStoredToken(ctx, r.SecretCachingClient, config)
	if errors.Is(err, errNoSecretData) {
		// A cache that drops Secret data (not set up with
		// SecretCacheOptions): correct, but every reconcile reads.
		t, found, err = r.liveStoredToken(ctx, config)
	}
	if err != nil {
		return token{}, false, err
	}
	key := client.ObjectKeyFromObject(config)
	if !found {
		r.expect.tokenRecordGone(key)
		return token{}, false, nil
	}
	if r.expect.tokenRevoked(key, t.ID) {
		// Deleted by us; the cache has not seen the deletion yet.
		return token{}, false, nil
	}
	return t, true, nil
}

// liveStoredToken reads the token kept in our management Secret from the
// API server.
func (r *Reconciler) liveStoredToken(ctx context.Context, config *bootstrapv1.KairosConfig) (token, bool, error) {
	t, found, err := readStoredToken(ctx, r.APIReader, config)
	if errors.Is(err, errNoSecretData) {
		return token{}, false, nil
	}
	return t, found, err
}

// errNoSecretData means a Secret was read without any data.
var errNoSecretData = errors.New("the Secret was read without data")

// readStoredToken reads the token kept in our management Secret through
// reader.
func readStoredToken(ctx context.Context, reader client.Reader, config *bootstrapv1.KairosConfig) (token, bool, error) {
	s := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: tokenSecretName(config.Name)}, s)
	if apierrors.IsNotFound(err) {
		return token{}, false, nil
	}
	if err != nil {
		return token{}, false, fmt.Errorf("reading the token Secret: %w", err)
	}
	if !util.IsControlledBy(s, config, bootstrapv1.GroupVersion.WithKind("KairosConfig").GroupKind()) {
		return token{}, false, fmt.Errorf("the Secret %s exists but is not controlled by this KairosConfig", s.Name)
	}
	if s.Data == nil {
		return token{}, false, errNoSecretData
	}
	return readTokenSecret(s)
}

// ensureToken returns the Machine's token, creating it when there is none.
// The token is stored in our management Secret before it is created in the
// workload cluster, so a restart in between never mints a second token and
// never loses track of one. A record the cache has not seen yet makes the
// create fail, and the record is then read directly.
func (r *Reconciler) ensureToken(ctx context.Context, s *scope, remote client.Client) (token, error) {
	t, found, err := r.storedToken(ctx, s.config)
	if err != nil {
		return token{}, err
	}
	if found {
		// A record from an earlier attempt: the workload token may or may
		// not exist yet, so look.
		return r.syncWorkloadToken(ctx, s, remote, t)
	}
	if t, err = newToken(r.now(), r.TokenTTL); err != nil {
		return token{}, err
	}
	err = r.Client.Create(ctx, managementTokenSecret(s.config, s.cluster.Name, t))
	if apierrors.IsAlreadyExists(err) {
		stored, found, err := r.liveStoredToken(ctx, s.config)
		if err != nil {
			return token{}, err
		}
		if !found {
			return token{}, fmt.Errorf("the token Secret %s exists but holds no token", tokenSecretName(s.config.Name))
		}
		return r.syncWorkloadToken(ctx, s, remote, stored)
	}
	if err != nil {
		return token{}, fmt.Errorf("storing the bootstrap token: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Created a bootstrap token", "tokenID", t.ID, "expiration", t.Expiration)
	created, err := createWorkloadToken(ctx, remote, s.config, t)
	if err != nil {
		return token{}, err
	}
	if !created {
		// Another token with this ID: only reuse it if it is ours.
		return r.syncWorkloadToken(ctx, s, remote, t)
	}
	return t, nil
}

// syncWorkloadToken reads the workload token, creates or extends it, and
// records the new expiry in our Secret. Only used when it is not known
// whether the workload token exists.
func (r *Reconciler) syncWorkloadToken(ctx context.Context, s *scope, remote client.Client, t token) (token, error) {
	updated, err := ensureWorkloadToken(ctx, remote, s.config, t, r.now(), r.TokenTTL)
	if err != nil {
		return token{}, err
	}
	return updated, r.recordExpiration(ctx, s, t, updated)
}

// recordExpiration writes a token's new expiry to our Secret.
func (r *Reconciler) recordExpiration(ctx context.Context, s *scope, before, after token) error {
	if after.Expiration.Equal(before.Expiration) {
		return nil
	}
	if err := r.Client.Update(ctx, managementTokenSecret(s.config, s.cluster.Name, after)); err != nil {
		return fmt.Errorf("recording the token expiration: %w", err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Extended the bootstrap token", "tokenID", after.ID, "expiration", after.Expiration)
	return nil
}

// keepTokenAlive refreshes the token while the node has not joined. The
// expiry our Secret records is the workload token's, so nothing is read
// from the workload cluster: the token is extended (or created again, if
// it vanished) once a third of its TTL has passed.
func (r *Reconciler) keepTokenAlive(ctx context.Context, s *scope, t token) (ctrl.Result, error) {
	if err := r.watchNodes(ctx, s.cluster); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	if !t.Expiration.IsZero() && !needsRefresh(t.Expiration, now, r.TokenTTL) {
		return ctrl.Result{RequeueAfter: refreshInterval(r.TokenTTL)}, nil
	}
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return r.workloadUnavailable(ctx, s, err)
	}
	extended, err := extendWorkloadToken(ctx, remote, s.config, t, now, r.TokenTTL)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.recordExpiration(ctx, s, t, extended); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: refreshInterval(r.TokenTTL)}, nil
}

// nodeJoined reports whether the Machine's node has registered: Cluster API
// set the nodeRef, or a Node named after the VM with our providerID exists.
func (r *Reconciler) nodeJoined(ctx context.Context, s *scope) (bool, error) {
	if s.machine.Status.NodeRef.IsDefined() {
		return true, nil
	}
	vm := s.machine.Spec.InfrastructureRef.Name
	if vm == "" {
		return false, nil
	}
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return false, err
	}
	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: vm}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading Node %s in the workload cluster: %w", vm, err)
	}
	return node.Spec.ProviderID == ProviderIDPrefix+vm, nil
}

// revokeToken deletes the workload token, then our record of it. When the
// workload cluster cannot be reached the record stays, and the attempt is
// repeated, until the token would have expired anyway.
func (r *Reconciler) revokeToken(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, found, err := r.storedToken(ctx, s.config)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	return r.revoke(ctx, s, t)
}

// revoke revokes t; a zero result without error means our record is gone.
func (r *Reconciler) revoke(ctx context.Context, s *scope, t token) (ctrl.Result, error) {
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		if !t.Expiration.IsZero() && r.now().After(t.Expiration) {
			ctrl.LoggerFrom(ctx).Info("Workload cluster unreachable; the bootstrap token has expired, forgetting it", "tokenID", t.ID)
			if err := r.forgetToken(ctx, s.config, t); err != nil {
				return ctrl.Result{}, err
			}
			r.expect.revokedToken(client.ObjectKeyFromObject(s.config), t.ID)
			return ctrl.Result{}, nil
		}
		ctrl.LoggerFrom(ctx).Info("Workload cluster unreachable; will retry revoking the bootstrap token", "tokenID", t.ID, "expiration", t.Expiration)
		return ctrl.Result{RequeueAfter: waitForWorkloadInterval}, nil
	}
	if err := deleteWorkloadToken(ctx, remote, t); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Revoked the bootstrap token", "tokenID", t.ID)
	if err := r.forgetToken(ctx, s.config, t); err != nil {
		return ctrl.Result{}, err
	}
	r.expect.revokedToken(client.ObjectKeyFromObject(s.config), t.ID)
	return ctrl.Result{}, nil
}

// forgetToken deletes our record of t, only while the record is the Secret
// t was read from: a record made again since (a new token for the same
// config) is not ours to drop, or its token would leak untracked.
func (r *Reconciler) forgetToken(ctx context.Context, config *bootstrapv1.KairosConfig, t token) error {
	if t.recordUID == "" {
		return fmt.Errorf("bootstrap token %s has no record to forget", t.ID)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: tokenSecretName(config.Name)}}
	err := r.Client.Delete(ctx, s, client.Preconditions{UID: &t.recordUID})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		ctrl.LoggerFrom(ctx).Info("The token Secret was replaced since it was read; keeping the new record", "tokenID", t.ID)
		return nil
	case err != nil:
		return fmt.Errorf("deleting the token Secret: %w", err)
	}
	return nil
}

// removeFinalizer drops the finalizer of a config being deleted, outside
// the patch helper (used where there is no Cluster to patch against).
func (r *Reconciler) removeFinalizer(ctx context.Context, config *bootstrapv1.KairosConfig) error {
	if config.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(config, bootstrapv1.ConfigFinalizer) {
		return nil
	}
	original := config.DeepCopy()
	controllerutil.RemoveFinalizer(config, bootstrapv1.ConfigFinalizer)
	if err := r.Client.Patch(ctx, config, client.MergeFrom(original)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	return nil
}

// reconcileDelete revokes the token before the finalizer goes. The record
// is read directly: this is the last chance to revoke a token, and a cache
// that has not yet seen a record created moments ago must not leak it.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, found, err := r.liveStoredToken(ctx, s.config)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found {
		if res, err := r.revoke(ctx, s, t); err != nil || !res.IsZero() {
			return res, err
		}
	}
	controllerutil.RemoveFinalizer(s.config, bootstrapv1.ConfigFinalizer)
	return ctrl.Result{}, nil
}

// workloadUnavailable reports a workload cluster the ClusterCache cannot
// reach yet; the ClusterCache's source re-triggers on connection.
func (r *Reconciler) workloadUnavailable(ctx context.Context, s *scope, err error) (ctrl.Result, error) {
	if errors.Is(err, clustercache.ErrClusterNotConnected) {
		if !ptr.Deref(s.config.Status.Initialization.DataSecretCreated, false) {
			markWaiting(s.config, bootstrapv1.WaitingForWorkloadClusterReason, "Waiting for the workload cluster's API server to be reachable")
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Workload cluster not reachable yet, requeueing")
		return ctrl.Result{RequeueAfter: waitForWorkloadInterval}, nil
	}
	return ctrl.Result{}, err
}

// watchNodes makes Node events in the workload cluster reconcile the
// KairosConfig of the Machine they belong to, so the token is revoked as
// soon as the node registers.
func (r *Reconciler) watchNodes(ctx context.Context, cluster *clusterv1.Cluster) error {
	if r.controller == nil {
		return nil
	}
	err := r.ClusterCache.Watch(ctx, util.ObjectKey(cluster), clustercache.NewWatcher(clustercache.WatcherOptions{
		Name:         "kairosconfig-watchNodes",
		Watcher:      r.controller,
		Kind:         &corev1.Node{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(r.nodeToKairosConfig(util.ObjectKey(cluster))),
		Predicates:   []predicate.Predicate{nodeRegistered()},
	}))
	if errors.Is(err, clustercache.ErrClusterNotConnected) {
		return nil
	}
	return err
}

// storeBootstrapData creates or updates the bootstrap data Secret: named
// like the config, type cluster.x-k8s.io/secret, cluster-name label,
// controller ownerRef, keys value and format.
func (r *Reconciler) storeBootstrapData(ctx context.Context, s *scope, data []byte) error {
	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.config.Namespace,
			Name:      s.config.Name,
			Labels:    map[string]string{clusterv1.ClusterNameLabel: s.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(s.config, bootstrapv1.GroupVersion.WithKind("KairosConfig")),
			},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{
			"value":  data,
			"format": []byte(bootstrapv1.DataFormatCloudConfig),
		},
	}
	// Usually the Secret is new; only an existing one is read (directly:
	// the cache keeps no bootstrap data).
	err := r.Client.Create(ctx, desired)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the bootstrap data Secret: %w", err)
	}
	existing := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		return fmt.Errorf("reading the bootstrap data Secret: %w", err)
	}
	if !util.IsControlledBy(existing, s.config, bootstrapv1.GroupVersion.WithKind("KairosConfig").GroupKind()) {
		return fmt.Errorf("the Secret %s exists but is not controlled by this KairosConfig", existing.Name)
	}
	if bytes.Equal(existing.Data["value"], data) && string(existing.Data["format"]) == bootstrapv1.DataFormatCloudConfig {
		return nil
	}
	existing.Data = desired.Data
	if err := r.Client.Update(ctx, existing); err != nil {
		return fmt.Errorf("updating the bootstrap data Secret: %w", err)
	}
	return nil
}

func markAvailable(config *bootstrapv1.KairosConfig) {
	conditions.Set(config, metav1.Condition{
		Type:   bootstrapv1.DataSecretAvailableCondition,
		Status: metav1.ConditionTrue,
		Reason: bootstrapv1.DataSecretAvailableReason,
	})
}

func markWaiting(config *bootstrapv1.KairosConfig, reason, message string) {
	conditions.Set(config, metav1.Condition{
		Type:    bootstrapv1.DataSecretAvailableCondition,
		Status:  metav1.ConditionFalse,
		Reason:  reason,
		Message: message,
	})
}

func markInternalError(config *bootstrapv1.KairosConfig) {
	markWaiting(config, bootstrapv1.InternalErrorReason, "Please check controller logs for errors")
}
