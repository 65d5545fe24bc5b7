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

// Package setup wires the KubeVirt provider into a controller manager: the
// scheme, what the cache holds, the reconcilers and the webhooks. main.go and
// the envtest suites use the same functions.
package setup

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/infracluster"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/kubevirtcluster"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/kubevirtmachine"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/kubevirtmachinetemplate"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/infrastructure/webhooks/admission"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// The management cluster client's default rate limits (--kube-api-qps,
// --kube-api-burst): Cluster API v1.14's own managers' defaults, because one
// provider serves every machine of the management cluster.
const (
	DefaultKubeAPIQPS   float32 = 100
	DefaultKubeAPIBurst int     = 200
)

// How many objects of each kind are reconciled at once by default
// (--kubevirtmachine-concurrency, --kubevirtmachinetemplate-concurrency,
// --kubevirtcluster-concurrency).
const (
	DefaultMachineConcurrency  int = 10
	DefaultTemplateConcurrency int = 5
	DefaultClusterConcurrency  int = 5
)

// AddToScheme adds every API the provider reads or writes.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		clusterv1.AddToScheme,
		infrav1.AddToScheme,
		workerclassv1.AddToScheme,
		kubevirtv1.AddToScheme,
		instancetypev1beta1.AddToScheme,
		cdiv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// ManagerCacheOptions caches only what the controllers need, without
// managedFields: Secrets labelled with a cluster name (bootstrap data and
// the machines' own cloud-init Secrets), and only the VirtualMachines,
// VirtualMachineInstances, DataVolumes and ConfigMaps this provider created,
// by their machine-name label. VMs of other providers, CAPK's included, are
// never cached.
func ManagerCacheOptions(scheme *runtime.Scheme, controllerName, watchNamespace string, syncPeriod time.Duration) (ctrlcache.Options, error) {
	withCluster, err := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	if err != nil {
		return ctrlcache.Options{}, err
	}
	return cacheOptions(scheme, controllerName, watchNamespace, syncPeriod, labels.NewSelector().Add(*withCluster))
}

// InfrastructureCacheOptions are ManagerCacheOptions for an infrastructure
// cluster other than the management cluster: there the provider's only
// Secrets are the machines' cloud-init Secrets, selected by their
// machine-name label as the VMs are.
func InfrastructureCacheOptions(scheme *runtime.Scheme, controllerName, watchNamespace string, syncPeriod time.Duration) (ctrlcache.Options, error) {
	return cacheOptions(scheme, controllerName, watchNamespace, syncPeriod, nil)
}

// cacheOptions selects Secrets by secrets, or by the machine-name label
// when nil, and the machines' own VMs, instances, DataVolumes and
// ConfigMaps by that label.
func cacheOptions(scheme *runtime.Scheme, controllerName, watchNamespace string, syncPeriod time.Duration, secrets labels.Selector) (ctrlcache.Options, error) {
	var namespaces map[string]ctrlcache.Config
	if watchNamespace != "" {
		namespaces = map[string]ctrlcache.Config{watchNamespace: {}}
	}
	withMachine, err := labels.NewRequirement(infrav1.MachineNameLabel, selection.Exists, nil)
	if err != nil {
		return ctrlcache.Options{}, err
	}
	ours := ctrlcache.ByObject{Label: labels.NewSelector().Add(*withMachine)}
	if secrets == nil {
		secrets = ours.Label
	}
	return ctrlcache.Options{
		DefaultNamespaces: namespaces,
		SyncPeriod:        &syncPeriod,
		DefaultTransform:  ctrlcache.TransformStripManagedFields(),
		ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.Secret{}:                     {Label: secrets, Transform: kubevirtmachine.StripUnreadSecretData},
			&corev1.ConfigMap{}:                  ours,
			&kubevirtv1.VirtualMachine{}:         {Label: ours.Label, Transform: kubevirtmachine.StripUnreadVirtualMachineFields},
			&kubevirtv1.VirtualMachineInstance{}: {Label: ours.Label, Transform: kubevirtmachine.StripUnreadInstanceFields},
			&cdiv1.DataVolume{}:                  ours,
			// Machines live only in the management cluster; there the
			// cache keeps what the providers read of them.
			&clusterv1.Machine{}: {Transform: watchview.CachedMachine},
			// KubeVirt's CR lives in KubeVirt's namespace, which --namespace
			// does not name; the template controller reads its
			// configuration.
			&kubevirtv1.KubeVirt{}: {Namespaces: map[string]ctrlcache.Config{ctrlcache.AllNamespaces: {}}},
		},
		NewInformer: capicontrollerutil.NewInformerFunc(scheme, controllerName),
	}, nil
}

