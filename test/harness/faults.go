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
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// Process returns the component running as a process (Options.Processes),
// or nil.
func (h *Harness) Process(name components.Name) *ComponentProcess {
	for _, p := range h.processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ourWebhookPrefixes name the webhook configurations of this project's
// providers among those the harness installs (prefixWebhookConfigurations).
var ourWebhookPrefixes = []string{"bootstrap-", "infrastructure-", "workerclass-"}

// unreachableWebhook is where the webhooks point while they are down:
// nothing listens on port 1, so the apiserver's calls are refused at once,
// as they are when a provider's webhook Service has no ready endpoint.
const unreachableWebhook = "https://127.0.0.1:1/down"

// ProviderWebhooksDown makes every admission webhook of our providers
// unreachable, as when their pods are gone: the apiserver fails closed on
// the kinds they admit. Cluster API's webhooks stay up. restore puts them
// back.
func (h *Harness) ProviderWebhooksDown(ctx context.Context) (restore func(context.Context) error, err error) {
	point := func(ctx context.Context, url func(name string, i int, old *string) *string) error {
		var errs []error
		validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		if err := h.Management.Client.List(ctx, validating); err != nil {
			return err
		}
		for _, c := range validating.Items {
			if !isOurs(c.Name) {
				continue
			}
			errs = append(errs, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &admissionregistrationv1.ValidatingWebhookConfiguration{}
				if err := h.Management.Client.Get(ctx, client.ObjectKey{Name: c.Name}, cur); err != nil {
					return err
				}
				for i := range cur.Webhooks {
					cur.Webhooks[i].ClientConfig.URL = url(cur.Name, i, cur.Webhooks[i].ClientConfig.URL)
				}
				return h.Management.Client.Update(ctx, cur)
			}))
		}
		mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
		if err := h.Management.Client.List(ctx, mutating); err != nil {
			return err
		}
		for _, c := range mutating.Items {
			if !isOurs(c.Name) {
				continue
			}
			errs = append(errs, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &admissionregistrationv1.MutatingWebhookConfiguration{}
				if err := h.Management.Client.Get(ctx, client.ObjectKey{Name: c.Name}, cur); err != nil {
					return err
				}
				for i := range cur.Webhooks {
					cur.Webhooks[i].ClientConfig.URL = url("mutating/"+cur.Name, i, cur.Webhooks[i].ClientConfig.URL)
				}
				return h.Management.Client.Update(ctx, cur)
			}))
		}
		return errors.Join(errs...)
	}
	saved := map[string]*string{}
	key := func(name string, i int) string { return fmt.Sprintf("%s/%d", name, i) }
	if err := point(ctx, func(name string, i int, old *string) *string {
		saved[key(name, i)] = old
		return ptr.To(unreachableWebhook)
	}); err != nil {
		return nil, fmt.Errorf("taking the providers' webhooks down: %w", err)
	}
	return func(ctx context.Context) error {
		if err := point(ctx, func(name string, i int, _ *string) *string { return saved[key(name, i)] }); err != nil {
			return fmt.Errorf("bringing the providers' webhooks back: %w", err)
		}
		return nil
	}, nil
}

func isOurs(configuration string) bool {
	for _, p := range ourWebhookPrefixes {
		if strings.HasPrefix(configuration, p) {
			return true
		}
	}
	return false
}
