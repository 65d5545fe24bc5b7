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
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func dataVolume(phase cdiv1.DataVolumePhase, progress string, restarts int32, runningMessage string) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "w-root"}}
	dv.Status = cdiv1.DataVolumeStatus{Phase: phase, Progress: cdiv1.DataVolumeProgress(progress), RestartCount: restarts}
	if runningMessage != "" {
		dv.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Error", Message: runningMessage}}
	}
	return dv
}

func TestBootDiskCondition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       observation
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"a container disk is ready at once",
			observation{containerDisk: "r@sha256:1"},
			metav1.ConditionTrue, infrav1.ContainerDiskReason, "Root disk is the container disk r@sha256:1"},
		{"a DataVolume not created yet is pending",
			observation{rootDataVolumeName: "w-root"},
			metav1.ConditionUnknown, infrav1.DiskPendingReason, "Creating DataVolume w-root"},
		{"a slow import reports its progress and is never a failure",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "3.25%", 0, ""), importFailureRestarts: 3},
			metav1.ConditionUnknown, infrav1.ImportingReason, "DataVolume w-root: ImportInProgress, 3.25%"},
		{"an import with a few transient restarts keeps importing",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "N/A", 2, "connection reset"), importFailureRestarts: 3},
			metav1.ConditionUnknown, infrav1.ImportingReason, "DataVolume w-root: ImportInProgress"},
		{"an importer that keeps restarting is a failed import",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "0.00%", 3, "Unable to connect to http data source: 404"), importFailureRestarts: 3},
			metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root: its importer pod restarted 3 times: Unable to connect to http data source: 404"},
		{"a failed import names the count that failed it, not CDI's, which keeps growing",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "N/A", 7, "Unable to connect to http data source: 404"), importFailureRestarts: 3},
			metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root: its importer pod restarted 3 times: Unable to connect to http data source: 404"},
		{"a failed import keeps CDI's words while the restarted importer runs",
			// Real CDI has its words in the Running condition only while the
			// importer is down.
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "N/A", 4, ""), importFailureRestarts: 3,
				bootDisk: &metav1.Condition{Type: infrav1.BootDiskReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.ImportFailedReason,
					Message: "DataVolume w-root: its importer pod restarted 3 times: Unable to connect to http data source: 404"}},
			metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root: its importer pod restarted 3 times: Unable to connect to http data source: 404"},
		{"a failed import takes CDI's new words",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "N/A", 5, "x509: certificate signed by unknown authority"), importFailureRestarts: 3,
				bootDisk: &metav1.Condition{Type: infrav1.BootDiskReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.ImportFailedReason,
					Message: "DataVolume w-root: its importer pod restarted 3 times: Unable to connect to http data source: 404"}},
			metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root: its importer pod restarted 3 times: x509: certificate signed by unknown authority"},
		{"a failed import keeps no words of another DataVolume's",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "N/A", 3, ""), importFailureRestarts: 3,
				bootDisk: &metav1.Condition{Type: infrav1.BootDiskReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.ImportFailedReason,
					Message: "DataVolume old-root: its importer pod restarted 3 times: Unable to connect to http data source: 404"}},
			metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root: its importer pod restarted 3 times"},
		{"CDI's Failed phase is a failed import",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Failed, "", 0, "source PVC not found"), importFailureRestarts: 3},
			metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root failed: source PVC not found"},
		{"a clone in progress reports cloning",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.CSICloneInProgress, "", 0, "")},
			metav1.ConditionUnknown, infrav1.CloningReason, "DataVolume w-root: CSICloneInProgress"},
		{"a volume waiting for its first consumer is pending",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.WaitForFirstConsumer, "", 0, "")},
			metav1.ConditionUnknown, infrav1.DiskPendingReason, "DataVolume w-root: WaitForFirstConsumer"},
		{"a DataVolume CDI has not seen yet is pending",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume("", "", 0, "")},
			metav1.ConditionUnknown, infrav1.DiskPendingReason, "DataVolume w-root: waiting for CDI"},
		{"a succeeded DataVolume is ready",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 1, "")},
			metav1.ConditionTrue, infrav1.DiskReadyReason, "DataVolume w-root is ready"},
		{"a DataVolume gone after provisioning leaves its PVC behind the running VM",
			observation{provisioned: true, rootDataVolumeName: "w-root"},
			metav1.ConditionTrue, infrav1.DiskReadyReason, "DataVolume w-root is gone; its PersistentVolumeClaim backs the running VM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := bootDiskCondition(&tc.o)
			g.Expect(c.Type).To(Equal(infrav1.BootDiskReadyCondition))
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.message))
		})
	}
}

