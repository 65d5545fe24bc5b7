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
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// The condition ladder: what a machine's observation (observe.go) says as
// its two steps, BootDiskReady and VirtualMachineProvisioned, and Ready,
// their summary. Every function here is pure, so every rule has a table
// test.

func condition(conditionType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message}
}

// bootDiskCondition reports the root disk. A slow import that makes progress
// stays Unknown with its progress; only CDI's Failed phase or an importer
// that keeps restarting is False.
func bootDiskCondition(o *observation) metav1.Condition {
	const t = infrav1.BootDiskReadyCondition
	if o.ephemeral() {
		return condition(t, metav1.ConditionTrue, infrav1.ContainerDiskReason,
			fmt.Sprintf("Root disk is the container disk %s", o.containerDisk))
	}
	dv := o.rootDataVolume
	if dv == nil {
		if o.provisioned {
			return condition(t, metav1.ConditionTrue, infrav1.DiskReadyReason,
				fmt.Sprintf("DataVolume %s is gone; its PersistentVolumeClaim backs the running VM", o.rootDataVolumeName))
		}
		return condition(t, metav1.ConditionUnknown, infrav1.DiskPendingReason,
			fmt.Sprintf("Creating DataVolume %s", o.rootDataVolumeName))
	}
	name := dv.Name
	running := dataVolumeCondition(dv, cdiv1.DataVolumeRunning)
	switch dv.Status.Phase {
	case cdiv1.Succeeded:
		return condition(t, metav1.ConditionTrue, infrav1.DiskReadyReason, fmt.Sprintf("DataVolume %s is ready", name))
	case cdiv1.Failed:
		return condition(t, metav1.ConditionFalse, infrav1.ImportFailedReason,
			fmt.Sprintf("DataVolume %s failed%s", name, detail(running)))
	}
	if o.importFailureRestarts > 0 && dv.Status.RestartCount >= o.importFailureRestarts {
		// The count that failed it, not CDI's, which keeps growing; and
		// CDI's words, which its Running condition has only while the
		// importer is down, kept from the condition as last written while
		// the restarted importer runs: the message stays the same.
		failed := fmt.Sprintf("DataVolume %s: its importer pod restarted %d times", name, o.importFailureRestarts)
		words := detail(running)
		if kept := o.bootDisk; words == "" && kept != nil && kept.Reason == infrav1.ImportFailedReason && strings.HasPrefix(kept.Message, failed+": ") {
			return condition(t, metav1.ConditionFalse, infrav1.ImportFailedReason, kept.Message)
		}
		return condition(t, metav1.ConditionFalse, infrav1.ImportFailedReason, failed+words)
	}
	progress := ""
	if p := string(dv.Status.Progress); p != "" && p != "N/A" {
		progress = ", " + p
	}
	switch dv.Status.Phase {
	case cdiv1.ImportScheduled, cdiv1.ImportInProgress:
		return condition(t, metav1.ConditionUnknown, infrav1.ImportingReason,
			fmt.Sprintf("DataVolume %s: %s%s", name, dv.Status.Phase, progress))
	case cdiv1.CloneScheduled, cdiv1.CloneInProgress, cdiv1.SnapshotForSmartCloneInProgress,
		cdiv1.CloneFromSnapshotSourceInProgress, cdiv1.SmartClonePVCInProgress, cdiv1.CSICloneInProgress,
		cdiv1.NamespaceTransferInProgress, cdiv1.PrepClaimInProgress, cdiv1.RebindInProgress, cdiv1.ExpansionInProgress:
		return condition(t, metav1.ConditionUnknown, infrav1.CloningReason,
			fmt.Sprintf("DataVolume %s: %s%s", name, dv.Status.Phase, progress))
	}
	phase := string(dv.Status.Phase)
	if phase == "" {
		phase = "waiting for CDI"
	}
	return condition(t, metav1.ConditionUnknown, infrav1.DiskPendingReason, fmt.Sprintf("DataVolume %s: %s", name, phase))
}

func detail(c *cdiv1.DataVolumeCondition) string {
	if c == nil || c.Message == "" {
		return ""
	}
	return ": " + c.Message
}

