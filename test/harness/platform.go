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

package harness

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// ConfigurePlatform changes the platform configuration (the WorkerPlatform
// singleton the class controller creates at start) as a hoster would. The
// change goes through the WorkerPlatform webhook.
func (h *Harness) ConfigurePlatform(ctx context.Context, change func(*workerclassv1.WorkerPlatformSpec)) error {
	if !h.opts.WorkerClasses {
		return fmt.Errorf("the platform configuration needs Options.WorkerClasses")
	}
	key := client.ObjectKey{Name: workerclassv1.PlatformName}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &workerclassv1.WorkerPlatform{}
		if err := h.Client.Get(ctx, key, p); err != nil {
			// The class controller creates it shortly after start.
			return false, client.IgnoreNotFound(err)
		}
		change(&p.Spec)
		if err := h.Client.Update(ctx, p); err != nil {
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return false, fmt.Errorf("updating the platform configuration: %w", err)
		}
		return true, nil
	})
}