type vmOption func(*kubevirtv1.VirtualMachine)

func vm(opts ...vmOption) *kubevirtv1.VirtualMachine {
	v := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "w"}}
	v.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyAlways)
	for _, o := range opts {
		o(v)
	}
	return v
}

func printable(s kubevirtv1.VirtualMachinePrintableStatus) vmOption {
	return func(v *kubevirtv1.VirtualMachine) { v.Status.PrintableStatus = s }
}

func runStrategy(s kubevirtv1.VirtualMachineRunStrategy) vmOption {
	return func(v *kubevirtv1.VirtualMachine) { v.Spec.RunStrategy = &s }
}

func vmFailure(message string) vmOption {
	return func(v *kubevirtv1.VirtualMachine) {
		v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineCondition{
			Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Message: message})
	}
}

type vmiOption func(*kubevirtv1.VirtualMachineInstance)

func vmi(uid string, phase kubevirtv1.VirtualMachineInstancePhase, opts ...vmiOption) *kubevirtv1.VirtualMachineInstance {
	i := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: types.UID("vmi-" + uid)}}
	i.Status.Phase = phase
	i.Status.NodeName = "infra-1"
	for _, o := range opts {
		o(i)
	}
	return i
}

func ready(i *kubevirtv1.VirtualMachineInstance) {
	i.Status.Conditions = append(i.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue})
}

func address(ip string) vmiOption {
	return func(i *kubevirtv1.VirtualMachineInstance) {
		i.Status.Interfaces = append(i.Status.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{Name: "default", IP: ip, IPs: []string{ip}})
	}
}

// unschedulable is the PodScheduled=False virt-controller writes itself
// about a missing claim: without timestamps.
func unschedulable(message string) vmiOption {
	return func(i *kubevirtv1.VirtualMachineInstance) {
		i.Status.Conditions = append(i.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
			Type: kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: message})
	}
}

// podUnschedulable is the launcher Pod's PodScheduled=False that
// virt-controller copies onto the instance, with the scheduler's
// timestamps.
func podUnschedulable(message string) vmiOption {
	return func(i *kubevirtv1.VirtualMachineInstance) {
		i.Status.Conditions = append(i.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
			Type: kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: message, LastTransitionTime: metav1.NewTime(time.Unix(1764720000, 0))})
	}
}

// evacuated is an instance KubeVirt marked for evacuation from node under
// an eviction strategy ("" names none).
func evacuated(node string, strategy kubevirtv1.EvictionStrategy) vmiOption {
	return func(i *kubevirtv1.VirtualMachineInstance) {
		i.Status.EvacuationNodeName = node
		if strategy != "" {
			i.Spec.EvictionStrategy = &strategy
		}
	}
}

func reason(r string) vmiOption {
	return func(i *kubevirtv1.VirtualMachineInstance) { i.Status.Reason = r }
}

