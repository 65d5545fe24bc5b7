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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

const (
	// DefaultTokenTTL is the default lifetime of a bootstrap token between
	// refreshes (see docs/bootstrap.md for the choice).
	DefaultTokenTTL = time.Hour

	// NodeBootstrapTokenGroup is the extra group of every token, the one
	// kubeadm's RBAC lets join nodes.
	NodeBootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

	// TokenSecretSuffix names the management-cluster Secret that holds a
	// KairosConfig's token: <config name>-bootstrap-token.
	TokenSecretSuffix = "-bootstrap-token"

	// Keys of the management-cluster token Secret.
	tokenKey      = "token"
	expirationKey = "expiration"
)

// token is a bootstrap token and its expiry.
type token struct {
	ID         string
	Secret     string
	Expiration time.Time
	// recordUID is the UID of our management Secret the token was read
	// from: its record is deleted only while it is that Secret.
	recordUID types.UID
}

func (t token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

func newToken(now time.Time, ttl time.Duration) (token, error) {
	value, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return token{}, fmt.Errorf("generating a bootstrap token: %w", err)
	}
	t, err := parseToken(value)
	if err != nil {
		return token{}, err
	}
	t.Expiration = now.Add(ttl).UTC().Truncate(time.Second)
	return t, nil
}

func parseToken(value string) (token, error) {
	parts := bootstraputil.BootstrapTokenRegexp.FindStringSubmatch(value)
	if len(parts) != 3 {
		return token{}, fmt.Errorf("the stored bootstrap token is not of the form %s", bootstrapapi.BootstrapTokenPattern)
	}
	return token{ID: parts[1], Secret: parts[2]}, nil
}

// tokenSecretName is the deterministic name of the Secret that keeps a
// KairosConfig's token in the management cluster.
func tokenSecretName(configName string) string {
	return withSuffix(configName, TokenSecretSuffix)
}

// withSuffix appends suffix, shortening name with a hash when the result
// would exceed the 253 characters of an object name.
func withSuffix(name, suffix string) string {
	const maxLen = 253
	if len(name)+len(suffix) <= maxLen {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:8]
	return name[:maxLen-len(suffix)-len(hash)-1] + "-" + hash + suffix
}

// readTokenSecret returns the stored token, or ok=false when there is none.
func readTokenSecret(s *corev1.Secret) (token, bool, error) {
	value, ok := s.Data[tokenKey]
	if !ok {
		return token{}, false, nil
	}
	t, err := parseToken(string(value))
	if err != nil {
		return token{}, false, err
	}
	if exp, ok := s.Data[expirationKey]; ok {
		if t.Expiration, err = time.Parse(time.RFC3339, string(exp)); err != nil {
			return token{}, false, fmt.Errorf("the stored token expiration is not RFC 3339: %w", err)
		}
	}
	t.recordUID = s.UID
	return t, true, nil
}

// managementTokenSecret is the Secret of ours that keeps the token, owned
// by the KairosConfig and labelled with the cluster name.
func managementTokenSecret(config *bootstrapv1.KairosConfig, clusterName string, t token) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: config.Namespace,
			Name:      tokenSecretName(config.Name),
			Labels:    map[string]string{clusterv1.ClusterNameLabel: clusterName},
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(config, bootstrapv1.GroupVersion.WithKind("KairosConfig")),
			},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{
			tokenKey:      []byte(t.String()),
			expirationKey: []byte(t.Expiration.Format(time.RFC3339)),
		},
	}
}

// workloadTokenSecret is the bootstrap-token-<id> Secret in the workload
// cluster's kube-system namespace that the API server authenticates.
func workloadTokenSecret(config *bootstrapv1.KairosConfig, t token) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem,
			Name:      bootstraputil.BootstrapTokenSecretName(t.ID),
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			bootstrapapi.BootstrapTokenIDKey:               []byte(t.ID),
			bootstrapapi.BootstrapTokenSecretKey:           []byte(t.Secret),
			bootstrapapi.BootstrapTokenExpirationKey:       []byte(t.Expiration.Format(time.RFC3339)),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
			bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
			bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(NodeBootstrapTokenGroup),
			bootstrapapi.BootstrapTokenDescriptionKey: []byte(fmt.Sprintf(
				"Join token of KairosConfig %s/%s, made by the Kairos bootstrap provider", config.Namespace, config.Name)),
		},
	}
}