// Options configure the reconcilers.
type Options struct {
	// WatchFilterValue restricts the controllers to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// WatchNamespace is the namespace the manager's cache watches; all
	// when empty. The shared imports' cache watches the same.
	WatchNamespace string
	// ControllerName names the shared imports' informers, as
	// ManagerCacheOptions names the manager's: two managers in one process
	// (a test's restart) need names of their own. kubevirt-workers when
	// empty.
	ControllerName string
	// WorkerClasses is the WorkerClass feature gate.
	WorkerClasses bool
	// ImportFailureRestarts is how many importer pod restarts count as a
	// failed root disk import.
	ImportFailureRestarts int32
	// MachineConcurrency, TemplateConcurrency and ClusterConcurrency bound
	// the parallel reconciles of each kind; 1 when zero.
	MachineConcurrency, TemplateConcurrency, ClusterConcurrency int
	// Infrastructure is the cluster the machines' VMs run in when it is not
	// the management cluster (--infrastructure-kubeconfig); nil for the
	// management cluster. Shared imports are made only in the management
	// cluster, where the templates that own them are.
	Infrastructure *rest.Config
	// ManagementClusterIdentity is the identity every object made in
	// Infrastructure carries (infrav1.ManagementClusterLabel), so that
	// management clusters sharing it never adopt or delete each other's
	// objects (--management-cluster-identity). When empty it is the UID of
	// the management cluster's kube-system namespace
	// (DefaultManagementClusterIdentity). Unused without Infrastructure.
	ManagementClusterIdentity string
	// SyncPeriod is the infrastructure cluster's cache resync period; 10m
	// when zero.
	SyncPeriod time.Duration
	// Placement is the hoster's placement policy (the --tenant-* and
	// --reserved-node-labels flags): the machine controller creates no VM
	// that asks for more, and keeps every VM off the reserved nodes. The
	// zero Policy allows nothing and reserves nothing; main.go passes the
	// flags', placement.DefaultPolicy unless set.
	Placement placement.Policy
}

// Reconcilers registers the KubeVirtMachine, KubeVirtMachineTemplate and
// KubeVirtCluster controllers. Their writes use strict field validation, so
// a field the installed KubeVirt or CDI does not know is an error, not a
// silently dropped setting.
func Reconcilers(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	strict := client.WithFieldValidation(mgr.GetClient(), metav1.FieldValidationStrict)
	restarts := opts.ImportFailureRestarts
	if restarts == 0 {
		restarts = kubevirtmachine.DefaultImportFailureRestarts
	}
	controllerName := opts.ControllerName
	if controllerName == "" {
		controllerName = "kubevirt-workers"
	}
	infra, err := infrastructureCluster(ctx, mgr, opts, controllerName)
	if err != nil {
		return err
	}
	var images *sharedimage.Images
	if !infra.Remote {
		if images, err = sharedimage.NewImages(mgr, controllerName, opts.WatchNamespace, restarts); err != nil {
			return err
		}
		if err := (&sharedimage.Reconciler{
			Client:           strict,
			APIReader:        mgr.GetAPIReader(),
			Images:           images,
			WatchFilterValue: opts.WatchFilterValue,
		}).SetupWithManager(ctx, mgr, concurrency(opts.TemplateConcurrency)); err != nil {
			return fmt.Errorf("setting up the shared image controller: %w", err)
		}
	}
	if err := (&kubevirtmachine.Reconciler{
		Client:                strict,
		APIReader:             mgr.GetAPIReader(),
		Infrastructure:        infra,
		Clones:                &cloneauth.Authorizer{Client: infra.Client, Reader: infra.Reader},
		SharedImages:          images,
		WatchFilterValue:      opts.WatchFilterValue,
		ImportFailureRestarts: opts.ImportFailureRestarts,
		WorkerClasses:         opts.WorkerClasses,
		Placement:             opts.Placement,
	}).SetupWithManager(ctx, mgr, concurrency(opts.MachineConcurrency)); err != nil {
		return fmt.Errorf("setting up the KubeVirtMachine controller: %w", err)
	}
	if err := (&kubevirtmachinetemplate.Reconciler{
		Client:           strict,
		Infrastructure:   infra,
		WatchFilterValue: opts.WatchFilterValue,
		WorkerClasses:    opts.WorkerClasses,
	}).SetupWithManager(ctx, mgr, concurrency(opts.TemplateConcurrency)); err != nil {
		return fmt.Errorf("setting up the KubeVirtMachineTemplate controller: %w", err)
	}
	if err := (&kubevirtcluster.Reconciler{
		Client:           strict,
		WatchFilterValue: opts.WatchFilterValue,
	}).SetupWithManager(ctx, mgr, concurrency(opts.ClusterConcurrency)); err != nil {
		return fmt.Errorf("setting up the KubeVirtCluster controller: %w", err)
	}
	return nil
}