func TestVirtualMachineCondition(t *testing.T) {
	const disk = "r@sha256:1"
	for _, tc := range []struct {
		name    string
		o       observation
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"no VM yet is provisioning",
			observation{},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Creating the VirtualMachine"},
		{"a VM deleted after provisioning needs replacement",
			observation{provisioned: true},
			metav1.ConditionFalse, infrav1.VirtualMachineDeletedReason, "VirtualMachine was deleted after the machine was provisioned"},
		{"a VM waiting for KubeVirt to start its instance is provisioning",
			observation{vm: vm()},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a VM waiting for its DataVolume waits for the disk",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusProvisioning))},
			metav1.ConditionUnknown, infrav1.WaitingForDiskReason, "VirtualMachine waits for its volumes (Provisioning)"},
		{"an unschedulable VM is a failure",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Scheduling, podUnschedulable("0/3 nodes are available: 3 Insufficient memory."))},
			metav1.ConditionFalse, infrav1.UnschedulableReason, "VM's pod cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory."},
		{"an unschedulable instance is a failure before KubeVirt updates the VM",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Scheduling, podUnschedulable("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity."))},
			metav1.ConditionFalse, infrav1.UnschedulableReason, "VM's pod cannot be scheduled: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity."},
		{"a container disk that cannot be pulled is a failure",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusImagePullBackOff), vmFailure("Back-off pulling image")), vmi: vmi("1", kubevirtv1.Scheduled)},
			metav1.ConditionFalse, infrav1.ImagePullFailedReason, "Container disk cannot be pulled (ImagePullBackOff): Back-off pulling image"},
		{"KubeVirt backing off a crashing VM is a failure",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusCrashLoopBackOff), func(v *kubevirtv1.VirtualMachine) {
				v.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 4}
			})},
			metav1.ConditionFalse, infrav1.StartFailedReason, "KubeVirt backs off starting the VM after 4 consecutive failed starts"},
		{"a missing PVC is a failure",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusPvcNotFound))},
			metav1.ConditionFalse, infrav1.VolumeMissingReason, "A PersistentVolumeClaim of the VM does not exist"},
		{"the claim of a DataVolume CDI has not made yet is not missing: the disk is on its way",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Pending, "N/A", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusPvcNotFound)), vmi: vmi("1", kubevirtv1.Pending, unschedulable("PVC ns/w-root does not exist, waiting for it to appear"))},
			metav1.ConditionUnknown, infrav1.WaitingForDiskReason, "VirtualMachine waits for its root disk (ErrorPvcNotFound)"},
		{"the stale unschedulable condition KubeVirt keeps while the disk imports is not a failure",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.ImportInProgress, "40.00%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Pending, unschedulable("PVC ns/w-root does not exist, waiting for it to appear"))},
			metav1.ConditionUnknown, infrav1.WaitingForDiskReason, "VirtualMachine waits for its root disk (ErrorUnschedulable)"},
		{"a pending instance waits for its DataVolume not created yet",
			observation{rootDataVolumeName: "w-root", vm: vm(), vmi: vmi("1", kubevirtv1.Pending)},
			metav1.ConditionUnknown, infrav1.WaitingForDiskReason, "VirtualMachine waits for its root disk (instance Pending)"},
		{"once the disk is ready, an unschedulable instance is a failure again",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Scheduling, podUnschedulable("0/3 nodes are available: 3 Insufficient memory."))},
			metav1.ConditionFalse, infrav1.UnschedulableReason, "VM's pod cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory."},
		{"the instant after the import, before virt-controller made the launcher Pod, is still the start",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Pending, unschedulable("PVC ns/w-root does not exist, waiting for it to appear"))},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"the launcher Pod just made, before virt-controller dropped the claim's condition, is still the start",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Scheduling, unschedulable("PVC ns/w-root does not exist, waiting for it to appear"))},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a VM still Unschedulable of an instance whose launcher Pod is scheduled is starting (the VM's status lags its instance's)",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Scheduled)},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a VM Unschedulable of an instance not in the cache yet is starting",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable))},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a claim reported missing before the import is not missing once the disk is ready",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusPvcNotFound)), vmi: vmi("1", kubevirtv1.Pending)},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a provisioned machine's new instance in that instant is restarting",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("2", kubevirtv1.Pending, unschedulable("PVC ns/w-root does not exist, waiting for it to appear"))},
			metav1.ConditionUnknown, infrav1.InstanceRestartingReason, "KubeVirt starts a new VirtualMachineInstance on the persistent root disk"},
		{"a launcher Pod KubeVirt cannot create after the import is still a refusal",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, ""),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusUnschedulable)), vmi: vmi("1", kubevirtv1.Pending, unschedulable("PVC ns/w-root does not exist, waiting for it to appear"), func(i *kubevirtv1.VirtualMachineInstance) {
					i.Status.Conditions = append(i.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
						Reason: "FailedCreate", Message: "failed to render launch manifest: quota exceeded"})
				})},
			metav1.ConditionUnknown, infrav1.CreateRefusedReason, "KubeVirt cannot create the instance's launcher Pod: failed to render launch manifest: quota exceeded"},
		{"a failed import leaves a missing claim a failure",
			observation{rootDataVolumeName: "w-root", rootDataVolume: dataVolume(cdiv1.Failed, "", 0, "source gone"),
				vm: vm(printable(kubevirtv1.VirtualMachineStatusPvcNotFound))},
			metav1.ConditionFalse, infrav1.VolumeMissingReason, "A PersistentVolumeClaim of the VM does not exist"},
		{"a pending instance is provisioning, with the message of a VM without instance",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Pending)},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a scheduling instance is provisioning, with the same message",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Scheduling)},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a scheduled instance is provisioning, with the same message",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Scheduled)},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"a first instance running before KubeVirt synced its readiness is still starting",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Running, address("10.0.0.5"))},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "Waiting for KubeVirt to start the VirtualMachineInstance"},
		{"the provisioned instance that is no longer ready is not ready",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", vm: vm(), vmi: vmi("1", kubevirtv1.Running, address("10.0.0.5"))},
			metav1.ConditionUnknown, infrav1.InstanceNotReadyReason, "VirtualMachineInstance runs on node infra-1 but is not ready"},
		{"a new instance on a persistent disk running but not ready yet is restarting",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", vm: vm(), vmi: vmi("2", kubevirtv1.Running, address("10.0.0.6"))},
			metav1.ConditionUnknown, infrav1.InstanceRestartingReason, "VirtualMachineInstance restarted on node infra-1 and is not ready yet"},
		{"a new instance on a persistent disk on its way to Running is restarting",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", vm: vm(), vmi: vmi("2", kubevirtv1.Scheduled)},
			metav1.ConditionUnknown, infrav1.InstanceRestartingReason, "KubeVirt starts a new VirtualMachineInstance on the persistent root disk"},
		{"an instance whose launcher Pod KubeVirt cannot create reports KubeVirt's words, as a refusal",
			observation{vm: vm(printable(kubevirtv1.VirtualMachineStatusStarting)), vmi: vmi("1", kubevirtv1.Pending, func(i *kubevirtv1.VirtualMachineInstance) {
				i.Status.Conditions = append(i.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
					Reason: "FailedCreate", Message: "failed to render launch manifest: GPU nvidia.com/TU104GL_Tesla_T4 is not permitted in permittedHostDevices configuration"})
			})},
			metav1.ConditionUnknown, infrav1.CreateRefusedReason, "KubeVirt cannot create the instance's launcher Pod: failed to render launch manifest: GPU nvidia.com/TU104GL_Tesla_T4 is not permitted in permittedHostDevices configuration"},
		{"a new instance on a persistent disk that cannot be scheduled is a failure",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", vm: vm(), vmi: vmi("2", kubevirtv1.Scheduling, podUnschedulable("0/3 nodes are available: 3 Insufficient memory."))},
			metav1.ConditionFalse, infrav1.UnschedulableReason, "VM's pod cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory."},
		{"a ready instance without an address is not provisioned",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready)},
			metav1.ConditionUnknown, infrav1.ProvisioningReason, "VirtualMachineInstance is ready; waiting for it to report an address"},
		{"a ready instance with an address is provisioned",
			observation{vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"the same container-disk instance after provisioning stays provisioned",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"a new instance of a container disk has lost the node's state",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Running, ready, address("10.0.0.6"))},
			metav1.ConditionFalse, infrav1.EphemeralDiskLostReason, "VirtualMachineInstance vmi-1 that booted the container disk has stopped; a new instance boots a blank disk and the node cannot rejoin"},
		{"a stopped container-disk instance has lost the node's state before KubeVirt restarts it",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Failed)},
			metav1.ConditionFalse, infrav1.EphemeralDiskLostReason, "VirtualMachineInstance vmi-1 that booted the container disk has stopped; a new instance boots a blank disk and the node cannot rejoin"},
		{"a gone container-disk instance has lost the node's state",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", nodeJoined: true, containerDisk: disk, vm: vm()},
			metav1.ConditionFalse, infrav1.EphemeralDiskLostReason, "VirtualMachineInstance vmi-1 that booted the container disk has stopped; a new instance boots a blank disk and the node cannot rejoin"},
		{"a new instance of a container disk before the node joined lost nothing: provisioned again",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm(), vmi: vmi("2", kubevirtv1.Running, ready, address("10.0.0.6"))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"a container-disk instance that crashed before the node joined is restarting, not lost",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", containerDisk: disk, vm: vm(), vmi: vmi("1", kubevirtv1.Failed)},
			metav1.ConditionUnknown, infrav1.InstanceRestartingReason, "VirtualMachineInstance failed; KubeVirt starts a new one"},
		{"a new instance on a persistent disk keeps the node: provisioned again",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", vm: vm(), vmi: vmi("2", kubevirtv1.Running, ready, address("10.0.0.6"))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"a persistent-disk VM between instances is restarting",
			observation{provisioned: true, provisionedInstanceUID: "vmi-1", vm: vm()},
			metav1.ConditionUnknown, infrav1.InstanceRestartingReason, "VirtualMachineInstance stopped; KubeVirt starts a new one on the persistent root disk"},
		{"a failed persistent-disk instance with run strategy Always is restarting",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Failed, reason("NodeUnresponsive"))},
			metav1.ConditionUnknown, infrav1.InstanceRestartingReason, "VirtualMachineInstance failed (NodeUnresponsive); KubeVirt starts a new one"},
		{"a failed instance with run strategy Once is a failure",
			observation{provisioned: true, vm: vm(runStrategy(kubevirtv1.RunStrategyOnce)), vmi: vmi("1", kubevirtv1.Failed)},
			metav1.ConditionFalse, infrav1.InstanceFailedReason, "VirtualMachineInstance failed and run strategy Once starts no other"},
		{"a guest that shut down under RerunOnFailure stays stopped",
			observation{provisioned: true, vm: vm(runStrategy(kubevirtv1.RunStrategyRerunOnFailure)), vmi: vmi("1", kubevirtv1.Succeeded)},
			metav1.ConditionFalse, infrav1.InstanceStoppedReason, "VirtualMachineInstance stopped and run strategy RerunOnFailure starts no other"},
		{"a provisioned VM without an instance under Once is stopped",
			observation{provisioned: true, vm: vm(runStrategy(kubevirtv1.RunStrategyOnce))},
			metav1.ConditionFalse, infrav1.InstanceStoppedReason, "VirtualMachineInstance stopped and run strategy Once starts no other"},
		{"KubeVirt leaving an External eviction to the provider: the Machine of a MachineSet is handed to Cluster API",
			observation{provisioned: true, replaceable: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyExternal))},
			metav1.ConditionUnknown, infrav1.EvacuationRequestedReason, "Infrastructure node infra-1 is being drained (eviction strategy External): deleting the Machine, so that Cluster API drains its Node before the instance stops and its MachineSet replaces it"},
		{"an External eviction of a Machine being deleted waits for Cluster API's drain",
			observation{provisioned: true, replaceable: true, machineDeleting: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyExternal))},
			metav1.ConditionUnknown, infrav1.EvacuationRequestedReason, "Infrastructure node infra-1 is being drained (eviction strategy External): the Machine is being deleted; Cluster API drains its Node, then the instance stops"},
		{"an External eviction of a Machine nothing replaces leaves the instance running",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyExternal))},
			metav1.ConditionUnknown, infrav1.EvacuationRequestedReason, "Infrastructure node infra-1 is being drained (eviction strategy External): no MachineSet replaces this Machine, so it is left running; delete the Machine (Cluster API drains its Node first) or move it, and the infrastructure node's drain ends"},
		{"an instance naming no eviction strategy follows the KubeVirt CR's External",
			observation{provisioned: true, replaceable: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", "")),
				clusterEvictionStrategy: ptr.To(kubevirtv1.EvictionStrategyExternal)},
			metav1.ConditionUnknown, infrav1.EvacuationRequestedReason, "Infrastructure node infra-1 is being drained (eviction strategy External): deleting the Machine, so that Cluster API drains its Node before the instance stops and its MachineSet replaces it"},
		{"the instance's own strategy wins over the KubeVirt CR's",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyLiveMigrate)),
				clusterEvictionStrategy: ptr.To(kubevirtv1.EvictionStrategyExternal)},
			metav1.ConditionTrue, infrav1.LiveMigratingReason, "Infrastructure node infra-1 is being drained: KubeVirt live-migrates the instance (eviction strategy LiveMigrate); waiting for its migration"},
		{"KubeVirt live-migrating an instance off a drained node: it keeps running and shows the migration",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyLiveMigrateIfPossible)),
				migration: &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-evacuation-x7k2p"},
					Status: kubevirtv1.VirtualMachineInstanceMigrationStatus{Phase: kubevirtv1.MigrationRunning, MigrationState: &kubevirtv1.VirtualMachineInstanceMigrationState{TargetNode: "infra-2"}}}},
			metav1.ConditionTrue, infrav1.LiveMigratingReason, "Infrastructure node infra-1 is being drained: KubeVirt live-migrates the instance (eviction strategy LiveMigrateIfPossible); migration kubevirt-evacuation-x7k2p is Running to node infra-2"},
		{"a migration KubeVirt has not picked up yet is pending",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyLiveMigrate)),
				migration: &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-evacuation-x7k2p"}}},
			metav1.ConditionTrue, infrav1.LiveMigratingReason, "Infrastructure node infra-1 is being drained: KubeVirt live-migrates the instance (eviction strategy LiveMigrate); migration kubevirt-evacuation-x7k2p is Pending"},
		{"an instance migrated off the drained node runs where it is",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-0", kubevirtv1.EvictionStrategyLiveMigrate))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"an External instance that already left the drained node is not stopped",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-0", kubevirtv1.EvictionStrategyExternal))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"an evacuation mark under strategy None is not acted on",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Running, ready, address("10.0.0.5"), evacuated("infra-1", kubevirtv1.EvictionStrategyNone))},
			metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1"},
		{"an instance on an unreachable node is unknown",
			observation{provisioned: true, vm: vm(), vmi: vmi("1", kubevirtv1.Unknown)},
			metav1.ConditionUnknown, infrav1.InstanceNotReadyReason, "VirtualMachineInstance state is unknown; its node may be unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := virtualMachineCondition(&tc.o)
			g.Expect(c.Type).To(Equal(infrav1.VirtualMachineProvisionedCondition))
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.message))
			// The cache holds only what the controller reads.
			cache := tc.o
			cache.vm, cache.vmi = cachedVM(t, tc.o.vm), cachedVMI(t, tc.o.vmi)
			g.Expect(virtualMachineCondition(&cache)).To(Equal(c), "the cache's copies of the VM and the instance")
		})
	}
}

