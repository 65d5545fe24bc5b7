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

package qemu

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	kubevirtstatus "github.com/cozystack/cluster-api-workers/test/sim/kubevirt/status"
)

// Status mapping without QEMU or an apiserver: what the runner writes for
// each state of a guest, a VM and an import, as KubeVirt and CDI (and
// test/sim/kubevirt) report it.

func TestContainerDiskMapping(t *testing.T) {
	worker, other := Disk{Dir: "/disks/worker"}, Disk{Dir: "/disks/other"}
	r := &Runner{opts: RunnerOptions{ContainerDisks: map[string]Disk{
		"quay.io/kairos/worker:v1.36.3": worker,
		"busybox":                       other,
	}}}
	for _, tc := range []struct {
		name, ref string
		want      Disk
		mapped    bool
	}{
		{"the exact reference maps", "quay.io/kairos/worker:v1.36.3", worker, true},
		{"a Docker Hub short name maps to its full form", "docker.io/library/busybox:latest", other, true},
		{"an untagged reference is the latest tag", "busybox:latest", other, true},
		{"another tag does not map", "quay.io/kairos/worker:v1.35.0", Disk{}, false},
		{"another registry does not map", "ghcr.io/kairos/worker:v1.36.3", Disk{}, false},
		{"an invalid reference does not map", "Not A Reference", Disk{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := r.containerDisk(tc.ref)
			g.Expect(ok).To(Equal(tc.mapped))
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestNewRunnerRejectsAnInvalidContainerDiskReference(t *testing.T) {
	g := NewWithT(t)
	_, err := NewRunner(RunnerOptions{Disk: testDisk(t), ContainerDisks: map[string]Disk{"not a reference": {}}})
	g.Expect(err).To(MatchError(ContainSubstring("RunnerOptions.ContainerDisks")))
	_, err = NewRunner(RunnerOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("RunnerOptions.Disk")))
}

func TestBootVolumes(t *testing.T) {
	cloudInit := kubevirtv1.Volume{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{}}}
	container := kubevirtv1.Volume{Name: "root", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "x"}}}
	data := kubevirtv1.Volume{Name: "data", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "dv"}}}
	for _, tc := range []struct {
		name               string
		disks              []kubevirtv1.Disk
		volumes            []kubevirtv1.Volume
		wantRoot, wantInit string
	}{
		{"the disk of boot order 1 is the root", []kubevirtv1.Disk{{Name: "data"}, {Name: "root", BootOrder: ptr.To[uint](1)}, {Name: "cloudinit"}},
			[]kubevirtv1.Volume{container, data, cloudInit}, "root", "cloudinit"},
		{"without a boot order the first disk is the root", []kubevirtv1.Disk{{Name: "data"}, {Name: "root"}, {Name: "cloudinit"}},
			[]kubevirtv1.Volume{container, data, cloudInit}, "data", "cloudinit"},
		{"the cloud-init disk is never the root", []kubevirtv1.Disk{{Name: "cloudinit"}, {Name: "root"}},
			[]kubevirtv1.Volume{cloudInit, container}, "root", "cloudinit"},
		{"no disks, no root", nil, []kubevirtv1.Volume{cloudInit}, "", "cloudinit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			vmi := &kubevirtv1.VirtualMachineInstance{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{Disks: tc.disks}}, Volumes: tc.volumes,
			}}
			root, init := bootVolumes(vmi)
			g.Expect(nameOf(root)).To(Equal(tc.wantRoot))
			g.Expect(nameOf(init)).To(Equal(tc.wantInit))
		})
	}
}

func nameOf(v *kubevirtv1.Volume) string {
	if v == nil {
		return ""
	}
	return v.Name
}

