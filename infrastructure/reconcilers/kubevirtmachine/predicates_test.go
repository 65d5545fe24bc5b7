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
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

func TestUpdatesPassOnlyWhenTheyChangeWhatTheControllerReads(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "w", Namespace: "ns", Labels: map[string]string{infrav1.MachineNameLabel: "w"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "KubeVirtMachine", Name: "w", UID: "kvm-1", Controller: ptr.To(true)}}}
	baseVM := &kubevirtv1.VirtualMachine{ObjectMeta: meta, Spec: kubevirtv1.VirtualMachineSpec{
		Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Volumes: []kubevirtv1.Volume{{Name: "root", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "img"}}}}}}},
		Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: kubevirtv1.VirtualMachineStatusStarting}}
	baseVMI := &kubevirtv1.VirtualMachineInstance{ObjectMeta: meta, Spec: kubevirtv1.VirtualMachineInstanceSpec{Hostname: "w"},
		Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Scheduled, NodeName: "infra-1"}}
	baseDV := &cdiv1.DataVolume{ObjectMeta: meta, Status: cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, Progress: "10.00%"}}

	vm := func(change func(*kubevirtv1.VirtualMachine)) client.Object {
		o := baseVM.DeepCopy()
		change(o)
		return o
	}
	vmi := func(change func(*kubevirtv1.VirtualMachineInstance)) client.Object {
		o := baseVMI.DeepCopy()
		change(o)
		return o
	}
	dv := func(change func(*cdiv1.DataVolume)) client.Object {
		o := baseDV.DeepCopy()
		change(o)
		return o
	}
	vmPredicate, vmiPredicate, dvPredicate := watchview.Changed(viewOfVirtualMachine), watchview.Changed(viewOfInstance), watchview.Changed(viewOfDataVolume)
	for _, tt := range []struct {
		name      string
		pass      func(event.UpdateEvent) bool
		old, new  client.Object
		reconcile bool
	}{
		{"a resync of a VM is dropped", vmPredicate.Update, baseVM, baseVM.DeepCopy(), false},
		{"KubeVirt's observed generation of a VM is dropped", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) { v.Status.ObservedGeneration = 7; v.Status.Created = true }), false},
		{"KubeVirt's finalizer on a VM is dropped", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) {
				v.Finalizers = []string{kubevirtv1.VirtualMachineControllerFinalizer}
			}), false},
		{"a VM's printable status passes", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) {
				v.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusErrImagePull
			}), true},
		{"a VM's failed starts pass", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) {
				v.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}
			}), true},
		{"a VM's failure message passes", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) {
				v.Status.Conditions = []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Message: "boom"}}
			}), true},
		{"a VM's deletion passes", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) { v.DeletionTimestamp = ptr.To(metav1.Now()) }), true},
		{"a VM's run strategy passes", vmPredicate.Update, baseVM,
			vm(func(v *kubevirtv1.VirtualMachine) { v.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted) }), true},

		{"an instance's guest OS info is dropped", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) { v.Status.GuestOSInfo.Name = "Kairos" }), false},
		{"an instance's LiveMigratable condition is dropped", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue})
			}), false},
		{"an instance's Ready=False reason is dropped", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: "GuestNotRunning"})
			}), false},
		{"an instance's phase passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) { v.Status.Phase = kubevirtv1.Running }), true},
		{"an instance turning ready passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue})
			}), true},
		{"an instance's address passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.5"}}
			}), true},
		{"an instance's unschedulable condition passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes"})
			}), true},
		{"virt-controller failing to create the launcher Pod passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: "FailedCreate", Message: "failed to render launch manifest"})
			}), true},
		{"an instance's other Synchronized reasons are dropped", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: "ErrImagePull"})
			}), false},
		{"an instance's node passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) { v.Status.NodeName = "infra-2" }), true},
		{"an instance's evacuation passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) { v.Status.EvacuationNodeName = "infra-1" }), true},
		{"an instance's migration target passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-1", TargetNode: "infra-2"}
			}), true},
		{"an instance's migration transfer details are dropped", vmiPredicate.Update,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-1", TargetNode: "infra-2"}
			}),
			vmi(func(v *kubevirtv1.VirtualMachineInstance) {
				v.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-1", TargetNode: "infra-2", TargetNodeAddress: "10.0.0.9"}
			}), false},
		{"an instance's stop reason passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) { v.Status.Reason = "Evicted" }), true},
		{"an instance's machine label passes", vmiPredicate.Update, baseVMI,
			vmi(func(v *kubevirtv1.VirtualMachineInstance) { v.Labels = nil }), true},

		{"a DataVolume's claim name is dropped", dvPredicate.Update, baseDV,
			dv(func(d *cdiv1.DataVolume) { d.Status.ClaimName = "w-root" }), false},
		{"a DataVolume's progress passes", dvPredicate.Update, baseDV,
			dv(func(d *cdiv1.DataVolume) { d.Status.Progress = "42.50%" }), true},
		{"a DataVolume's phase passes", dvPredicate.Update, baseDV,
			dv(func(d *cdiv1.DataVolume) { d.Status.Phase = cdiv1.Succeeded }), true},
		{"a DataVolume's importer restarts pass", dvPredicate.Update, baseDV,
			dv(func(d *cdiv1.DataVolume) { d.Status.RestartCount = 1 }), true},
		{"a DataVolume's Running message passes", dvPredicate.Update, baseDV,
			dv(func(d *cdiv1.DataVolume) {
				d.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Message: "404"}}
			}), true},
		{"a DataVolume's new controller passes", dvPredicate.Update, baseDV,
			dv(func(d *cdiv1.DataVolume) { d.OwnerReferences[0].UID = "kvm-2" }), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.pass(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.reconcile {
				t.Errorf("update passes = %v, want %v", got, tt.reconcile)
			}
		})
	}

	// Creates and deletes always pass.
	if !vmiPredicate.Create(event.CreateEvent{Object: baseVMI}) || !vmiPredicate.Delete(event.DeleteEvent{Object: baseVMI}) {
		t.Error("a create or delete of an instance was dropped")
	}
}
