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

// Package clustersecrets tells Cluster API's own Secrets of a cluster (its
// CAs with their keys, the admin kubeconfig, the service account key, and
// the bootstrap data of other Machines) apart from the Secrets a tenant
// may copy into a worker's files.
package clustersecrets

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
)

// purposes are the suffixes of the Secrets Cluster API and its control
// plane providers keep per cluster, <cluster>-<purpose>.
var purposes = []secret.Purpose{
	secret.Kubeconfig, secret.ClusterCA, secret.EtcdCA, secret.ServiceAccount,
	secret.FrontProxyCA, secret.APIServerEtcdClient,
}

// Named reports whether name is one of Cluster API's Secrets of cluster,
// and which.
func Named(cluster, name string) (secret.Purpose, bool) {
	if cluster == "" {
		return "", false
	}
	rest, ok := strings.CutPrefix(name, cluster+"-")
	if !ok {
		return "", false
	}
	for _, p := range purposes {
		if rest == string(p) {
			return p, true
		}
	}
	return "", false
}

// Is reports whether s is Cluster API's own: named as one of cluster's
// Secrets, or of Cluster API's Secret type (which its generated
// certificates and every Machine's bootstrap data carry).
func Is(cluster string, s *corev1.Secret) bool {
	if _, ok := Named(cluster, s.Name); ok {
		return true
	}
	return s.Type == clusterv1.ClusterSecretType
}
