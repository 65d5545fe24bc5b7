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

// Package v1alpha1 is the API of the KubeVirt infrastructure provider,
// group infrastructure.cozystack.io, version v1alpha1: KubeVirtMachine,
// KubeVirtMachineTemplate, KubeVirtCluster and KubeVirtClusterTemplate.
// The group and kind names differ from cluster-api-provider-kubevirt's
// (infrastructure.cluster.x-k8s.io KubevirtMachine), so both providers
// install side by side.
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cozystack.io
package v1alpha1
