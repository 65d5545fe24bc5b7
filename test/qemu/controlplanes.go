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

package qemu

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

var _ harness.ControlPlanes = (*ControlPlanes)(nil)

// ControlPlanes start kubeadm-prepared workload control planes for the
// harness (harness.ClusterOptions.ControlPlanes), so that guests join the
// clusters the harness creates: the Cluster's controlPlaneEndpoint is
// GuestHostAddress:<port>, what the bootstrap data pins and guests dial,
// while the <cluster>-kubeconfig Secret that Cluster API and the providers
// use points at 127.0.0.1:<port>.
type ControlPlanes struct {
	// KubernetesVersion must match the worker disk's kubelet and kubeadm.
	KubernetesVersion string
	// GuestHost is the address guests dial the apiservers at;
	// GuestHostAddress when empty (ControlPlaneOptions.GuestHost).
	GuestHost string

	mu      sync.Mutex
	started map[client.ObjectKey]*ControlPlane
}

// StartControlPlane starts the control plane of a cluster, named after it.
func (c *ControlPlanes) StartControlPlane(ctx context.Context, cluster client.ObjectKey) (*envtest.Workload, error) {
	cp, err := StartControlPlane(ctx, ControlPlaneOptions{KubernetesVersion: c.KubernetesVersion, ClusterName: cluster.Name, GuestHost: c.GuestHost})
	if err != nil {
		return nil, err
	}
	w, err := cp.Workload()
	if err != nil {
		cp.Stop()
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		c.started = map[client.ObjectKey]*ControlPlane{}
	}
	c.started[cluster] = cp
	return w, nil
}

// Get returns the control plane started for a cluster (for its logs), or
// nil.
func (c *ControlPlanes) Get(cluster client.ObjectKey) *ControlPlane {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started[cluster]
}

// Workload fronts the control plane as the harness's workload apiserver:
// Endpoint is the guest-side endpoint, Config the host-side admin access;
// stopping it stops the control plane.
func (cp *ControlPlane) Workload() (*envtest.Workload, error) {
	return envtest.ExternalWorkload(cp.Config, cp.GuestEndpoint, cp.CACert, func() error {
		cp.Stop()
		return nil
	})
}