func TestReadyCondition(t *testing.T) {
	diskTrue := condition(infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.DiskReadyReason, "disk ready")
	diskImporting := condition(infrav1.BootDiskReadyCondition, metav1.ConditionUnknown, infrav1.ImportingReason, "DataVolume w-root: ImportInProgress, 50.00%")
	diskFailed := condition(infrav1.BootDiskReadyCondition, metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root failed")
	vmTrue := condition(infrav1.VirtualMachineProvisionedCondition, metav1.ConditionTrue, infrav1.ProvisionedReason, "VirtualMachineInstance runs on node infra-1")
	vmWaiting := condition(infrav1.VirtualMachineProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForDiskReason, "waiting")
	vmFailed := condition(infrav1.VirtualMachineProvisionedCondition, metav1.ConditionFalse, infrav1.UnschedulableReason, "cannot schedule")
	nameConflict := &blocked{status: metav1.ConditionFalse, reason: infrav1.NameConflictReason, message: "VirtualMachine w exists and is not controlled by this KubeVirtMachine"}
	waiting := waitingFor(infrav1.WaitingForBootstrapDataReason, "Machine has no bootstrap data Secret yet")
	for _, tc := range []struct {
		name         string
		steps        []metav1.Condition
		status       metav1.ConditionStatus
		reason, text string
	}{
		{"both ready is Ready", []metav1.Condition{diskTrue, vmTrue}, metav1.ConditionTrue, infrav1.ReadyReason, "VirtualMachineInstance runs on node infra-1"},
		{"an import in progress is Unknown with its progress, never False", []metav1.Condition{diskImporting, vmWaiting}, metav1.ConditionUnknown, infrav1.ImportingReason, "DataVolume w-root: ImportInProgress, 50.00%"},
		{"a failed import is False and names the disk first", []metav1.Condition{diskFailed, vmWaiting}, metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root failed"},
		{"the disk's failure comes first whatever the order they were set in", []metav1.Condition{vmFailed, diskFailed}, metav1.ConditionFalse, infrav1.ImportFailedReason, "DataVolume w-root failed"},
		{"a VM failure is False", []metav1.Condition{diskTrue, vmFailed}, metav1.ConditionFalse, infrav1.UnschedulableReason, "cannot schedule"},
		{"a VM failure on a disk in progress is False", []metav1.Condition{diskImporting, vmFailed}, metav1.ConditionFalse, infrav1.UnschedulableReason, "cannot schedule"},
		{"a VM in progress on a ready disk is Unknown", []metav1.Condition{diskTrue, vmWaiting}, metav1.ConditionUnknown, infrav1.WaitingForDiskReason, "waiting"},
		{"a step not reported yet is Unknown", []metav1.Condition{vmTrue}, metav1.ConditionUnknown, conditions.NotYetReportedReason, "Condition not yet reported"},
		{"a machine that is not ours says so on every step and is False", nameConflict.conditions(), metav1.ConditionFalse, infrav1.NameConflictReason, "VirtualMachine w exists and is not controlled by this KubeVirtMachine"},
		{"a waiting machine waits on every step", waiting.conditions(), metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason, "Machine has no bootstrap data Secret yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			setConditions(kvm, tc.steps...)
			g.Expect(setReady(kvm)).To(Succeed())
			c := conditions.Get(kvm, infrav1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.text))
			g.Expect(c.ObservedGeneration).To(Equal(int64(2)))
		})
	}
}
