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
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
	err = r.createTokenRecord(ctx, s, t)
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
		return workloadUnavailable(s, err)
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

// revokeToken deletes the workload token, then our record of it.
func (r *Reconciler) revokeToken(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, found, err := r.storedToken(ctx, s.config)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.revoke(ctx, s, t)
}

// revoke revokes t and forgets it. While the workload cluster cannot be
// reached the record stays and the error is returned, so the attempt is
// repeated with backoff (and when the ClusterCache connects), until the
// token would have expired anyway.
func (r *Reconciler) revoke(ctx context.Context, s *scope, t token) error {
	log := ctrl.LoggerFrom(ctx)
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	switch {
	case err != nil && !t.Expiration.IsZero() && r.now().After(t.Expiration):
		log.Info("Workload cluster unreachable; the bootstrap token has expired, forgetting it", "tokenID", t.ID)
	case err != nil:
		return fmt.Errorf("revoking bootstrap token %s: %w", t.ID, err)
	default:
		if err := deleteWorkloadToken(ctx, remote, t); err != nil {
			return err
		}
		log.Info("Revoked the bootstrap token", "tokenID", t.ID)
	}
	if err := r.forgetToken(ctx, s.config, t); err != nil {
		return err
	}
	r.expect.revokedToken(client.ObjectKeyFromObject(s.config), t.ID)
	return nil
}
