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
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// The Events a person watching a machine (kubectl describe) sees: one per
// transition, emitted where the reconcile made the change (a create that
// succeeded) or once its patch recorded a flip, so that a requeue or a
// resync never repeats one. Their notes name objects and quote the API
// server's refusals (with URL credentials masked, as the conditions are),
// never the bootstrap data.
const (
	// VirtualMachineCreatedEvent: the machine's VirtualMachine was created.
	VirtualMachineCreatedEvent = "VirtualMachineCreated"
	// RootDiskCreatedEvent: the machine's own root DataVolume (an import
	// or a clone of its image) was created.
	RootDiskCreatedEvent = "RootDiskCreated"
	// SharedImportClonedEvent: the machine's root DataVolume was created
	// as a clone of its template's shared import.
	SharedImportClonedEvent = "SharedImportCloned"
	// ProvisionedEvent: the machine's instance runs; the machine is
	// provisioned.
	ProvisionedEvent = "Provisioned"
	// MachineDeletedForEvacuationEvent: KubeVirt left the instance on a
	// drained infrastructure node to the provider (eviction strategy
	// External), which deleted the Machine so that Cluster API drains its
	// Node before the instance stops.
	MachineDeletedForEvacuationEvent = "MachineDeletedForEvacuation"
	// The refusals are Warnings with their condition's reason:
	// infrav1.CreateRefusedReason (the API server or KubeVirt refused the
	// machine's objects or its launcher Pod),
	// infrav1.CloneSourceForbiddenReason (the machine's namespace may not
	// clone the source its image names),
	// infrav1.BootstrapDataForbiddenReason (the Machine's dataSecretName
	// names a Secret that is not its bootstrap data) and
	// infrav1.PlacementForbiddenReason (the spec asks for placement the
	// hoster does not allow).
)

// maxNote is the longest note events.k8s.io accepts, in bytes.
const maxNote = 1024

// created is the Event of an object ensureCreated creates; nil for the
// objects a person does not watch (the cloud-init Secret, the import CA).
type created struct {
	reason, note string
}

// vmCreated is the VirtualMachine's Event.
func vmCreated(name string) *created {
	return &created{reason: VirtualMachineCreatedEvent, note: "Created VirtualMachine " + name}
}

// rootDiskCreated is the root DataVolume's Event: whether it clones the
// template's shared import or is the machine's own.
func rootDiskCreated(image rootImage, name string) *created {
	if image.sharedImport != "" {
		return &created{reason: SharedImportClonedEvent,
			note: fmt.Sprintf("Created root DataVolume %s, a clone of the shared import %s", name, image.sharedImport)}
	}
	return &created{reason: RootDiskCreatedEvent, note: "Created root DataVolume " + name}
}

func (r *Reconciler) recordCreated(kvm *infrav1.KubeVirtMachine, e *created) {
	if e != nil {
		r.Recorder.Eventf(kvm, nil, corev1.EventTypeNormal, e.reason, "Create", e.note)
	}
}

// transitions is what the Events after a reconcile's patch compare with:
// the machine as the reconcile read it.
type transitions struct {
	provisioned bool
	// refusal is the VirtualMachineProvisioned condition.
	refusal metav1.Condition
}

// refusalActions are the refusals of VirtualMachineProvisioned that are
// Events, with their action.
var refusalActions = map[string]string{
	infrav1.CreateRefusedReason:          "Create",
	infrav1.CloneSourceForbiddenReason:   "Clone",
	infrav1.BootstrapDataForbiddenReason: "ReadBootstrapData",
	infrav1.PlacementForbiddenReason:     "Place",
}

func transitionsOf(kvm *infrav1.KubeVirtMachine) transitions {
	t := transitions{provisioned: ptr.Deref(kvm.Status.Initialization.Provisioned, false)}
	if c := conditions.Get(kvm, infrav1.VirtualMachineProvisionedCondition); c != nil {
		t.refusal = *c
	}
	return t
}

// recordTransitions emits the Events of what the reconcile's patch wrote:
// a refusal that the machine's condition did not say before, and the
// machine provisioned. A refusal whose words change while it lasts (a
// launcher Pod's generated name in virt-controller's message) is not
// repeated.
func (r *Reconciler) recordTransitions(kvm *infrav1.KubeVirtMachine, was transitions) {
	now := transitionsOf(kvm)
	if action, ok := refusalActions[now.refusal.Reason]; ok && now.refusal.Reason != was.refusal.Reason {
		r.Recorder.Eventf(kvm, nil, corev1.EventTypeWarning, now.refusal.Reason, action, "%s", note(now.refusal.Message))
	}
	if now.provisioned && !was.provisioned {
		r.Recorder.Eventf(kvm, nil, corev1.EventTypeNormal, ProvisionedEvent, "Provision",
			"VirtualMachineInstance %s runs on node %s", kvm.Name, kvm.Status.NodeName)
	}
}

// note cuts a message to what an Event's note holds.
func note(message string) string {
	if len(message) <= maxNote {
		return message
	}
	cut := message[:maxNote-len("...")]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "..."
}

// recordEvacuationHandedOver is the Event of a Machine deleted for the
// drain of the infrastructure node its instance runs on.
func (r *Reconciler) recordEvacuationHandedOver(kvm *infrav1.KubeVirtMachine, machine *clusterv1.Machine, node string) {
	r.Recorder.Eventf(kvm, nil, corev1.EventTypeNormal, MachineDeletedForEvacuationEvent, "Evacuate",
		"Deleted Machine %s: infrastructure node %s is being drained (eviction strategy External); Cluster API drains the Machine's Node before the instance stops", machine.Name, node)
}