// infrastructureCluster is the management cluster, or the cluster
// opts.Infrastructure reaches, with a cache of its own that the manager
// starts and stops.
func infrastructureCluster(ctx context.Context, mgr ctrl.Manager, opts Options, controllerName string) (*infracluster.Cluster, error) {
	if opts.Infrastructure == nil {
		return &infracluster.Cluster{
			Client: client.WithFieldValidation(mgr.GetClient(), metav1.FieldValidationStrict),
			Reader: mgr.GetAPIReader(),
			Cache:  mgr.GetCache(),
		}, nil
	}
	identity := opts.ManagementClusterIdentity
	if identity == "" {
		var err error
		if identity, err = DefaultManagementClusterIdentity(ctx, mgr.GetAPIReader()); err != nil {
			return nil, err
		}
	}
	if msgs := validation.IsValidLabelValue(identity); identity == "" || len(msgs) > 0 {
		return nil, field.Invalid(field.NewPath("managementClusterIdentity"), identity,
			"must be a non-empty label value: "+strings.Join(msgs, "; "))
	}
	syncPeriod := opts.SyncPeriod
	if syncPeriod == 0 {
		syncPeriod = 10 * time.Minute
	}
	cacheOpts, err := InfrastructureCacheOptions(mgr.GetScheme(), controllerName+"-infrastructure", opts.WatchNamespace, syncPeriod)
	if err != nil {
		return nil, err
	}
	c, err := cluster.New(opts.Infrastructure, func(o *cluster.Options) {
		o.Scheme = mgr.GetScheme()
		o.Logger = mgr.GetLogger().WithName("infrastructure-cluster")
		o.Cache = cacheOpts
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the infrastructure cluster: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return &infracluster.Cluster{
		Client:   client.WithFieldValidation(c.GetClient(), metav1.FieldValidationStrict),
		Reader:   c.GetAPIReader(),
		Cache:    c.GetCache(),
		Remote:   true,
		Identity: identity,
	}, nil
}

// DefaultManagementClusterIdentity is the management cluster's identity
// when --management-cluster-identity is not set: the UID of its
// kube-system namespace, which every cluster has, which stays while the
// cluster does, and which no two clusters share.
func DefaultManagementClusterIdentity(ctx context.Context, management client.Reader) (string, error) {
	ns := &corev1.Namespace{}
	if err := management.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("reading the management cluster's %s namespace for its identity (or set --management-cluster-identity): %w", metav1.NamespaceSystem, err)
	}
	return string(ns.UID), nil
}

// Webhooks registers the provider's admission webhooks. Instancetypes and
// preferences are read, and clone sources (namespaces, DataSources) looked
// up, in the infrastructure cluster infra reaches, or in the management
// cluster when it is nil; the user who writes a clone source is always
// authorized in the management cluster (AdmissionClones). Machines and
// templates that ask for more placement than policy allows are refused.
func Webhooks(mgr ctrl.Manager, infra *rest.Config, policy placement.Policy) error {
	clones := AdmissionClones(mgr.GetClient(), mgr.GetAPIReader())
	instancetypes := mgr.GetAPIReader()
	if infra != nil {
		c, err := client.New(infra, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return fmt.Errorf("connecting to the infrastructure cluster: %w", err)
		}
		clones = AdmissionClones(mgr.GetClient(), c)
		instancetypes = c
	}
	for name, setup := range map[string]func(ctrl.Manager) error{
		"KubeVirtMachine":         (&admission.KubeVirtMachine{Clones: clones, Templates: mgr.GetAPIReader(), Instancetypes: instancetypes, Placement: policy}).SetupWebhookWithManager,
		"KubeVirtMachineTemplate": (&admission.KubeVirtMachineTemplate{Clones: clones, Templates: mgr.GetAPIReader(), Instancetypes: instancetypes, Placement: policy}).SetupWebhookWithManager,
		"KubeVirtCluster":         (&admission.KubeVirtCluster{}).SetupWebhookWithManager,
		"KubeVirtClusterTemplate": (&admission.KubeVirtClusterTemplate{}).SetupWebhookWithManager,
	} {
		if err := setup(mgr); err != nil {
			return fmt.Errorf("setting up the %s webhook: %w", name, err)
		}
	}
	return nil
}

// AdmissionClones authorizes, at admission, the clone source a user
// writes: the user is the management cluster's, so whether they may clone
// from a namespace is that cluster's RBAC's answer (SubjectAccessReviews go
// to management), while the namespace and a DataSource, which name where
// the data is, are read from sources: the infrastructure cluster in the
// remote mode, whose namespace of the same name is the tenant's (the
// namespace mapping, docs/infrastructure.md). Asking the infrastructure
// cluster about a management cluster's user would judge them by another
// cluster's RBAC, where the name may be nobody's or someone else's.
func AdmissionClones(management client.Client, sources client.Reader) *cloneauth.Authorizer {
	return &cloneauth.Authorizer{Client: management, Reader: sources}
}

func concurrency(n int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: max(n, 1)}
}
