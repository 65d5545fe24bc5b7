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
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
)

// Every write the reconciler sends to the management cluster is in this
// file: to the KairosConfig its finalizer (ensureFinalizer,
// removeFinalizer), its Paused condition when it changes
// (ensurePausedCondition) and a reconcile's one patch through Cluster
// API's patch helper (patchConfig, reportBlocked: up to three requests,
// the conditions, metadata, the rest of the status, each only when it
// changed); and the bootstrap data Secret (storeBootstrapData). The
// token's writes, to its record in our management Secret and to the
// workload cluster, are token.go's, where one token is followed from mint
// to revoke.

// ensureFinalizer adds our finalizer with a patch of its own, as Cluster
// API's finalizer helper does, when it is missing.
func (r *Reconciler) ensureFinalizer(ctx context.Context, writes client.Client, config *bootstrapv1.KairosConfig) error {
	_, err := finalizers.EnsureFinalizer(ctx, writes, config, bootstrapv1.ConfigFinalizer)
	return err
}

// ensurePausedCondition is Cluster API's paused helper: the Paused
// condition in a patch of its own when it changes; isPaused says the
// reconcile ends there, requeue (the helper's name) that the condition
// was patched. cluster is nil where it is not known.
func (r *Reconciler) ensurePausedCondition(ctx context.Context, writes client.Client, cluster *clusterv1.Cluster, config *bootstrapv1.KairosConfig) (isPaused, requeue bool, _ error) {
	return paused.EnsurePausedCondition(ctx, writes, cluster, config)
}

// reportBlocked sends the conditions of a config that waits before it has a
// Machine and a Cluster to work with, through the patch helper; nothing
// when they already say so. A paused config only records that.
func (r *Reconciler) reportBlocked(ctx context.Context, config *bootstrapv1.KairosConfig, b *blocked) error {
	key, before, writes := client.ObjectKeyFromObject(config), config.ResourceVersion, ownwrites.NewRecorder(r.Client)
	defer func() { r.expect.Wrote(key, before, writes.Written()) }()
	h, err := patch.NewHelper(config, writes)
	if err != nil {
		return err
	}
	if isPaused, requeue, err := r.ensurePausedCondition(ctx, writes, nil, config); err != nil || isPaused || requeue {
		return err
	}
	b.report(config)
	return r.patchConfig(ctx, h, config, true)
}

// patchConfig sends a reconcile's changes to the config through Cluster
// API's patch helper, with Ready summarizing DataSecretAvailable, as
// Cluster API's KubeadmConfig controller does: the conditions we own in a
// patch of their own, then metadata and spec (the finalizer's removal),
// then the rest of the status with status.observedGeneration when the
// reconcile succeeded. A reconcile that changes conditions and other
// status fields together (rendering) costs two status patches.
func (r *Reconciler) patchConfig(ctx context.Context, h *patch.Helper, config *bootstrapv1.KairosConfig, observed bool) error {
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