// virtualMachineCondition reports the VirtualMachine and its instance: the
// first step below that recognises their state says it, in the order a
// machine meets them; an instance still on its way says it starts.
func virtualMachineCondition(o *observation) metav1.Condition {
	for _, step := range []func(*observation) (metav1.Condition, bool){
		virtualMachineGone, waitingForRootDisk, staleClaimStatus,
		virtualMachineStatus, instanceGone, instanceEvacuating, instancePhase,
	} {
		if c, ok := step(o); ok {
			return c
		}
	}
	return pendingInstance(o)
}

// vmProvisioned is the condition the steps of virtualMachineCondition set.
const vmProvisioned = infrav1.VirtualMachineProvisionedCondition

// virtualMachineGone reports a VM not created yet or deleted, and an
// ephemeral machine whose booting instance has stopped after its node
// joined (containerDiskRule).
func virtualMachineGone(o *observation) (metav1.Condition, bool) {
	if o.vm == nil {
		if o.provisioned {
			return condition(vmProvisioned, metav1.ConditionFalse, infrav1.VirtualMachineDeletedReason,
				"VirtualMachine was deleted after the machine was provisioned"), true
		}
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.ProvisioningReason, "Creating the VirtualMachine"), true
	}
	if containerDiskRule(o) == containerDiskLost {
		return condition(vmProvisioned, metav1.ConditionFalse, infrav1.EphemeralDiskLostReason,
			fmt.Sprintf("VirtualMachineInstance %s that booted the container disk has stopped; a new instance boots a blank disk and the node cannot rejoin", o.provisionedInstanceUID)), true
	}
	return metav1.Condition{}, false
}

// waitingForRootDisk reports a VM whose root DataVolume is still being
// made.
func waitingForRootDisk(o *observation) (metav1.Condition, bool) {
	vm, vmi := o.vm, o.vmi
	// virt-controller starts the instance while its DataVolume is still
	// being made: it reports the claim missing (ErrorPvcNotFound), then
	// keeps the stale PodScheduled=False it wrote about the missing claim
	// (ErrorUnschedulable) for the whole import, since no launcher Pod
	// exists before the disk is ready. Neither is a failure then.
	if o.rootDataVolumeName != "" && bootDiskCondition(o).Status == metav1.ConditionUnknown {
		switch vm.Status.PrintableStatus {
		case kubevirtv1.VirtualMachineStatusPvcNotFound, kubevirtv1.VirtualMachineStatusUnschedulable,
			kubevirtv1.VirtualMachineStatusProvisioning, kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding,
			kubevirtv1.VirtualMachineStatusDataVolumeError:
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.WaitingForDiskReason,
				fmt.Sprintf("VirtualMachine waits for its root disk (%s)", vm.Status.PrintableStatus)), true
		}
		if vmi != nil && vmi.Status.Phase == kubevirtv1.Pending {
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.WaitingForDiskReason,
				"VirtualMachine waits for its root disk (instance Pending)"), true
		}
	}
	return metav1.Condition{}, false
}

// staleClaimStatus reports a VM whose disk is ready but whose instance
// still says what it said while the claim was missing.
func staleClaimStatus(o *observation) (metav1.Condition, bool) {
	vmi := o.vmi
	// Once the root disk is ready, virt-controller creates the launcher
	// Pod; until it has (the instance is still Pending), the VM and the
	// instance keep what they said about the claim while it was missing
	// (ErrorPvcNotFound, ErrorUnschedulable). A Pending instance has no Pod
	// that could be unschedulable, so that instant is still the start, never
	// a failure a MachineHealthCheck would act on.
	if o.claimStatusStale() {
		if c := launchRefusal(vmi); c != nil {
			return launchRefusedCondition(c), true
		}
		return o.startingCondition(), true
	}
	return metav1.Condition{}, false
}

