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

package kubevirtmachine

import (
	"context"
	"fmt"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/patch"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// The machine's own writes to the management cluster that are not Cluster
// API's finalizer and paused helpers: its providerID, and a reconcile's one
// deferred patch.

// fillProviderID sets the empty spec.providerID (kubevirt://<name>) and has
// the patch helper write it in a reconcile of its own, before anything is
// created and before the first step's conditions: the providerID is known
// before the VM exists, and as the only spec change it bumps the
// generation once. The patch helper sends conditions before spec, so
// conditions and status.observedGeneration sent with it would record the
// generation it replaces and be written again (only Paused=False, written
// by the paused helper before, records the old one until the first step's
// patch carries it). Cluster API reads it only
// once the machine is provisioned. The event of this patch reconciles the
// machine again.
func fillProviderID(ctx context.Context, h *patch.Helper, kvm *infrav1.KubeVirtMachine) error {
	kvm.Spec.ProviderID = infrav1.ProviderID(kvm.Name)
	if err := h.Patch(ctx, kvm); err != nil {
		return fmt.Errorf("setting spec.providerID: %w", err)
	}
	return nil
}

// patchKubeVirtMachine writes the reconcile's changes through Cluster API's
// patch helper: the conditions this controller owns, metadata and spec,
// then the rest of the status, each in a patch of its own when it changed.
// Ready summarises the machine's two steps; the generation is recorded as
// observed only when the reconcile succeeded.
func patchKubeVirtMachine(ctx context.Context, h *patch.Helper, kvm *infrav1.KubeVirtMachine, observed bool) error {
	if err := setReady(kvm); err != nil {
		return err
	}
	opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
		infrav1.ReadyCondition,
		infrav1.VirtualMachineProvisionedCondition,
		infrav1.BootDiskReadyCondition,
		clusterv1.PausedCondition,
	}}}
	if observed {
		opts = append(opts, patch.WithStatusObservedGeneration{})
	}
	return h.Patch(ctx, kvm, opts...)
}
