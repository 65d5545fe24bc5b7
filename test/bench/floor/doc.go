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

// Package floor holds the scale benchmark's contract-floor providers: a
// bootstrap and an infrastructure provider that reconcile the same
// KairosConfig and KubeVirtMachine objects as ours but write only what the
// Cluster API v1beta2 contract requires for a machine to run. They are the
// yardstick for our providers' own cost (test/bench/scale), never shipped.
//
// The bootstrap floor writes, per machine, the bootstrap data Secret and
// one status patch (dataSecretName, initialization.dataSecretCreated, the
// Ready condition); the join token is one per cluster, created once in the
// workload cluster. The infrastructure floor writes, per machine, the
// cloud-init user data Secret and the VirtualMachine (rendered by
// infrastructure/vmspec, so they are the same objects ours writes),
// spec.providerID in one patch, and status.initialization.provisioned with
// the Ready condition in one patch once the VirtualMachine is ready. Neither
// keeps a finalizer: owner references let the garbage collector remove what
// they created. Both remember what they wrote until their cache shows it, so
// a reconcile on a stale cache does not write it again; a status is one
// merge patch (Cluster API's patch helper writes conditions and the rest of
// the status in two).
package floor

// The floor providers' names, as the scale benchmark's processes. This
// package imports none of our providers' code, so the floor's binary holds
// none of it.
const (
	BootstrapName      = "floor-bootstrap"
	InfrastructureName = "floor-infrastructure"
)