// virtualMachineStatus reports what the VM's printable status says of a
// failure or a wait. Its Unschedulable is not read here: virt-controller
// derives it from the instance's PodScheduled=False and writes it after
// the instance, and the two reach our caches apart, so the VM can still
// say Unschedulable of an instance already scheduled (or not in the cache
// yet). The instance as we see it decides (pendingInstance).
func virtualMachineStatus(o *observation) (metav1.Condition, bool) {
	vm := o.vm
	switch vm.Status.PrintableStatus {
	case kubevirtv1.VirtualMachineStatusErrImagePull, kubevirtv1.VirtualMachineStatusImagePullBackOff:
		return condition(vmProvisioned, metav1.ConditionFalse, infrav1.ImagePullFailedReason,
			fmt.Sprintf("Container disk cannot be pulled (%s)%s", vm.Status.PrintableStatus, vmFailureDetail(vm))), true
	case kubevirtv1.VirtualMachineStatusCrashLoopBackOff:
		failures := 0
		if vm.Status.StartFailure != nil {
			failures = vm.Status.StartFailure.ConsecutiveFailCount
		}
		return condition(vmProvisioned, metav1.ConditionFalse, infrav1.StartFailedReason,
			fmt.Sprintf("KubeVirt backs off starting the VM after %d consecutive failed starts%s", failures, vmFailureDetail(vm))), true
	case kubevirtv1.VirtualMachineStatusPvcNotFound:
		return condition(vmProvisioned, metav1.ConditionFalse, infrav1.VolumeMissingReason,
			"A PersistentVolumeClaim of the VM does not exist"), true
	case kubevirtv1.VirtualMachineStatusProvisioning, kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding,
		kubevirtv1.VirtualMachineStatusDataVolumeError:
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.WaitingForDiskReason,
			fmt.Sprintf("VirtualMachine waits for its volumes (%s)", vm.Status.PrintableStatus)), true
	}
	return metav1.Condition{}, false
}

// instanceGone reports a VM without a live instance.
func instanceGone(o *observation) (metav1.Condition, bool) {
	vmi := o.vmi
	if vmi == nil || !vmi.DeletionTimestamp.IsZero() {
		switch {
		case !o.provisioned:
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.ProvisioningReason, startingMessage), true
		case o.restartsInstances(false):
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.InstanceRestartingReason,
				"VirtualMachineInstance stopped; KubeVirt starts a new one on the persistent root disk"), true
		default:
			return condition(vmProvisioned, metav1.ConditionFalse, infrav1.InstanceStoppedReason,
				fmt.Sprintf("VirtualMachineInstance stopped and run strategy %s starts no other", o.runStrategy())), true
		}
	}
	return metav1.Condition{}, false
}

// instanceEvacuating reports an instance KubeVirt leaves to this provider
// on a drained infrastructure node: its Machine is handed to Cluster API,
// which drains the guest's Node before the instance stops
// (replaceEvacuatedMachine).
func instanceEvacuating(o *observation) (metav1.Condition, bool) {
	if !o.stopsForEvacuation() {
		return metav1.Condition{}, false
	}
	drained := fmt.Sprintf("Infrastructure node %s is being drained (eviction strategy External)", o.vmi.Status.EvacuationNodeName)
	switch {
	case o.machineDeleting:
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.EvacuationRequestedReason,
			drained+": the Machine is being deleted; Cluster API drains its Node, then the instance stops"), true
	case o.replaceable:
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.EvacuationRequestedReason,
			drained+": deleting the Machine, so that Cluster API drains its Node before the instance stops and its MachineSet replaces it"), true
	}
	return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.EvacuationRequestedReason,
		drained+": no MachineSet replaces this Machine, so it is left running; delete the Machine (Cluster API drains its Node first) or move it, and the infrastructure node's drain ends"), true
}

// instancePhase reports an instance that ended, runs, or whose node is
// unreachable.
func instancePhase(o *observation) (metav1.Condition, bool) {
	vmi := o.vmi
	switch vmi.Status.Phase {
	case kubevirtv1.Failed, kubevirtv1.Succeeded:
		failed := vmi.Status.Phase == kubevirtv1.Failed
		what := "stopped"
		if failed {
			what = "failed"
		}
		if vmi.Status.Reason != "" {
			what += " (" + vmi.Status.Reason + ")"
		}
		if o.restartsInstances(failed) {
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.InstanceRestartingReason,
				fmt.Sprintf("VirtualMachineInstance %s; KubeVirt starts a new one", what)), true
		}
		reason := infrav1.InstanceStoppedReason
		if failed {
			reason = infrav1.InstanceFailedReason
		}
		return condition(vmProvisioned, metav1.ConditionFalse, reason,
			fmt.Sprintf("VirtualMachineInstance %s and run strategy %s starts no other", what, o.runStrategy())), true
	case kubevirtv1.Running:
		return runningInstance(o), true
	case kubevirtv1.Unknown:
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.InstanceNotReadyReason,
			"VirtualMachineInstance state is unknown; its node may be unreachable"), true
	}
	return metav1.Condition{}, false
}