// needsRefresh says whether a token's expiry should be pushed out: once a
// third of its TTL has passed. Checks run every TTL/3, so a token never has
// less than a third of its TTL left while it is kept alive.
func needsRefresh(expiration, now time.Time, ttl time.Duration) bool {
	return expiration.Before(now.Add(ttl - ttl/3))
}

// refreshInterval is how often a live token is checked.
func refreshInterval(ttl time.Duration) time.Duration { return ttl / 3 }

// ensureWorkloadToken reads the workload token Secret and creates it, or
// pushes out its expiry when due; used where it is not known whether the
// Secret exists (a token recorded by an earlier attempt). A Secret that vanished (expired and cleaned up, or
// deleted by hand) while the node has not joined is created again with the
// same value, so the rendered bootstrap data stays valid.
func ensureWorkloadToken(ctx context.Context, remote client.Client, config *bootstrapv1.KairosConfig, t token, now time.Time, ttl time.Duration) (token, error) {
	existing := &corev1.Secret{}
	key := client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID)}
	err := remote.Get(ctx, key, existing)
	switch {
	case apierrors.IsNotFound(err):
		t.Expiration = now.Add(ttl).UTC().Truncate(time.Second)
		if err := remote.Create(ctx, workloadTokenSecret(config, t)); err != nil && !apierrors.IsAlreadyExists(err) {
			return t, fmt.Errorf("creating bootstrap token %s in the workload cluster: %w", t.ID, err)
		}
		return t, nil
	case err != nil:
		return t, fmt.Errorf("reading bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	if string(existing.Data[bootstrapapi.BootstrapTokenSecretKey]) != t.Secret {
		return t, fmt.Errorf("bootstrap token %s in the workload cluster holds a different secret; refusing to reuse it", t.ID)
	}
	expiration, err := time.Parse(time.RFC3339, string(existing.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	if err == nil && !needsRefresh(expiration, now, ttl) {
		t.Expiration = expiration
		return t, nil
	}
	t.Expiration = now.Add(ttl).UTC().Truncate(time.Second)
	existing.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(t.Expiration.Format(time.RFC3339))
	if err := remote.Update(ctx, existing); err != nil {
		return t, fmt.Errorf("extending bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	return t, nil
}

// createWorkloadToken creates the workload token Secret of a token just
// minted; created is false when a Secret of that name already exists.
func createWorkloadToken(ctx context.Context, remote client.Client, config *bootstrapv1.KairosConfig, t token) (created bool, err error) {
	err = remote.Create(ctx, workloadTokenSecret(config, t))
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	return true, nil
}

// extendWorkloadToken pushes a token's expiry out to now+ttl with a patch
// of that one key, without reading the Secret first. A Secret that
// vanished (deleted by hand) is created again with the same value, so the
// rendered bootstrap data stays valid.
func extendWorkloadToken(ctx context.Context, remote client.Client, config *bootstrapv1.KairosConfig, t token, now time.Time, ttl time.Duration) (token, error) {
	t.Expiration = now.Add(ttl).UTC().Truncate(time.Second)
	patch, err := json.Marshal(map[string]any{"data": map[string][]byte{
		bootstrapapi.BootstrapTokenExpirationKey: []byte(t.Expiration.Format(time.RFC3339)),
	}})
	if err != nil {
		return t, err
	}
	existing := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID)}}
	err = remote.Patch(ctx, existing, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		if err := remote.Create(ctx, workloadTokenSecret(config, t)); err != nil {
			return t, fmt.Errorf("creating bootstrap token %s in the workload cluster again: %w", t.ID, err)
		}
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("extending bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	return t, nil
}

// deleteWorkloadToken revokes a token; a token already gone is fine.
func deleteWorkloadToken(ctx context.Context, remote client.Client, t token) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID)}}
	if err := remote.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	return nil
}
