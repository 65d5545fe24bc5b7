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
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

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