// runningInstance reports a Running instance: not ready yet, ready without
// an address, or provisioned.
func runningInstance(o *observation) metav1.Condition {
	vmi := o.vmi
	if !instanceReady(vmi) {
		switch {
		case !o.provisioned:
			// virt-handler reports the instance Running before
			// virt-controller has synced the launcher Pod's readiness:
			// for the machine it is still starting, which saves a
			// status write per machine in that window.
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.ProvisioningReason, startingMessage)
		case o.restartedInstance():
			return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.InstanceRestartingReason,
				fmt.Sprintf("VirtualMachineInstance restarted on node %s and is not ready yet", vmi.Status.NodeName))
		}
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.InstanceNotReadyReason,
			fmt.Sprintf("VirtualMachineInstance runs on node %s but is not ready", vmi.Status.NodeName))
	}
	if len(instanceIPs(vmi)) == 0 {
		return condition(vmProvisioned, metav1.ConditionUnknown, infrav1.ProvisioningReason,
			"VirtualMachineInstance is ready; waiting for it to report an address")
	}
	if o.liveMigrating() {
		return condition(vmProvisioned, metav1.ConditionTrue, infrav1.LiveMigratingReason, liveMigrationMessage(o))
	}
	return condition(vmProvisioned, metav1.ConditionTrue, infrav1.ProvisionedReason,
		fmt.Sprintf("VirtualMachineInstance runs on node %s", vmi.Status.NodeName))
}

// pendingInstance reports an instance on its way to Running: refused,
// unschedulable, or starting.
func pendingInstance(o *observation) metav1.Condition {
	vm, vmi := o.vm, o.vmi
	if c := launchRefusal(vmi); c != nil {
		return launchRefusedCondition(c)
	}
	if c := instanceCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil &&
		c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		return condition(vmProvisioned, metav1.ConditionFalse, infrav1.UnschedulableReason, unschedulableMessage(vm, vmi))
	}
	return o.startingCondition()
}

// startingCondition reports an instance on its way to Running. Pending,
// Scheduling and Scheduled are one step for the machine: reporting each
// phase would cost a status write per phase and machine, and the instance
// shows its phase itself. KubeVirt replaces a failed instance within
// moments, so a provisioned machine mostly shows its restart here.
func (o *observation) startingCondition() metav1.Condition {
	const t = infrav1.VirtualMachineProvisionedCondition
	if o.provisioned {
		return condition(t, metav1.ConditionUnknown, infrav1.InstanceRestartingReason, restartingMessage)
	}
	return condition(t, metav1.ConditionUnknown, infrav1.ProvisioningReason, startingMessage)
}

// claimStatusStale reports whether what KubeVirt says about the instance's
// scheduling is still what it wrote about the claim before the root disk
// was ready, which a ready disk (a bound, filled claim) no longer makes
// true: while the instance is Pending it has no launcher Pod that could be
// unschedulable; once virt-controller made the Pod (Scheduling) it drops
// the claim's PodScheduled=False on its next sync, and until then that
// condition is the one it wrote without timestamps, where a Pod's own
// condition carries the scheduler's. (virt-controller never replaces a
// PodScheduled condition it already has, so a launcher Pod that really
// cannot be scheduled after the import also shows only the claim's
// condition: the machine then waits, and the MachineHealthCheck's node
// startup timeout catches it.)
func (o *observation) claimStatusStale() bool {
	vmi := o.vmi
	if o.rootDataVolumeName == "" || vmi == nil || !vmi.DeletionTimestamp.IsZero() || bootDiskCondition(o).Status != metav1.ConditionTrue {
		return false
	}
	switch vmi.Status.Phase {
	case kubevirtv1.Pending:
		return true
	case kubevirtv1.Scheduling:
		c := instanceCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		return c != nil && c.Status == corev1.ConditionFalse && c.LastTransitionTime.IsZero()
	}
	return false
}

