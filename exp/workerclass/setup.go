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

// Package workerclass wires the WorkerClass API into a manager: the class
// controller, the built-in defaults and the admission webhooks. The
// infrastructure manager calls these when the WorkerClass feature gate is
// on; its scheme must include the cozystack.io/v1alpha1 types
// (exp/workerclass/api/v1alpha1.AddToScheme).
package workerclass

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/controllers"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/webhooks"
)

// Options tune the class controller.
type Options struct {
	// EnsureDefaultsBackoff paces retries of creating the built-in classes
	// and the platform configuration; zero uses a 1 s to 1 min backoff.
	EnsureDefaultsBackoff wait.Backoff
}

// SetupWithManager registers the class controller, the platform
// controller and a leader-elected runnable that creates the built-in
// classes talos and kairos and the default platform configuration when
// they are missing.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := (&controllers.WorkerClassReconciler{}).SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the WorkerClass controller: %w", err)
	}
	if err := (&controllers.WorkerPlatformReconciler{}).SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the WorkerPlatform controller: %w", err)
	}
	backoff := opts.EnsureDefaultsBackoff
	if backoff.Steps == 0 {
		backoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
	}
	ensure := manager.RunnableFunc(func(ctx context.Context) error {
		log := ctrl.LoggerFrom(ctx).WithName("workerclass-defaults")
		// Retry until the apiserver accepts the objects; a transient
		// failure must not stop the manager.
		return wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			if err := controllers.EnsureDefaults(ctx, mgr.GetClient()); err != nil {
				log.Error(err, "Creating the built-in classes and platform configuration failed; retrying")
				return false, nil
			}
			return true, nil
		})
	})
	if err := mgr.Add(ensure); err != nil {
		return fmt.Errorf("adding the WorkerClass defaults runnable: %w", err)
	}
	return nil
}

// ClusterPlaceholder stands for a pool's spec.cluster in
// WebhookOptions.PoolClusterName.
const ClusterPlaceholder = "{cluster}"

// DefaultPoolClusterName is how Cozystack's Kubernetes application names
// a tenant cluster's Cluster API Cluster: the pool's spec.cluster example
// is the Cluster kubernetes-example.
const DefaultPoolClusterName = "kubernetes-" + ClusterPlaceholder

// WebhookOptions tune pool admission; the infrastructure manager sets
// them from its flags (AddFlags).
type WebhookOptions struct {
	// PoolClusterName names the Cluster API Cluster, in the pool's
	// namespace, whose control plane a pool's minor is checked against:
	// ClusterPlaceholder is replaced with the pool's spec.cluster. ""
	// reads the Cluster named like spec.cluster, as ClusterPlaceholder
	// alone does.
	PoolClusterName string
	// PoolSubstrate is the substrate of pools that name none in
	// spec.substrate; "" is KubeVirt.
	PoolSubstrate resolve.Substrate
}

// DefaultWebhookOptions are the options of a manager started without
// the flags: Cozystack's Cluster names, KubeVirt.
func DefaultWebhookOptions() WebhookOptions {
	return WebhookOptions{PoolClusterName: DefaultPoolClusterName, PoolSubstrate: resolve.KubeVirt}
}

// AddFlags registers --pool-cluster-name and --pool-substrate, with
// DefaultWebhookOptions' values as their defaults.
func (o *WebhookOptions) AddFlags(fs *pflag.FlagSet) {
	*o = DefaultWebhookOptions()
	fs.Var((*clusterNameValue)(&o.PoolClusterName), "pool-cluster-name",
		"Name of the Cluster API Cluster, in a KubernetesNodes pool's namespace, whose control-plane minor the pool's minor may not exceed; "+
			ClusterPlaceholder+" stands for the pool's spec.cluster (Cozystack names the Cluster kubernetes-"+ClusterPlaceholder+").")
	fs.Var((*substrateValue)(&o.PoolSubstrate), "pool-substrate",
		"Substrate of the KubernetesNodes pools that name none in spec.substrate: KubeVirt or Proxmox.")
}

// clusterNameValue is a pflag.Value that requires the placeholder, so a
// setting cannot name one Cluster for every pool.
type clusterNameValue string

func (v *clusterNameValue) String() string { return string(*v) }
func (v *clusterNameValue) Type() string   { return "string" }
func (v *clusterNameValue) Set(s string) error {
	if !strings.Contains(s, ClusterPlaceholder) {
		return fmt.Errorf("must contain %s, which stands for the pool's spec.cluster, not %q", ClusterPlaceholder, s)
	}
	*v = clusterNameValue(s)
	return nil
}

// substrateValue is a pflag.Value that accepts only the engine's
// substrates.
type substrateValue resolve.Substrate

func (v *substrateValue) String() string { return string(*v) }
func (v *substrateValue) Type() string   { return "string" }
func (v *substrateValue) Set(s string) error {
	sub, err := resolve.ParseSubstrate(s)
	if err != nil {
		return err
	}
	*v = substrateValue(sub)
	return nil
}

// SetupWebhooksWithManager registers WorkerClass and WorkerPlatform
// validation and KubernetesNodes pool admission with opts.
func SetupWebhooksWithManager(mgr ctrl.Manager, opts WebhookOptions) error {
	if err := (&webhooks.WorkerClass{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the WorkerClass webhook: %w", err)
	}
	if err := (&webhooks.WorkerPlatform{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the WorkerPlatform webhook: %w", err)
	}
	pool := &webhooks.Pool{Substrate: opts.PoolSubstrate}
	if format := opts.PoolClusterName; format != "" {
		if err := new(clusterNameValue).Set(format); err != nil {
			return fmt.Errorf("the pool webhooks' Cluster name %w", err)
		}
		pool.ClusterName = func(cluster string) string { return strings.ReplaceAll(format, ClusterPlaceholder, cluster) }
	}
	if err := pool.SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KubernetesNodes webhooks: %w", err)
	}
	return nil
}
