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

package v1alpha1

// Condition types and reasons. They follow one rule that a v1beta2
// MachineHealthCheck relies on: a KubeVirtMachine's Ready condition is
// Unknown while provisioning makes progress (however slowly) and False only
// when the machine failed in a way a replacement Machine can fix. The Machine
// mirrors Ready as InfrastructureReady, so
//
//	unhealthyMachineConditions:
//	- type: InfrastructureReady
//	  status: "False"
//	  timeoutSeconds: 60
//
// remediates exactly the failures listed below as "False".
const (
	// ReadyCondition summarises the machine. True: the VM runs, ready, with
	// an address. Unknown: provisioning or a restart is in progress. False:
	// a failure reason from VirtualMachineProvisioned or BootDiskReady, or
	// Deleting.
	ReadyCondition = "Ready"

	// VirtualMachineProvisionedCondition is the state of the VirtualMachine
	// and its instance.
	VirtualMachineProvisionedCondition = "VirtualMachineProvisioned"

	// BootDiskReadyCondition is the state of the root disk: a container disk
	// is ready at once; an imported or cloned DataVolume reports CDI's phase
	// and progress.
	BootDiskReadyCondition = "BootDiskReady"

	// ResolvedCondition is the state of a template's one-time resolution.
	ResolvedCondition = "Resolved"
)

// Reasons with status True.
const (
	// ReadyReason: the machine's VM runs, ready, with an address.
	ReadyReason = "Ready"
	// ProvisionedReason: the VM's instance is ready and has an address.
	ProvisionedReason = "Provisioned"
	// ContainerDiskReason: the root disk is a container disk, pulled by the
	// VM's pod.
	ContainerDiskReason = "ContainerDisk"
	// DiskReadyReason: the root DataVolume finished importing or cloning.
	DiskReadyReason = "DiskReady"
	// ResolvedReason: the template is resolved and frozen.
	ResolvedReason = "Resolved"
)

// Reasons with status Unknown: waiting or in progress, never remediated.
const (
	// WaitingForClusterInfrastructureReason: the Cluster's infrastructure is
	// not provisioned yet.
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	// WaitingForClusterReason: the machine's Cluster does not exist, or the
	// machine names none; the message says which.
	WaitingForClusterReason = "WaitingForCluster"
	// WaitingForBootstrapDataReason: the Machine has no bootstrap data
	// Secret yet.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// BootstrapDataForbiddenReason: Machine.spec.bootstrap.dataSecretName
	// names a Secret that is not the Machine's bootstrap data (Cluster API's
	// Secret type, the Machine's cluster label, none of the cluster's own
	// Secrets, controlled by the Machine's bootstrap config when it names
	// one); nothing of it is read. The message names the field and why.
	// Retried every minute, as the Secret may yet become valid.
	BootstrapDataForbiddenReason = "BootstrapDataForbidden"
	// PlacementForbiddenReason: the machine's spec asks for placement the
	// hoster's policy in force does not allow a tenant (a toleration, a
	// node affinity key, pod affinity to another namespace, dedicated
	// CPUs, a GPU or host device); no VM is created. The message names
	// each field and what the hoster allows. Not False: a new Machine from
	// the same template would be refused the same way; the manager checks
	// again when it restarts with other flags.
	PlacementForbiddenReason = "PlacementForbidden"
	// WaitingForTemplateReason: the machine's image comes from a template
	// that is not resolved yet, or failed to resolve (which a new Machine
	// would not fix).
	WaitingForTemplateReason = "WaitingForTemplate"
	// ProvisioningReason: the VM or its instance is being created, scheduled
	// or booted.
	ProvisioningReason = "Provisioning"
	// EvacuationRequestedReason: the infrastructure node is being drained
	// and the VM's eviction strategy is External: KubeVirt denied the
	// eviction and leaves the VM to this provider, which deletes the
	// Machine when a MachineSet controls it, so that Cluster API drains
	// its Node (honouring PodDisruptionBudgets and the Machine's drain
	// timeout) before the instance stops, and the MachineSet replaces it;
	// a Machine nothing replaces is left running for its owner to delete
	// or move.
	EvacuationRequestedReason = "EvacuationRequested"
	// LiveMigratingReason: the infrastructure node is being drained and
	// KubeVirt live-migrates the VM (eviction strategy LiveMigrate or
	// LiveMigrateIfPossible); the machine keeps running and the provider
	// leaves the VM alone. The message names KubeVirt's migration.
	LiveMigratingReason = "LiveMigrating"
	// InstanceRestartingReason: the VM of a persistent root disk is starting
	// a new instance; the node keeps its state.
	InstanceRestartingReason = "InstanceRestarting"
	// WaitingForDiskReason: the VM waits for its root DataVolume.
	WaitingForDiskReason = "WaitingForDisk"
	// ImportingReason: CDI imports the root disk; the message carries the
	// progress.
	ImportingReason = "Importing"
	// CloningReason: CDI clones the root disk; the message carries the
	// progress.
	CloningReason = "Cloning"
	// DiskPendingReason: the root DataVolume is created but CDI has not
	// started populating it (scheduling, binding, waiting for the first
	// consumer).
	DiskPendingReason = "DiskPending"
	// InstanceNotReadyReason: the VM's instance runs but is not ready.
	InstanceNotReadyReason = "InstanceNotReady"
	// ResolvingReason: a template waits for its class or platform
	// configuration.
	ResolvingReason = "Resolving"
	// InvalidSpecReason: the machine cannot be rendered into a VM; the
	// message names the field. A new Machine from the same spec would fail
	// the same way, so this is not reported as False.
	InvalidSpecReason = "InvalidSpec"
	// WaitingForOldVirtualMachineReason: a VirtualMachine of the same name
	// from an earlier machine is still being deleted.
	WaitingForOldVirtualMachineReason = "WaitingForOldVirtualMachine"
	// CreateRefusedReason: the API server refused an object the machine
	// needs (KubeVirt's or CDI's admission, a schema); the message carries
	// the refusal. A new Machine from the same spec would be refused too,
	// so this is not reported as False; the controller tries again every
	// minute, as a refusal can depend on the infrastructure's configuration
	// (feature gates, permitted host devices).
	CreateRefusedReason = "CreateRefused"
	// CloneSourceForbiddenReason: the machine's namespace may not clone
	// from the namespace of spec.image.clone by CDI's rules, asked as its
	// ServiceAccount default; the message carries CDI's words. Asked
	// again after a minute, then twice as long each time, at most every 5
	// minutes: the source namespace's owner may grant it.
	CloneSourceForbiddenReason = "CloneSourceForbidden"
	// WaitingForCloneSourceReason: the namespace or DataSource that
	// spec.image.clone names does not exist; the message names it. Asked
	// again as CloneSourceForbiddenReason is.
	WaitingForCloneSourceReason = "WaitingForCloneSource"
	// WaitingForImageImportReason: the machine's template resolves to an
	// HTTP import, which is imported once into the template's namespace
	// and cloned per machine; the message names the shared DataVolume and
	// its phase and progress.
	WaitingForImageImportReason = "WaitingForImageImport"
	// ImageImportFailedReason: the template's shared import failed; the
	// message names the shared DataVolume, CDI's words and whether it is
	// retried. Not False: a new Machine would wait for the same import.
	ImageImportFailedReason = "ImageImportFailed"
)

