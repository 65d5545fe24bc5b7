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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// KubeVirt and CDI rewrite status fields this controller never reads (guest
// OS and agent info, volume and migration status, timestamps of their own
// conditions), and the cache resyncs every object. An update of a
// VirtualMachine, VirtualMachineInstance or DataVolume reconciles its
// machine only when it changes the view below: exactly what conditions.go
// and the deletion read. Creates and deletes always pass; the
// KubeVirtMachine's own resync still reads every object afresh
// (watchview.Changed). The Machine's updates pass only when its
// watchview.Machine changes: this controller reads none of its status.

// machineView is what the controller reads of a Machine.
func machineView(m *clusterv1.Machine) any { return watchview.OfMachine(m) }

// objectView is what the controller reads of any of the three kinds'
// metadata: the label that maps it to its machine, its controller and
// whether it is being deleted.
type objectView struct {
	Machine    string
	Controller types.UID
	Deleting   bool
}

func viewOfObject(o client.Object) objectView {
	v := objectView{Machine: o.GetLabels()[infrav1.MachineNameLabel], Deleting: !o.GetDeletionTimestamp().IsZero()}
	if ref := metav1.GetControllerOf(o); ref != nil {
		v.Controller = ref.UID
	}
	return v
}

type virtualMachineView struct {
	Meta            objectView
	RunStrategy     *kubevirtv1.VirtualMachineRunStrategy
	Volumes         []kubevirtv1.Volume
	PrintableStatus kubevirtv1.VirtualMachinePrintableStatus
	FailedStarts    int
	Failure         string
}

func viewOfVirtualMachine(vm *kubevirtv1.VirtualMachine) any {
	v := virtualMachineView{
		Meta:            viewOfObject(vm),
		RunStrategy:     vm.Spec.RunStrategy,
		PrintableStatus: vm.Status.PrintableStatus,
		Failure:         vmFailureDetail(vm),
	}
	if vm.Spec.Template != nil {
		v.Volumes = vm.Spec.Template.Spec.Volumes
	}
	if vm.Status.StartFailure != nil {
		v.FailedStarts = vm.Status.StartFailure.ConsecutiveFailCount
	}
	return v
}

type instanceView struct {
	Meta         objectView
	Phase        kubevirtv1.VirtualMachineInstancePhase
	Reason       string
	NodeName     string
	Hostname     string
	Ready        bool
	PodScheduled *kubevirtv1.VirtualMachineInstanceCondition
	LaunchFailed *kubevirtv1.VirtualMachineInstanceCondition
	IPs          []string
	Evacuation   string
	Migration    kubevirtv1.VirtualMachineInstanceMigrationState
}

func viewOfInstance(vmi *kubevirtv1.VirtualMachineInstance) any {
	v := instanceView{
		Meta:     viewOfObject(vmi),
		Phase:    vmi.Status.Phase,
		Reason:   vmi.Status.Reason,
		NodeName: vmi.Status.NodeName,
		Hostname: vmi.Spec.Hostname,
		Ready:    instanceReady(vmi),
		IPs:      instanceIPs(vmi),
		// KubeVirt evacuates the instance: the provider stops it
		// (External) or shows its live migration.
		Evacuation: vmi.Status.EvacuationNodeName,
	}
	if m := vmi.Status.MigrationState; m != nil {
		v.Migration = kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: m.MigrationUID, TargetNode: m.TargetNode, Completed: m.Completed, Failed: m.Failed}
	}
	if c := instanceCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil {
		v.PodScheduled = &kubevirtv1.VirtualMachineInstanceCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	if c := launchRefusal(vmi); c != nil {
		v.LaunchFailed = &kubevirtv1.VirtualMachineInstanceCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	return v
}

type dataVolumeView struct {
	Meta         objectView
	Phase        cdiv1.DataVolumePhase
	Progress     cdiv1.DataVolumeProgress
	RestartCount int32
	Running      string
}

func viewOfDataVolume(dv *cdiv1.DataVolume) any {
	return dataVolumeView{
		Meta:         viewOfObject(dv),
		Phase:        dv.Status.Phase,
		Progress:     dv.Status.Progress,
		RestartCount: dv.Status.RestartCount,
		Running:      detail(dataVolumeCondition(dv, cdiv1.DataVolumeRunning)),
	}
}
