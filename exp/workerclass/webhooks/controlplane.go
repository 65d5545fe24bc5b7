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

package webhooks

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pooladmission "github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

// The pool webhooks read a pool's Cluster and its control plane to check
// the pool's minor against it. Cozystack's Kubernetes application uses
// KamajiControlPlane; KubeadmControlPlane is Cluster API's own. Another
// control-plane kind needs its own grant, or the minor is not checked.
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=kamajicontrolplanes;kubeadmcontrolplanes,verbs=get

// controlPlaneVersion tells the Kubernetes version of the control plane of
// a pool's parent cluster: the oldest minor among the Cluster's
// spec.topology.version and its control plane object's spec.version and
// status.version (Cluster API's control-plane contract), because a worker
// must not be newer than any apiserver it may meet during an upgrade.
// A missing Cluster (or no Cluster API at all) is pooladmission.ErrNotFound;
// a Cluster whose control plane version cannot be read is
// pooladmission.ErrVersionUnknown with the reason.
func (p *Pool) controlPlaneVersion(ctx context.Context, namespace, name string) (string, error) {
	if p.ClusterName != nil {
		name = p.ClusterName(name)
	}
	cluster := &clusterv1.Cluster{}
	if err := p.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || runtime.IsNotRegisteredError(err) {
			return "", errors.Join(pooladmission.ErrNotFound, err)
		}
		return "", fmt.Errorf("reading Cluster %s/%s: %w", namespace, name, err)
	}
	var known []string
	if v := cluster.Spec.Topology.Version; v != "" {
		known = append(known, v)
	}
	var unknown string
	if ref := cluster.Spec.ControlPlaneRef; ref.IsDefined() {
		cp, why, err := p.controlPlane(ctx, namespace, ref)
		if err != nil {
			return "", err
		}
		unknown = why
		if cp != nil {
			for _, path := range [][]string{{"status", "version"}, {"spec", "version"}} {
				if v, ok, _ := unstructured.NestedString(cp.Object, path...); ok && v != "" {
					known = append(known, v)
				}
			}
		}
	}
	if len(known) == 0 {
		if unknown == "" {
			unknown = "the Cluster has no spec.topology.version, and its control plane reports no spec.version or status.version"
		}
		return "", fmt.Errorf("%w: %s", pooladmission.ErrVersionUnknown, unknown)
	}
	return oldest(known), nil
}

// controlPlane reads the object a Cluster's controlPlaneRef names, at the
// version the API serves. A kind that is not served, an object that is
// missing or a read that is forbidden yields no object and the reason.
func (p *Pool) controlPlane(ctx context.Context, namespace string, ref clusterv1.ContractVersionedObjectReference) (*unstructured.Unstructured, string, error) {
	what := fmt.Sprintf("its control plane %s %s/%s", ref.Kind, namespace, ref.Name)
	if p.RESTMapper == nil {
		return nil, what + " cannot be read: the webhook has no REST mapper", nil
	}
	mapping, err := p.RESTMapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Sprintf("%s cannot be read: the kind %s.%s is not served", what, ref.Kind, ref.APIGroup), nil
		}
		return nil, "", fmt.Errorf("mapping %s.%s: %w", ref.Kind, ref.APIGroup, err)
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(mapping.GroupVersionKind)
	switch err := p.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, cp); {
	case apierrors.IsNotFound(err):
		return nil, what + " does not exist", nil
	case apierrors.IsForbidden(err):
		return nil, what + " cannot be read: the webhook may not get it (grant get on it to the provider's role)", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading %s: %w", what, err)
	}
	return cp, "", nil
}

// oldest returns the version with the lowest minor; a version that does
// not parse is kept only when none does, so admission reports it.
func oldest(known []string) string {
	best, bestMajor, bestMinor, found := known[0], uint64(0), uint64(0), false
	for _, k := range known {
		major, minor, ok := validation.ParseSemver(k)
		if !ok {
			continue
		}
		if !found || major < bestMajor || major == bestMajor && minor < bestMinor {
			best, bestMajor, bestMinor, found = k, major, minor, true
		}
	}
	return best
}
