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
	"fmt"
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

// Split reports whether name is named as one of Cluster API's Secrets of
// some cluster, <cluster>-<purpose>, and of which cluster and purpose.
func Split(name string) (cluster string, purpose secret.Purpose, ok bool) {
	for _, p := range purposes {
		if c, found := strings.CutSuffix(name, "-"+string(p)); found && c != "" {
			return c, p, true
		}
	}
	return "", "", false
}

// Of says whether s is one of Cluster API's own Secrets of any cluster in
// its namespace, not only of the cluster a reader belongs to: of Cluster
// API's Secret type, or named <cluster>-<purpose> for a cluster that the
// Secret's cluster-name label names or that exists (clusterExists), which
// covers a bring-your-own CA that carries no label. It returns what the
// Secret is, for messages, or "" when it is none of them.
func Of(s *corev1.Secret, clusterExists func(cluster string) (bool, error)) (string, error) {
	if s.Type == clusterv1.ClusterSecretType {
		return fmt.Sprintf("of Cluster API's Secret type %s", clusterv1.ClusterSecretType), nil
	}
	cluster, purpose, ok := Split(s.Name)
	if !ok {
		return "", nil
	}
	own := s.Labels[clusterv1.ClusterNameLabel] == cluster
	if !own {
		exists, err := clusterExists(cluster)
		if err != nil {
			return "", err
		}
		own = exists
	}
	if !own {
		return "", nil
	}
	return fmt.Sprintf("Cluster API's %q Secret of cluster %s", purpose, cluster), nil
}
