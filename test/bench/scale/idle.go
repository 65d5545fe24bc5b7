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
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// IdleReport is what changed while the pool was idle.
type IdleReport struct {
	Window time.Duration `json:"window"`
	// Objects is how many objects were watched for changes.
	Objects int `json:"objects"`
	// PerKind is how many of them there were of each kind.
	PerKind map[string]int `json:"perKind"`
	// Changed are the objects whose resourceVersion changed, as
	// "Kind namespace/name".
	Changed []string `json:"changed"`
	// Writes are the writes of every component but the simulators and the
	// driver during the window.
	Writes []requests.RequestCount `json:"writes"`
}

// ourKinds are the objects our providers (and the simulated KubeVirt behind
// the infrastructure provider) write.
var ourKinds = []string{
	"KairosConfig", "KairosConfigTemplate", "KubeVirtCluster", "KubeVirtMachine", "KubeVirtMachineTemplate",
	"VirtualMachine", "VirtualMachineInstance", "DataVolume", "PersistentVolumeClaim", "Secret", "ConfigMap",
	"WorkerClass", "WorkerPlatform",
}

// OursChanged are the objects of our kinds that changed while idle;
// Cluster API's own late writes (it may still patch Machines a few
// seconds after they run) are left out.
func (i IdleReport) OursChanged() []string {
	var out []string
	for _, ch := range i.Changed {
		if slices.Contains(ourKinds, strings.SplitN(ch, " ", 2)[0]) {
			out = append(out, ch)
		}
	}
	return out
}

// OursWrites are our providers' writes while idle.
func (i IdleReport) OursWrites() []requests.RequestCount {
	var out []requests.RequestCount
	for _, w := range i.Writes {
		if slices.Contains(requests.OurComponents, w.Component) {
			out = append(out, w)
		}
	}
	return out
}

// idleKinds are the objects a pool and its machines consist of in the
// management cluster, the simulated KubeVirt's included (KubeadmConfigs for
// the peer). Nodes are left
// out: the simulated kubelets keep their status fresh, as kubelets do; the
// controllers' writes to the workload cluster are in Writes.
func idleKinds(bootstrap harness.Bootstrap) map[string]client.ObjectList {
	kinds := map[string]client.ObjectList{
		"Cluster":                 &clusterv1.ClusterList{},
		"MachineDeployment":       &clusterv1.MachineDeploymentList{},
		"MachineSet":              &clusterv1.MachineSetList{},
		"Machine":                 &clusterv1.MachineList{},
		"MachineHealthCheck":      &clusterv1.MachineHealthCheckList{},
		"KairosConfig":            &bootstrapv1.KairosConfigList{},
		"KairosConfigTemplate":    &bootstrapv1.KairosConfigTemplateList{},
		"KubeVirtCluster":         &infrav1.KubeVirtClusterList{},
		"KubeVirtMachine":         &infrav1.KubeVirtMachineList{},
		"KubeVirtMachineTemplate": &infrav1.KubeVirtMachineTemplateList{},
		"VirtualMachine":          &kubevirtv1.VirtualMachineList{},
		"VirtualMachineInstance":  &kubevirtv1.VirtualMachineInstanceList{},
		"DataVolume":              &cdiv1.DataVolumeList{},
		"PersistentVolumeClaim":   &corev1.PersistentVolumeClaimList{},
		"Secret":                  &corev1.SecretList{},
		"ConfigMap":               &corev1.ConfigMapList{},
		"WorkerClass":             &workerclassv1.WorkerClassList{},
		"WorkerPlatform":          &workerclassv1.WorkerPlatformList{},
	}
	if bootstrap == harness.BootstrapKubeadm {
		kinds["KubeadmConfig"] = &kubeadmv1.KubeadmConfigList{}
		kinds["KubeadmConfigTemplate"] = &kubeadmv1.KubeadmConfigTemplateList{}
	}
	return kinds
}

// resourceVersions maps "Kind namespace/name" to resourceVersion.
func resourceVersions(ctx context.Context, h *harness.Harness, namespace string, bootstrap harness.Bootstrap) (map[string]string, error) {
	out := map[string]string{}
	for kind, list := range idleKinds(bootstrap) {
		var opts []client.ListOption
		if kind != "WorkerClass" && kind != "WorkerPlatform" {
			opts = append(opts, client.InNamespace(namespace))
		}
		if err := h.Client.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", kind, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			o := item.(client.Object)
			out[kind+" "+client.ObjectKeyFromObject(o).String()] = o.GetResourceVersion()
		}
	}
	return out, nil
}

// idleWindow records the resourceVersions, waits the window, and reports
// what changed and who wrote.
func idleWindow(ctx context.Context, h *harness.Harness, w *harness.WorkloadCluster, bootstrap harness.Bootstrap, counts *counters, window time.Duration) (IdleReport, error) {
	report := IdleReport{Window: window}
	if window <= 0 {
		return report, nil
	}
	before, err := resourceVersions(ctx, h, w.Key.Namespace, bootstrap)
	if err != nil {
		return report, err
	}
	if err := counts.Reset(ctx); err != nil {
		return report, err
	}
	select {
	case <-ctx.Done():
		return report, ctx.Err()
	case <-time.After(window):
	}
	state, err := counts.State(ctx)
	if err != nil {
		return report, err
	}
	for _, c := range state.Requests {
		if c.IsWrite() && c.Component != requests.ComponentSim && c.Component != requests.ComponentDriver {
			report.Writes = append(report.Writes, c)
		}
	}
	after, err := resourceVersions(ctx, h, w.Key.Namespace, bootstrap)
	if err != nil {
		return report, err
	}
	report.Objects = len(before)
	report.PerKind = map[string]int{}
	for k := range before {
		report.PerKind[strings.SplitN(k, " ", 2)[0]]++
	}
	for k, v := range after {
		if before[k] != v {
			report.Changed = append(report.Changed, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			report.Changed = append(report.Changed, k+" (deleted)")
		}
	}
	slices.Sort(report.Changed)
	return report, nil
}
