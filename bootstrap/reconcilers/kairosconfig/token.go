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
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/metrics"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// One KairosConfig's bootstrap token, from birth to revocation, is in this
// file. A token lives in two places: our record, a management Secret owned
// by the KairosConfig, and the workload token, the workload cluster's
// bootstrap-token-<id> Secret the node joins with. Its lifecycle, in the
// order of the functions below:
//
//   - generate: a new value, not yet anywhere (generateToken);
//   - mint: record it, then issue the workload token (mintToken,
//     recordToken, issueWorkloadToken); a record left by an earlier attempt
//     resumes the mint (resumeMint);
//   - read the record, from the cache or live (readTokenRecord);
//   - refresh: push the workload token's expiry out until the node joins,
//     and record the new expiry (refreshToken, refreshWorkloadToken,
//     recordRefresh);
//   - end: once the node joined, or the token outlived its keep-alive,
//     delete the workload token and replace the record with a mark that
//     keeps no token (endToken, revokeWorkloadToken, recordEnded): a
//     config whose token ended never mints again;
//   - revoke: delete the workload token when the Machine goes, then forget
//     the record (revokeAndForget, forgetTokenRecord); a token whose
//     cluster cannot be reached is forgotten once it has expired.
//
// The KairosConfig's own writes and its bootstrap data Secret are
// writes.go's.

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

	// DefaultTokenKeepAlive is how long after its mint a token is kept
	// alive while its node has not joined: kubeadm's own default token
	// lifetime. A Machine that has not joined by then has failed, and
	// its MachineHealthCheck replaces it.
	DefaultTokenKeepAlive = 24 * time.Hour

	// Keys of the management-cluster token Secret.
	tokenKey      = "token"
	expirationKey = "expiration"
	// endedKey replaces both in a record whose token ended for good; its
	// value says why (tokenEnded).
	endedKey = "ended"
)

// tokenEnded says why a config's token ended for good.
type tokenEnded string

const (
	// endedJoined: the node joined and the token was revoked.
	endedJoined tokenEnded = "NodeJoined"
	// endedKeepAlive: the node had not joined when the token's keep-alive
	// was over, and it was revoked.
	endedKeepAlive tokenEnded = "KeepAliveOver"
)

// tokenRecordKeys are the keys read of a token record, with the largest
// value each holds: a bootstrap token ("abcdef.0123456789abcdef") and an
// RFC 3339 time, which parses with up to nanoseconds and an offset, and
// why a token ended. The
// cache keeps nothing else of a Secret that looks like a record
// (cache.go).
var tokenRecordKeys = []watchview.KeptKey{
	{Name: tokenKey, MaxSize: len("abcdef.0123456789abcdef")},
	{Name: expirationKey, MaxSize: len(time.RFC3339Nano)},
	{Name: endedKey, MaxSize: maxEndedSize},
}

// maxEndedSize is the longest tokenEnded.
const maxEndedSize = max(len(endedJoined), len(endedKeepAlive))

// token is a bootstrap token and its expiry.
type token struct {
	ID         string
	Secret     string
	Expiration time.Time
	// recordUID is the UID of our management Secret the token was read
	// from: its record is deleted only while it is that Secret.
	recordUID types.UID
	// minted is when the record was created, which bounds the keep-alive.
	minted time.Time
	// ended is set when the record marks a token that ended for good: no
	// ID, secret or expiry is kept then.
	ended tokenEnded
}

