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

package resolve

import (
	"strings"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// nvidiaResourcePrefix is the resource name prefix of NVIDIA GPUs exposed
// by the NVIDIA device plugins and KubeVirt's permitted host devices.
const nvidiaResourcePrefix = "nvidia.com/"

// RequestsNVIDIAGPU reports whether a pool requests an NVIDIA GPU: the
// trigger of the automatic NVIDIA kernel-module rule.
func RequestsNVIDIAGPU(gpus []workerclassv1.GPU) bool {
	for _, g := range gpus {
		if strings.HasPrefix(g.Name, nvidiaResourcePrefix) {
			return true
		}
	}
	return false
}

// NVIDIAKernelModules returns the modules a Talos worker with the NVIDIA
// driver extensions loads, as Talos documents for NVIDIA GPUs: nvidia,
// nvidia_uvm, nvidia_drm and nvidia_modeset. The rule only loads modules:
// the image must already contain the driver extension.
func NVIDIAKernelModules() []workerclassv1.KernelModule {
	return []workerclassv1.KernelModule{
		{Name: "nvidia"},
		{Name: "nvidia_uvm"},
		{Name: "nvidia_drm"},
		{Name: "nvidia_modeset"},
	}
}
