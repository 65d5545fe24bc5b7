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
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/controllers"
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

// SetupWebhooksWithManager registers WorkerClass and WorkerPlatform
// validation and KubernetesNodes pool admission (pools that name no
// substrate run on KubeVirt).
func SetupWebhooksWithManager(mgr ctrl.Manager) error {
	if err := (&webhooks.WorkerClass{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the WorkerClass webhook: %w", err)
	}
	if err := (&webhooks.WorkerPlatform{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the WorkerPlatform webhook: %w", err)
	}
	if err := (&webhooks.Pool{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KubernetesNodes webhooks: %w", err)
	}
	return nil
}