func TestInstanceStatus(t *testing.T) {
	withNIC := func() *kubevirtv1.VirtualMachineInstance {
		return &kubevirtv1.VirtualMachineInstance{Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
			Devices: kubevirtv1.Devices{Interfaces: []kubevirtv1.Interface{{Name: "default"}}},
		}}}
	}
	t.Run("a running guest is Scheduled then Running, ready, at the guest address", func(t *testing.T) {
		g := NewWithT(t)
		vmi := withNIC()
		runInstance(vmi, "host")
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		g.Expect(vmi.Status.PhaseTransitionTimestamps).To(HaveLen(2))
		g.Expect(vmi.Status.PhaseTransitionTimestamps[0].Phase).To(Equal(kubevirtv1.Scheduled))
		g.Expect(vmi.Status.NodeName).To(Equal("host"))
		g.Expect(vmi.Labels).To(HaveKeyWithValue(kubevirtv1.NodeNameLabel, "host"))
		g.Expect(kubevirtstatus.InstanceReady(vmi)).To(BeTrue())
		g.Expect(vmi.Status.Interfaces).To(ConsistOf(HaveField("IP", GuestAddress)))
		g.Expect(vmi.Status.Interfaces[0].Name).To(Equal("default"))
		before := vmi.DeepCopy()
		runInstance(vmi, "host")
		g.Expect(vmi).To(Equal(before), "reporting a running guest again changes nothing")
	})
	t.Run("an instance waiting for a guest slot is unschedulable", func(t *testing.T) {
		g := NewWithT(t)
		vmi := withNIC()
		markUnschedulable(vmi, 2)
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Scheduling))
		c := kubevirtstatus.InstanceCondition(vmi, kubevirtstatus.PodScheduled)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(corev1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(corev1.PodReasonUnschedulable))
		g.Expect(c.Message).To(ContainSubstring("at most 2 guests"))
		g.Expect(kubevirtstatus.InstanceReady(vmi)).To(BeFalse())
	})
	t.Run("an unmapped container disk leaves the pod scheduled and the image not pulled", func(t *testing.T) {
		g := NewWithT(t)
		vmi := withNIC()
		pullFailed(vmi, "host", pullFailureMessage("quay.io/x/y:v1"))
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Scheduling))
		g.Expect(kubevirtstatus.InstanceCondition(vmi, kubevirtstatus.PodScheduled).Status).To(Equal(corev1.ConditionTrue))
		ready := kubevirtstatus.InstanceCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
		g.Expect(ready.Reason).To(Equal(errImagePullReason))
		g.Expect(ready.Message).To(ContainSubstring(`"quay.io/x/y:v1"`))
	})
	for _, tc := range []struct {
		name   string
		err    error
		phase  kubevirtv1.VirtualMachineInstancePhase
		reason string
	}{
		{"a QEMU that exits cleanly (guest power-off) is Succeeded", nil, kubevirtv1.Succeeded, "GuestShutdown"},
		{"a killed or failed QEMU is Failed, as a crashed virt-launcher", errors.New("signal: killed"), kubevirtv1.Failed, "GuestCrashed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			vmi := withNIC()
			runInstance(vmi, "host")
			phase, reason, message := exitPhase(tc.err)
			stopInstance(vmi, phase, reason, message)
			g.Expect(vmi.Status.Phase).To(Equal(tc.phase))
			g.Expect(vmi.Status.Reason).To(Equal(tc.reason))
			g.Expect(kubevirtstatus.InstanceReady(vmi)).To(BeFalse())
			g.Expect(kubevirtstatus.Finished(vmi)).To(BeTrue())
			g.Expect(stoppedAt(vmi)).NotTo(BeZero())
		})
	}
}

func TestVirtualMachineStatus(t *testing.T) {
	always := kubevirtv1.RunStrategyAlways
	halted := kubevirtv1.RunStrategyHalted
	vm := func(strategy kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(strategy)}}
	}
	vmiWith := func(change func(*kubevirtv1.VirtualMachineInstance)) *kubevirtv1.VirtualMachineInstance {
		vmi := &kubevirtv1.VirtualMachineInstance{Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
			Devices: kubevirtv1.Devices{Interfaces: []kubevirtv1.Interface{{Name: "default"}}},
		}}}
		change(vmi)
		return vmi
	}
	deleting := vm(always)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	for _, tc := range []struct {
		name      string
		vm        *kubevirtv1.VirtualMachine
		vmi       *kubevirtv1.VirtualMachineInstance
		disks     diskReadiness
		wouldRun  bool
		printable kubevirtv1.VirtualMachinePrintableStatus
		ready     bool
		condition kubevirtv1.VirtualMachineConditionType
	}{
		{"a VM whose disk imports is Provisioning", vm(always), nil,
			diskReadiness{printable: kubevirtv1.VirtualMachineStatusProvisioning, message: "DataVolume x is ImportInProgress"}, true,
			kubevirtv1.VirtualMachineStatusProvisioning, false, ""},
		{"a VM whose import fails shows DataVolumeError", vm(always), nil,
			dataVolumeDiskState(&cdiv1.DataVolume{Status: cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, Conditions: []cdiv1.DataVolumeCondition{
				{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: importErrorReason}}}}), true,
			kubevirtv1.VirtualMachineStatusDataVolumeError, false, ""},
		{"a halted VM is Stopped", vm(halted), nil, diskReadiness{ready: true}, false, kubevirtv1.VirtualMachineStatusStopped, false, ""},
		{"a VM about to start an instance is Starting", vm(always), nil, diskReadiness{ready: true}, true, kubevirtv1.VirtualMachineStatusStarting, false, ""},
		{"a VM whose instance waits for a guest slot is ErrorUnschedulable", vm(always),
			vmiWith(func(v *kubevirtv1.VirtualMachineInstance) { markUnschedulable(v, 2) }), diskReadiness{ready: true}, true,
			kubevirtv1.VirtualMachineStatusUnschedulable, false, podScheduledCondition},
		{"a VM whose container disk is not mapped is ErrImagePull with a Failure", vm(always),
			vmiWith(func(v *kubevirtv1.VirtualMachineInstance) { pullFailed(v, "host", pullFailureMessage("x")) }), diskReadiness{ready: true}, true,
			kubevirtv1.VirtualMachineStatusErrImagePull, false, kubevirtv1.VirtualMachineFailure},
		{"a VM whose guest runs is Running and ready", vm(always),
			vmiWith(func(v *kubevirtv1.VirtualMachineInstance) { runInstance(v, "host") }), diskReadiness{ready: true}, true,
			kubevirtv1.VirtualMachineStatusRunning, true, ""},
		{"a VM whose guest was killed restarts it under Always", vm(always),
			vmiWith(func(v *kubevirtv1.VirtualMachineInstance) {
				runInstance(v, "host")
				stopInstance(v, kubevirtv1.Failed, "GuestCrashed", "QEMU exited: signal: killed")
			}), diskReadiness{ready: true}, true,
			kubevirtv1.VirtualMachineStatusStarting, false, ""},
		{"a VM whose guest powered off stays Stopped under Halted", vm(halted),
			vmiWith(func(v *kubevirtv1.VirtualMachineInstance) {
				runInstance(v, "host")
				stopInstance(v, kubevirtv1.Succeeded, "GuestShutdown", "the guest powered off")
			}), diskReadiness{ready: true}, false,
			kubevirtv1.VirtualMachineStatusStopped, false, ""},
		{"a deleted VM is Terminating", deleting, nil, diskReadiness{ready: true}, true, kubevirtv1.VirtualMachineStatusTerminating, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := virtualMachineStatus(tc.vm, tc.vmi, tc.disks, tc.wouldRun)
			g.Expect(st.PrintableStatus).To(Equal(tc.printable))
			g.Expect(st.Ready).To(Equal(tc.ready))
			g.Expect(st.Created).To(Equal(tc.vmi != nil))
			g.Expect(st.Conditions[0].Type).To(Equal(kubevirtv1.VirtualMachineReady))
			g.Expect(st.Conditions[0].Status == corev1.ConditionTrue).To(Equal(tc.ready))
			if tc.condition != "" {
				g.Expect(st.Conditions).To(ContainElement(HaveField("Type", tc.condition)))
			} else {
				g.Expect(st.Conditions).To(HaveLen(1))
			}
		})
	}
}

