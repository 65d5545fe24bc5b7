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
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/inlinekubeconfig"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// SecretCacheOptions select the management Secrets the manager's cache
// holds for SecretCachingClient: those with the cluster-name label (the
// cluster CA and kubeconfig, our token and bootstrap data Secrets, other
// providers' Secrets). Only the data the reconciler and the ClusterCache
// read is kept, so the cache stays small at a thousand Machines.
func SecretCacheOptions() ctrlcache.ByObject {
	// A valid constant key with Exists: NewRequirement cannot fail.
	withCluster, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	return ctrlcache.ByObject{
		Label:     labels.NewSelector().Add(*withCluster),
		Transform: stripUnreadSecretData,
	}
}

// maxCACertificateBytes is the largest cluster CA certificate read: a
// certificate is one or two KiB of PEM, a bundle of a few more.
const maxCACertificateBytes = 64 << 10

// stripUnreadSecretData drops managedFields from every cached Secret and
// every data key the code does not read (watchview.CachedSecret): of the
// cluster's own Secrets, the CA's certificate (never its key) and the
// kubeconfig the ClusterCache connects with; of our token records, the
// token, its expiry and the mark of a token that ended; nothing of the others (the service account, etcd
// and proxy keys, bootstrap data, other providers' Secrets). A record is
// told by its name and controller reference, which a tenant can forge, so
// what is kept of it is only those three keys, each up to the size a real
// record's value has; a kept value larger than its limit is dropped, and
// the reader reports it as too large. Bootstrap data is never read from
// the cache: it is created, and read directly only when it already
// exists.
func stripUnreadSecretData(in any) (any, error) {
	return watchview.CachedSecret(in, keptSecretKeys)
}

// keptSecretKeys are the keys the code reads of a cached Secret.
func keptSecretKeys(s *corev1.Secret) []watchview.KeptKey {
	cluster := s.Labels[clusterv1.ClusterNameLabel]
	switch s.Name {
	case secret.Name(cluster, secret.ClusterCA):
		return []watchview.KeptKey{{Name: secret.TLSCrtDataName, MaxSize: maxCACertificateBytes}}
	case secret.Name(cluster, secret.Kubeconfig):
		return []watchview.KeptKey{{Name: secret.KubeconfigDataName, MaxSize: inlinekubeconfig.MaxSize}}
	}
	if isTokenSecret(s) {
		return tokenRecordKeys
	}
	return nil
}

// isTokenSecret says whether a Secret looks like a KairosConfig's token
// record.
func isTokenSecret(s *corev1.Secret) bool {
	if !strings.HasSuffix(s.Name, TokenSecretSuffix) {
		return false
	}
	owner := metav1.GetControllerOfNoCopy(s)
	return owner != nil && owner.Kind == "KairosConfig" && strings.HasPrefix(owner.APIVersion, bootstrapv1.GroupVersion.Group+"/")
}

// NodeCacheOptions keep only what the reconciler reads from a workload
// cluster's Nodes, the name and spec.providerID, so a thousand Nodes with
// their status and image lists do not sit in the workload cache.
func NodeCacheOptions() ctrlcache.ByObject {
	return ctrlcache.ByObject{Transform: stripUnreadNodeFields}
}

func stripUnreadNodeFields(in any) (any, error) {
	n, ok := in.(*corev1.Node)
	if !ok {
		return in, nil
	}
	return &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              n.Name,
			UID:               n.UID,
			ResourceVersion:   n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp,
			DeletionTimestamp: n.DeletionTimestamp,
			Labels:            n.Labels,
		},
		Spec: corev1.NodeSpec{ProviderID: n.Spec.ProviderID},
	}, nil
}
