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

package scale

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/cozystack/cluster-api-workers/test/bench/floor"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// floorProviderPackage is the contract-floor providers' command.
const floorProviderPackage = "./test/bench/cmd/floor-provider"

// startFloorProviders hands the pool to the contract-floor providers: once
// our infrastructure provider has provisioned the cluster's
// infrastructure (KubeVirtCluster) and resolved the template, which are
// per pool and not per machine, our provider processes are killed and the
// floor providers started, each as its own process. They run as the
// harness's admin: authorization is the apiserver's work, not theirs.
func startFloorProviders(ctx context.Context, h *harness.Harness, w *harness.WorkloadCluster) ([]*harness.ComponentProcess, error) {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cluster := &clusterv1.Cluster{}
		if err := h.Client.Get(ctx, w.Key, cluster); err != nil {
			return false, err
		}
		return ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the cluster's infrastructure: %w", err)
	}
	for _, p := range h.Processes() {
		if err := p.Kill(); err != nil {
			return nil, err
		}
	}
	var processes []*harness.ComponentProcess
	for _, name := range []string{floor.BootstrapName, floor.InfrastructureName} {
		p, err := h.StartProcess(ctx, components.Name(name), floorProviderPackage, h.Config(), "-component", name)
		if err != nil {
			return nil, err
		}
		processes = append(processes, p)
	}
	return processes, nil
}
