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

package floor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/remote"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// tokenTTL is the lifetime of a cluster's join token; a token with less
// than tokenRenewBefore left is replaced before it goes into new data.
const (
	tokenTTL         = 24 * time.Hour
	tokenRenewBefore = time.Hour
)

// nodeBootstrapTokenGroup is the group kubeadm gives node join tokens, the
// one the workload cluster's join RBAC binds.
const nodeBootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

// Bootstrap reconciles KairosConfigs with the bootstrap contract's floor:
// the data Secret and one status patch per machine.
type Bootstrap struct {
	// Client reads KairosConfigs, Machines and Clusters from the cache and
	// writes.
	Client client.Client
	// APIReader reads the cluster's CA and kubeconfig Secrets uncached,
	// once per cluster, so no Secret is cached.
	APIReader client.Reader
	// WorkloadQPS and WorkloadBurst limit the workload cluster client.
	WorkloadQPS   float32
	WorkloadBurst int

	mu       sync.Mutex
	clusters map[types.UID]*clusterJoin
	// written are the configs whose data this process wrote and whose
	// status the cache may not show yet: they are not written again.
	written sync.Map
}

// clusterJoin is what every machine of a cluster joins with.
type clusterJoin struct {
	token   string
	expires time.Time
	hashes  []string
}

// SetupWithManager registers the reconciler with its watches: the configs,
// their Machines (the owner reference and the infrastructure name come
// from there) and their Clusters (control plane initialized).
func (r *Bootstrap) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	r.clusters = map[types.UID]*clusterJoin{}
	clusterToConfigs, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &bootstrapv1.KairosConfigList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "floor-bootstrap")
	return capicontrollerutil.NewControllerManagedBy(mgr, log).
		For(&bootstrapv1.KairosConfig{}).
		Named("floor-bootstrap").
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToConfig)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToConfigs)).
		Complete(ctx, r)
}

// machineToConfig maps a Machine to its KairosConfig.
func machineToConfig(_ context.Context, o client.Object) []ctrl.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || m.Spec.Bootstrap.ConfigRef.Kind != "KairosConfig" || m.Spec.Bootstrap.ConfigRef.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}}}
}

// Reconcile writes a config's bootstrap data once its Machine and the
// cluster's control plane exist, then nothing more.
func (r *Bootstrap) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	config := &bootstrapv1.KairosConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, config); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ptr.Deref(config.Status.Initialization.DataSecretCreated, false) || !config.DeletionTimestamp.IsZero() {
		r.written.Delete(config.UID)
		return ctrl.Result{}, nil
	}
	if _, ok := r.written.Load(config.UID); ok {
		// The event of our status patch brings the config back.
		return ctrl.Result{}, nil
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, config.ObjectMeta)
	if err != nil || machine == nil {
		// The Machine's event brings the config back once it owns it.
		return ctrl.Result{}, err
	}
	cluster, err := util.GetClusterByName(ctx, r.Client, config.Namespace, machine.Spec.ClusterName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ptr.Deref(cluster.Status.Initialization.ControlPlaneInitialized, false) || !cluster.Spec.ControlPlaneEndpoint.IsValid() || machine.Spec.InfrastructureRef.Name == "" {
		return ctrl.Result{}, nil
	}
	join, err := r.join(ctx, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	vm := machine.Spec.InfrastructureRef.Name
	data, err := cloudConfig(vm, providerIDPrefix+vm, cluster.Spec.ControlPlaneEndpoint.String(), join.token, join.hashes)
	if err != nil {
		return ctrl.Result{}, err
	}
	dataSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       config.Namespace,
			Name:            config.Name,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(config, bootstrapv1.GroupVersion.WithKind("KairosConfig"))},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": data, "format": []byte(bootstrapv1.DataFormatCloudConfig)},
	}
	// A Secret left by a reconcile whose status patch failed is this one.
	if err := r.Client.Create(ctx, dataSecret); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating the bootstrap data Secret: %w", err)
	}
	// One status patch: Cluster API's patch helper would write the
	// conditions and the rest of the status in two.
	before := config.DeepCopy()
	config.Status.DataSecretName = dataSecret.Name
	config.Status.Initialization.DataSecretCreated = ptr.To(true)
	conditions.Set(config, metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: bootstrapv1.ReadyReason})
	if err := r.Client.Status().Patch(ctx, config, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching the KairosConfig status: %w", err)
	}
	r.written.Store(config.UID, struct{}{})
	ctrl.LoggerFrom(ctx).Info("Wrote the bootstrap data", "Secret", klog.KObj(dataSecret))
	return ctrl.Result{}, nil
}

// join returns the cluster's join token and CA pins, creating the token in
// the workload cluster when the cluster has none that lives long enough.
func (r *Bootstrap) join(ctx context.Context, cluster *clusterv1.Cluster) (clusterJoin, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.clusters[cluster.UID]; ok && time.Until(j.expires) > tokenRenewBefore {
		return *j, nil
	}
	ca, err := secret.GetFromNamespacedName(ctx, r.APIReader, util.ObjectKey(cluster), secret.ClusterCA)
	if err != nil {
		return clusterJoin{}, fmt.Errorf("reading the cluster CA Secret: %w", err)
	}
	hashes, err := (&secret.Certificate{Purpose: secret.ClusterCA, KeyPair: &certs.KeyPair{Cert: ca.Data[secret.TLSCrtDataName]}}).Hashes()
	if err != nil || len(hashes) == 0 {
		return clusterJoin{}, fmt.Errorf("pinning the cluster CA: %w", errors.Join(err, errors.New("no certificate")))
	}
	workload, err := r.workloadClient(ctx, cluster)
	if err != nil {
		return clusterJoin{}, err
	}
	value, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return clusterJoin{}, err
	}
	id, tokenSecret, _ := strings.Cut(value, ".")
	j := &clusterJoin{token: value, expires: time.Now().Add(tokenTTL).UTC().Truncate(time.Second), hashes: hashes}
	if err := workload.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			bootstrapapi.BootstrapTokenIDKey:               []byte(id),
			bootstrapapi.BootstrapTokenSecretKey:           []byte(tokenSecret),
			bootstrapapi.BootstrapTokenExpirationKey:       []byte(j.expires.Format(time.RFC3339)),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
			bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
			bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(nodeBootstrapTokenGroup),
		},
	}); err != nil {
		return clusterJoin{}, fmt.Errorf("creating the cluster's join token: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Created the cluster's join token", "expires", j.expires)
	r.clusters[cluster.UID] = j
	return *j, nil
}

// workloadClient is a client of the cluster's apiserver, from its
// kubeconfig Secret.
func (r *Bootstrap) workloadClient(ctx context.Context, cluster *clusterv1.Cluster) (client.Client, error) {
	raw, err := kubeconfig.FromSecret(ctx, r.APIReader, util.ObjectKey(cluster))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's kubeconfig: %w", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = r.WorkloadQPS, r.WorkloadBurst
	cfg.UserAgent = remote.DefaultClusterAPIUserAgent("floor-bootstrap")
	return client.New(cfg, client.Options{})
}