func (t token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

func generateToken(now time.Time, ttl time.Duration) (token, error) {
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

// Minting. A token is recorded in our management Secret before it exists
// in the workload cluster, so that a restart in between never mints a
// second one and never loses track of one.

// recordedOrNewToken is the token a render puts in the data: the one
// recorded in our management Secret (stored), or a new one, generated here
// and not yet minted: mintToken mints it once the data is known to fit in
// a Secret.
func (r *Reconciler) recordedOrNewToken(ctx context.Context, config *bootstrapv1.KairosConfig) (t token, stored bool, err error) {
	t, stored, err = r.readTokenRecord(ctx, config)
	if err != nil || stored {
		return t, stored, err
	}
	t, err = generateToken(r.now(), r.TokenTTL)
	return t, false, err
}

// mintToken makes t, from recordedOrNewToken, the Machine's token and
// returns it. A recorded token resumes its mint (resumeMint); a new one is
// stored in our management Secret before it is created in the workload
// cluster, so a restart in between never mints a second token and never
// loses track of one. A record the cache has not seen yet makes the
// create fail, and the record is then read directly and returned instead.
func (r *Reconciler) mintToken(ctx context.Context, s *scope, remote client.Client, t token, stored bool) (token, error) {
	if stored {
		// A record from an earlier attempt: the workload token may or may
		// not exist yet, so look.
		return r.resumeMint(ctx, s, remote, t)
	}
	err := r.recordToken(ctx, s, t)
	if apierrors.IsAlreadyExists(err) {
		recorded, found, err := r.readTokenRecordLive(ctx, s.config)
		if err != nil {
			return token{}, err
		}
		if !found {
			return token{}, fmt.Errorf("the token Secret %s exists but holds no token", tokenRecordName(s.config.Name))
		}
		return r.resumeMint(ctx, s, remote, recorded)
	}
	if err != nil {
		return token{}, fmt.Errorf("storing the bootstrap token: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Created a bootstrap token", "tokenID", t.ID, "expiration", t.Expiration)
	metrics.TokensMinted.Inc()
	created, err := issueWorkloadToken(ctx, remote, s.config, t)
	if err != nil {
		return token{}, err
	}
	if !created {
		// Another token with this ID: only reuse it if it is ours.
		return r.resumeMint(ctx, s, remote, t)
	}
	return t, nil
}

// readTokenRecord reads the token kept in our management Secret, from the
// cache.
func (r *Reconciler) readTokenRecord(ctx context.Context, config *bootstrapv1.KairosConfig) (token, bool, error) {
	t, found, err := getTokenRecord(ctx, r.SecretCachingClient, config)
	if errors.Is(err, errNoSecretData) {
		// A cache that drops Secret data (not set up with
		// SecretCacheOptions): correct, but every reconcile reads.
		t, found, err = r.readTokenRecordLive(ctx, config)
	}
	if err != nil {
		return token{}, false, err
	}
	key := client.ObjectKeyFromObject(config)
	if !found || t.ended != "" {
		r.expect.tokenRecordGone(key)
		return t, found, nil
	}
	if r.expect.tokenRevoked(key, t.ID) {
		// Ended or deleted by us; the cache has not seen it yet.
		return token{ended: r.expect.endedAs(key)}, r.expect.endedAs(key) != "", nil
	}
	return t, true, nil
}

// readTokenRecordLive reads the token kept in our management Secret from
// the API server.
func (r *Reconciler) readTokenRecordLive(ctx context.Context, config *bootstrapv1.KairosConfig) (token, bool, error) {
	t, found, err := getTokenRecord(ctx, r.APIReader, config)
	if errors.Is(err, errNoSecretData) {
		return token{}, false, nil
	}
	return t, found, err
}

// errNoSecretData means a Secret was read without any data.
var errNoSecretData = errors.New("the Secret was read without data")

// getTokenRecord reads the token kept in our management Secret through
// reader.
func getTokenRecord(ctx context.Context, reader client.Reader, config *bootstrapv1.KairosConfig) (token, bool, error) {
	s := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: tokenRecordName(config.Name)}, s)
	if apierrors.IsNotFound(err) {
		return token{}, false, nil
	}
	if err != nil {
		return token{}, false, fmt.Errorf("reading the token Secret: %w", err)
	}
	if !util.IsControlledBy(s, config, bootstrapv1.GroupVersion.WithKind("KairosConfig").GroupKind()) {
		return token{}, false, fmt.Errorf("the Secret %s exists but is not controlled by this KairosConfig", s.Name)
	}
	for _, k := range tokenRecordKeys {
		if watchview.DroppedTooLarge(s, k.Name) {
			return token{}, false, &watchview.TooLargeError{Secret: s.Name, Key: k.Name, MaxSize: k.MaxSize}
		}
	}
	if s.Data == nil {
		return token{}, false, errNoSecretData
	}
	return parseTokenRecord(s)
}

// parseTokenRecord returns the stored token, or ok=false when there is none.
// A record whose token ended returns a token with only ended set.
func parseTokenRecord(s *corev1.Secret) (token, bool, error) {
	if ended, ok := s.Data[endedKey]; ok {
		return token{ended: tokenEnded(ended), recordUID: s.UID, minted: s.CreationTimestamp.Time}, true, nil
	}
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
	t.minted = s.CreationTimestamp.Time
	return t, true, nil
}

// recordToken stores a new token in our management Secret; an
// AlreadyExists error is the caller's to handle.
func (r *Reconciler) recordToken(ctx context.Context, s *scope, t token) error {
	return r.Client.Create(ctx, tokenRecordSecret(s.config, s.cluster.Name, t))
}

// tokenRecordSecret is the Secret of ours that keeps the token, owned
// by the KairosConfig and labelled with the cluster name.
func tokenRecordSecret(config *bootstrapv1.KairosConfig, clusterName string, t token) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: config.Namespace,
			Name:      tokenRecordName(config.Name),
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

// tokenRecordName is the deterministic name of the Secret that keeps a
// KairosConfig's token in the management cluster.
func tokenRecordName(configName string) string {
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

// issueWorkloadToken creates the workload token Secret of a token just
// minted; created is false when a Secret of that name already exists.
func issueWorkloadToken(ctx context.Context, remote client.Client, config *bootstrapv1.KairosConfig, t token) (created bool, err error) {
	err = remote.Create(ctx, workloadTokenSecret(config, t))
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	return true, nil
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

// resumeMint reads the workload token, creates or extends it, and
// records the new expiry in our Secret. Only used when it is not known
// whether the workload token exists.
func (r *Reconciler) resumeMint(ctx context.Context, s *scope, remote client.Client, t token) (token, error) {
	updated, err := issueOrRefreshWorkloadToken(ctx, remote, s.config, t, r.now(), r.TokenTTL)
	if err != nil {
		return token{}, err
	}
	return updated, r.recordRefresh(ctx, s, t, updated)
}

// issueOrRefreshWorkloadToken reads the workload token Secret and creates
// it, or pushes out its expiry when due; used where it is not known
// whether the Secret exists (a token recorded by an earlier attempt). A
// Secret that vanished (expired and cleaned up, or deleted by hand) while
// the node has not joined is created again with the same value, so the
// rendered bootstrap data stays valid.
func issueOrRefreshWorkloadToken(ctx context.Context, remote client.Client, config *bootstrapv1.KairosConfig, t token, now time.Time, ttl time.Duration) (token, error) {
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

// recordRefresh writes a refreshed token's new expiry to our record.
func (r *Reconciler) recordRefresh(ctx context.Context, s *scope, before, after token) error {
	if after.Expiration.Equal(before.Expiration) {
		return nil
	}
	if err := r.Client.Update(ctx, tokenRecordSecret(s.config, s.cluster.Name, after)); err != nil {
		return fmt.Errorf("recording the token expiration: %w", err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Extended the bootstrap token", "tokenID", after.ID, "expiration", after.Expiration)
	return nil
}

// Refreshing, until the node joins.

// refreshToken refreshes the token while the node has not joined. The
// expiry our Secret records is the workload token's, so nothing is read
// from the workload cluster: the token is extended (or created again, if
// it vanished) once a third of its TTL has passed.
func (r *Reconciler) refreshToken(ctx context.Context, s *scope, t token) (ctrl.Result, error) {
	if err := r.watchNodes(ctx, s.cluster); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	if !t.Expiration.IsZero() && !needsRefresh(t.Expiration, now, r.TokenTTL) {
		return ctrl.Result{RequeueAfter: refreshInterval(r.TokenTTL)}, nil
	}
	if keepAliveOver(t, now, r.tokenKeepAlive()) {
		// Not extended again: the token ends with the expiry it has.
		if now.Before(t.Expiration) {
			return ctrl.Result{RequeueAfter: t.Expiration.Sub(now)}, nil
		}
		ctrl.LoggerFrom(ctx).Info("The node has not joined within the bootstrap token's keep-alive; ending the token, and no new one is minted for this config",
			"tokenID", t.ID, "minted", t.minted, "keepAlive", r.tokenKeepAlive())
		return ctrl.Result{}, r.endToken(ctx, s, t, endedKeepAlive)
	}
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return workloadUnavailable(s, err)
	}
	extended, err := refreshWorkloadToken(ctx, remote, s.config, t, now, r.TokenTTL)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.recordRefresh(ctx, s, t, extended); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: refreshInterval(r.TokenTTL)}, nil
}

// tokenKeepAlive is the keep-alive in force.
func (r *Reconciler) tokenKeepAlive() time.Duration {
	if r.TokenKeepAlive == 0 {
		return DefaultTokenKeepAlive
	}
	return r.TokenKeepAlive
}

// keepAliveOver says whether a token's keep-alive is over: it was minted
// keepAlive ago or more. A record without a creation time (a fake client's)
// is kept alive.
func keepAliveOver(t token, now time.Time, keepAlive time.Duration) bool {
	return keepAlive > 0 && !t.minted.IsZero() && !now.Before(t.minted.Add(keepAlive))
}

// needsRefresh says whether a token's expiry should be pushed out: once a
// third of its TTL has passed. Checks run every TTL/3, so a token never has
// less than a third of its TTL left while it is kept alive.
func needsRefresh(expiration, now time.Time, ttl time.Duration) bool {
	return expiration.Before(now.Add(ttl - ttl/3))
}

// refreshInterval is how often a live token is checked.
func refreshInterval(ttl time.Duration) time.Duration { return ttl / 3 }

// refreshWorkloadToken pushes a token's expiry out to now+ttl with a patch
// of that one key, without reading the Secret first. A Secret that
// vanished (deleted by hand) is created again with the same value, so the
// rendered bootstrap data stays valid.
func refreshWorkloadToken(ctx context.Context, remote client.Client, config *bootstrapv1.KairosConfig, t token, now time.Time, ttl time.Duration) (token, error) {
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

// Ending, once the node joined or the keep-alive is over.

// endToken deletes the workload token and replaces our record with the
// mark that the config's token ended, which keeps no token: a config
// whose token ended never mints again, whatever happens to its Node
// later (deleted before Cluster API set the Machine's nodeRef, say). It
// costs the write a deleted record cost. While the workload cluster cannot
// be reached the error is returned and the attempt repeated with backoff.
func (r *Reconciler) endToken(ctx context.Context, s *scope, t token, why tokenEnded) error {
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return fmt.Errorf("revoking bootstrap token %s: %w", t.ID, err)
	}
	if err := revokeWorkloadToken(ctx, remote, t); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Revoked the bootstrap token", "tokenID", t.ID, "why", string(why))
	r.recordRevoked(s, why)
	metrics.TokensRevoked.Inc()
	if err := r.recordEnded(ctx, s, t, why); err != nil {
		return err
	}
	r.expect.endedToken(client.ObjectKeyFromObject(s.config), t.ID, why)
	return nil
}

// recordEnded replaces our record of t with the mark that the config's
// token ended: one merge patch that drops the token and its expiry.
func (r *Reconciler) recordEnded(ctx context.Context, s *scope, t token, why tokenEnded) error {
	patch, err := json.Marshal(map[string]any{
		"data": map[string]any{tokenKey: nil, expirationKey: nil, endedKey: []byte(why)},
	})
	if err != nil {
		return err
	}
	record := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.config.Namespace, Name: tokenRecordName(s.config.Name)}}
	err = r.Client.Patch(ctx, record, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		// No record (a restored config whose node joined): the mark is
		// made alone.
		record = tokenRecordSecret(s.config, s.cluster.Name, t)
		record.Data = map[string][]byte{endedKey: []byte(why)}
		err = client.IgnoreAlreadyExists(r.Client.Create(ctx, record))
	}
	if err != nil {
		return fmt.Errorf("recording that the bootstrap token ended: %w", err)
	}
	return nil
}

// Revoking, when the Machine goes.

// revokeToken reads the record and, unless its token ended, deletes the
// workload token, then the record.
func (r *Reconciler) revokeToken(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, found, err := r.readTokenRecord(ctx, s.config)
	if err != nil || !found || t.ended != "" {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.revokeAndForget(ctx, s, t)
}

// revokeAndForget revokes t and forgets its record. While the workload
// cluster cannot be reached the record stays and the error is returned, so
// the attempt is repeated with backoff (and when the ClusterCache
// connects), until the token would have expired anyway.
func (r *Reconciler) revokeAndForget(ctx context.Context, s *scope, t token) error {
	log := ctrl.LoggerFrom(ctx)
	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	switch {
	case err != nil && !t.Expiration.IsZero() && r.now().After(t.Expiration):
		log.Info("Workload cluster unreachable; the bootstrap token has expired, forgetting it", "tokenID", t.ID)
	case err != nil:
		return fmt.Errorf("revoking bootstrap token %s: %w", t.ID, err)
	default:
		if err := revokeWorkloadToken(ctx, remote, t); err != nil {
			return err
		}
		log.Info("Revoked the bootstrap token", "tokenID", t.ID, "why", "MachineDeleted")
		r.recordRevoked(s, "")
		metrics.TokensRevoked.Inc()
	}
	if err := r.forgetTokenRecord(ctx, s.config, t); err != nil {
		return err
	}
	r.expect.endedToken(client.ObjectKeyFromObject(s.config), t.ID, "")
	return nil
}

// revokeWorkloadToken deletes the workload token Secret; one already gone
// is fine.
func revokeWorkloadToken(ctx context.Context, remote client.Client, t token) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID)}}
	if err := remote.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting bootstrap token %s in the workload cluster: %w", t.ID, err)
	}
	return nil
}

// forgetTokenRecord deletes our record of t, only while the record is the
// Secret t was read from: a record made again since (a new token for the
// same config) is not ours to drop, or its token would leak untracked.
func (r *Reconciler) forgetTokenRecord(ctx context.Context, config *bootstrapv1.KairosConfig, t token) error {
	if t.recordUID == "" {
		return fmt.Errorf("bootstrap token %s has no record to forget", t.ID)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: tokenRecordName(config.Name)}}
	err := r.Client.Delete(ctx, s, client.Preconditions{UID: &t.recordUID})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		ctrl.LoggerFrom(ctx).Info("The token Secret was replaced since it was read; keeping the new record", "tokenID", t.ID)
		return nil
	case err != nil:
		return fmt.Errorf("deleting the token Secret: %w", err)
	}
	return nil
}
