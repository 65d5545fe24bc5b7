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

package v1alpha1

import "github.com/cozystack/cluster-api-workers/internal/contract"

// What the Kairos bootstrap provider reads of this API is declared in
// internal/contract, which both providers import; contract_test.go fails
// when a json tag moves away from a path declared there.

// ProviderID returns the providerID of the machine with the given name:
// kubevirt://<KubeVirtMachine name>, the format the bootstrap provider
// starts the node's kubelet with.
func ProviderID(machineName string) string {
	return contract.ProviderID(machineName)
}