// Reasons with status False on VirtualMachineProvisioned, BootDiskReady and
// Ready: failures a replacement Machine can fix.
const (
	// ImportFailedReason: CDI failed the root disk import or clone, or its
	// importer pod kept failing.
	ImportFailedReason = "ImportFailed"
	// UnschedulableReason: the VM's pod cannot be scheduled.
	UnschedulableReason = "Unschedulable"
	// ImagePullFailedReason: the container disk cannot be pulled.
	ImagePullFailedReason = "ImagePullFailed"
	// StartFailedReason: KubeVirt backs off restarting an instance that keeps
	// failing.
	StartFailedReason = "StartFailed"
	// InstanceFailedReason: the VM's instance failed.
	InstanceFailedReason = "InstanceFailed"
	// InstanceStoppedReason: the VM's instance stopped and its run strategy
	// starts no other.
	InstanceStoppedReason = "InstanceStopped"
	// EphemeralDiskLostReason: the instance that booted a container disk is
	// gone after the node joined; any new instance boots a blank disk and
	// the node cannot rejoin.
	EphemeralDiskLostReason = "EphemeralDiskLost"
	// VirtualMachineDeletedReason: the VM was deleted after provisioning.
	VirtualMachineDeletedReason = "VirtualMachineDeleted"
	// VolumeMissingReason: a volume of the VM does not exist.
	VolumeMissingReason = "VolumeMissing"
	// NameConflictReason: an object this machine would create exists and
	// belongs to something else; a Machine with another name avoids it.
	NameConflictReason = "NameConflict"
)

// Reasons with status False that remediation does not act on.
const (
	// DeletingReason: the machine is being deleted; the message lists what
	// it still waits for.
	DeletingReason = "Deleting"
	// ResolutionFailedReason: a template cannot be resolved; the message
	// names the field.
	ResolutionFailedReason = "ResolutionFailed"
	// KubeVirtFeatureNotEnabledReason: a template's VMs need a KubeVirt
	// feature gate, or a GPU or host device permitted, that the KubeVirt
	// of the infrastructure cluster does not enable; the message names the
	// gate or device. The template is resolved once the hoster enables it.
	KubeVirtFeatureNotEnabledReason = "KubeVirtFeatureNotEnabled"
)