// liveMigrationMessage reports KubeVirt's live migration of an instance off
// a drained node, with the migration once KubeVirt has made it.
func liveMigrationMessage(o *observation) string {
	vmi := o.vmi
	message := fmt.Sprintf("Infrastructure node %s is being drained: KubeVirt live-migrates the instance (eviction strategy %s)",
		vmi.Status.EvacuationNodeName, o.evictionStrategy())
	m := o.migration
	if m == nil {
		return message + "; waiting for its migration"
	}
	phase := m.Status.Phase
	if phase == "" {
		phase = kubevirtv1.MigrationPending
	}
	message += fmt.Sprintf("; migration %s is %s", m.Name, phase)
	if target := m.Status.MigrationState; target != nil && target.TargetNode != "" {
		message += " to node " + target.TargetNode
	}
	return message
}

// launchRefusedCondition reports virt-controller's refusal to create the
// instance's launcher Pod, in its words.
func launchRefusedCondition(c *kubevirtv1.VirtualMachineInstanceCondition) metav1.Condition {
	return condition(infrav1.VirtualMachineProvisionedCondition, metav1.ConditionUnknown, infrav1.CreateRefusedReason,
		fmt.Sprintf("KubeVirt cannot create the instance's launcher Pod: %s", c.Message))
}

// restartingMessage reports a provisioned machine's new instance on its way
// to Running on the persistent root disk.
const restartingMessage = "KubeVirt starts a new VirtualMachineInstance on the persistent root disk"

// startingMessage reports an instance on its way to Running, or one that
// KubeVirt has not created yet.
const startingMessage = "Waiting for KubeVirt to start the VirtualMachineInstance"

func unschedulableMessage(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) string {
	if vmi != nil {
		if c := instanceCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil && c.Message != "" {
			return "VM's pod cannot be scheduled: " + c.Message
		}
	}
	return "VM's pod cannot be scheduled" + vmFailureDetail(vm)
}

func vmFailureDetail(vm *kubevirtv1.VirtualMachine) string {
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue && c.Message != "" {
			return ": " + c.Message
		}
	}
	return ""
}

// setReady summarises the machine's two steps into Ready with Cluster API's
// summary helper and the rule the MachineHealthCheck relies on
// (firstUnfinishedStep).
func setReady(kvm *infrav1.KubeVirtMachine) error {
	return conditions.SetSummaryCondition(kvm, kvm, infrav1.ReadyCondition,
		conditions.ForConditionTypes{infrav1.BootDiskReadyCondition, infrav1.VirtualMachineProvisionedCondition},
		conditions.CustomMergeStrategy{MergeStrategy: firstUnfinishedStep{}})
}

// firstUnfinishedStep merges steps in their order, the disk first as the
// usual root cause: a failure of any is False with the first failure's
// reason and message, all True is True with the last step's message, and
// anything else is Unknown with the first unfinished step's reason and
// message. Cluster API's default strategy would list every step in the
// message under generic reasons; Cluster API mirrors Ready into the
// Machine's InfrastructureReady, where the step's own words say more.
type firstUnfinishedStep struct{}

// Merge implements conditions.MergeStrategy.
func (firstUnfinishedStep) Merge(_ conditions.MergeOperation, steps []conditions.ConditionWithOwnerInfo, order []string) (metav1.ConditionStatus, string, string, error) {
	if len(steps) == 0 {
		return "", "", "", fmt.Errorf("no conditions to summarise")
	}
	ordered := slices.Clone(steps)
	slices.SortStableFunc(ordered, func(a, b conditions.ConditionWithOwnerInfo) int {
		return slices.Index(order, a.Type) - slices.Index(order, b.Type)
	})
	for _, status := range []metav1.ConditionStatus{metav1.ConditionFalse, metav1.ConditionUnknown} {
		for _, c := range ordered {
			if c.Status == status {
				return status, c.Reason, c.Message, nil
			}
		}
	}
	return metav1.ConditionTrue, infrav1.ReadyReason, ordered[len(ordered)-1].Message, nil
}