func TestImportStatus(t *testing.T) {
	for _, tc := range []struct {
		name      string
		progress  importProgress
		restarts  int32
		lastError string
		done      bool
		phase     cdiv1.DataVolumePhase
		percent   cdiv1.DataVolumeProgress
		running   corev1.ConditionStatus
		reason    string
	}{
		{"an import that has not read its source is ImportScheduled", importProgress{}, 0, "", false, cdiv1.ImportScheduled, "N/A", corev1.ConditionFalse, "Pending"},
		{"an import that reads reports its progress", importProgress{started: true, written: 1, all: 4}, 0, "", false, cdiv1.ImportInProgress, "25.00%", corev1.ConditionTrue, "Pod is running"},
		{"an import of unknown size reports N/A", importProgress{started: true, written: 1, all: -1}, 0, "", false, cdiv1.ImportInProgress, "N/A", corev1.ConditionTrue, "Pod is running"},
		{"a failing import reports the importer's error and restarts", importProgress{}, 3, "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found",
			false, cdiv1.ImportInProgress, "N/A", corev1.ConditionFalse, importErrorReason},
		{"a retry that reads again reports progress", importProgress{started: true, written: 2, all: 4}, 1, "an earlier failure", false, cdiv1.ImportInProgress, "50.00%", corev1.ConditionTrue, "Pod is running"},
		{"a finished import is Succeeded", importProgress{started: true, written: 4, all: 4}, 1, "", true, cdiv1.Succeeded, "100.0%", corev1.ConditionFalse, "Completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := &cdiv1.DataVolumeStatus{}
			importStatus(st, "root", tc.progress, tc.restarts, tc.lastError, tc.done)
			g.Expect(st.Phase).To(Equal(tc.phase))
			g.Expect(st.Progress).To(Equal(tc.percent))
			g.Expect(st.RestartCount).To(Equal(tc.restarts))
			dv := &cdiv1.DataVolume{Status: *st}
			var running *cdiv1.DataVolumeCondition
			for i := range st.Conditions {
				if st.Conditions[i].Type == cdiv1.DataVolumeRunning {
					running = &st.Conditions[i]
				}
			}
			g.Expect(running).NotTo(BeNil())
			g.Expect(running.Status).To(Equal(tc.running))
			g.Expect(running.Reason).To(Equal(tc.reason))
			g.Expect(importerFailing(dv)).To(Equal(tc.reason == importErrorReason))
			g.Expect(st.Conditions).To(ContainElement(And(HaveField("Type", cdiv1.DataVolumeBound), HaveField("Status", corev1.ConditionTrue))))
		})
	}
}
