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

// Package contract is what the Kairos bootstrap provider reads of the
// KubeVirt infrastructure provider: the providerID format and the field
// paths of a machine template, resolved or not. Both providers import it,
// so the bootstrap provider needs no infrastructure API and the two cannot
// drift; the infrastructure API's tests fail when a json tag moves away
// from a path declared here. The bootstrap provider reads the template
// unstructured, by these paths, so that another provider's template with
// the same fields pairs too.
package contract

// ProviderIDPrefix prefixes every providerID the infrastructure provider
// reports: kubevirt://<KubeVirtMachine name>. The kubelet of the node is
// started with the same value, so Cluster API matches the Node without a
// lookup by name.
const ProviderIDPrefix = "kubevirt://"

// ProviderID returns the providerID of the machine with the given name.
func ProviderID(machineName string) string {
	return ProviderIDPrefix + machineName
}

// Field paths of an infrastructure machine template, for
// unstructured.Nested*.
var (
	// TemplateWorkerClassField is spec.template.spec.workerClass.name: the
	// WorkerClass the template names.
	TemplateWorkerClassField = []string{"spec", "template", "spec", "workerClass", "name"}
	// TemplateGPUsField is spec.template.spec.gpus: the GPUs the
	// template's machines list.
	TemplateGPUsField = []string{"spec", "template", "spec", "gpus"}
	// TemplateInstancetypeField is spec.template.spec.instancetype: the
	// instancetype, which may attach GPUs of its own.
	TemplateInstancetypeField = []string{"spec", "template", "spec", "instancetype"}
	// NodeLabelsField is status.nodeLabels: the labels the template's
	// machines' nodes register with, written with status.resolved.
	NodeLabelsField = []string{"status", "nodeLabels"}
)

// Field paths of the resolved template's view, status.resolved: what the
// infrastructure provider froze from the WorkerClass when it resolved the
// template.
var (
	// ResolvedField is status.resolved (ResolvedMachine), set once the
	// template is resolved.
	ResolvedField = []string{"status", "resolved"}
	// ResolvedWorkerClassField is status.resolved.workerClassName.
	ResolvedWorkerClassField = []string{"status", "resolved", "workerClassName"}
	// ResolvedBootstrapField is status.resolved.bootstrap.
	ResolvedBootstrapField = []string{"status", "resolved", "bootstrap"}
	// ResolvedKubernetesVersionField is status.resolved.kubernetesVersion.
	ResolvedKubernetesVersionField = []string{"status", "resolved", "kubernetesVersion"}
	// ResolvedKubernetesVersionMatchField is
	// status.resolved.kubernetesVersionMatch.
	ResolvedKubernetesVersionMatchField = []string{"status", "resolved", "kubernetesVersionMatch"}
)
