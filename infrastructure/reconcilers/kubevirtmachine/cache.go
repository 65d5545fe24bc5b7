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
	"slices"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/internal/clustersecrets"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// What the provider's caches keep of the objects the machine controller
// reads: setup wires these transforms into the manager's cache and the
// infrastructure cluster's.
//
// The manager's cache, and the infrastructure cluster's, hold every
// VirtualMachine and VirtualMachineInstance of the provider's machines for
// as long as the machines live, while the controller reads a few fields of
// them: the watches' views (predicates.go), and what conditions.go,
// observe.go, create.go and delete.go read of the objects the cache
// returns. So that memory per machine stays small, the two transforms
// below keep exactly that, and the whole metadata but managedFields (it is
// cheap, and generic code reads it: labels, owner references, deletion),
// and drop the rest before it enters the cache: the VM's template but its
// volumes, the instance's spec but its hostname and eviction strategy, and
// most of the status KubeVirt writes for itself. A reader that reads a
// field not kept here must keep it here too: in the cache it reads as
// empty. No write starts from a cached VM or instance: a VM is created
// from its rendered object and never updated or patched, an instance is
// only deleted (by name, with its UID as the precondition), and the RBAC
// of both grants no update or patch.

// vmConditionsRead are the VM conditions the controller reads:
// vmFailureDetail's.
var vmConditionsRead = []kubevirtv1.VirtualMachineConditionType{kubevirtv1.VirtualMachineFailure}

// instanceConditionsRead are the instance conditions the controller reads:
// instanceReady's, launchRefusal's, and the PodScheduled condition of
// pendingInstance, claimStatusStale and unschedulableMessage.
var instanceConditionsRead = []kubevirtv1.VirtualMachineInstanceConditionType{
	kubevirtv1.VirtualMachineInstanceReady,
	kubevirtv1.VirtualMachineInstanceSynchronized,
	kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
}

// StripUnreadVirtualMachineFields is the cache's transform of a
// VirtualMachine: of its spec and status it keeps what the controller
// reads. Any other object passes unchanged. It is idempotent,
// as informers require.
func StripUnreadVirtualMachineFields(in any) (any, error) {
	vm, ok := in.(*kubevirtv1.VirtualMachine)
	if !ok {
		return in, nil
	}
	kept := kubevirtv1.VirtualMachine{
		TypeMeta:   vm.TypeMeta,
		ObjectMeta: vm.ObjectMeta,
		// observation.runStrategy, the view.
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: vm.Spec.RunStrategy},
		Status: kubevirtv1.VirtualMachineStatus{
			// virtualMachineStatus, waitingForRootDisk, the view.
			PrintableStatus: vm.Status.PrintableStatus,
			// virtualMachineStatus, the view.
			StartFailure: vm.Status.StartFailure,
		},
	}
	kept.ManagedFields = nil
	if t := vm.Spec.Template; t != nil {
		// rootContainerDisk, rootDataVolume; the view compares them
		// whole.
		kept.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: t.Spec.Volumes},
		}
	}
	for _, c := range vm.Status.Conditions {
		if slices.Contains(vmConditionsRead, c.Type) {
			kept.Status.Conditions = append(kept.Status.Conditions, c)
		}
	}
	*vm = kept
	return vm, nil
}

// StripUnreadInstanceFields is the cache's transform of a
// VirtualMachineInstance: of its spec and status it keeps what the
// controller reads. Its metadata is kept too: its UID names the
// provisioned instance, its creation time bounds the migrations
// observeEvacuation reads. Any other object passes unchanged. It is
// idempotent, as informers require.
func StripUnreadInstanceFields(in any) (any, error) {
	vmi, ok := in.(*kubevirtv1.VirtualMachineInstance)
	if !ok {
		return in, nil
	}
	kept := kubevirtv1.VirtualMachineInstance{
		TypeMeta:   vmi.TypeMeta,
		ObjectMeta: vmi.ObjectMeta,
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			// machineAddresses, the view.
			Hostname: vmi.Spec.Hostname,
			// observation.evictionStrategy, observeEvacuation.
			EvictionStrategy: vmi.Spec.EvictionStrategy,
		},
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			// Most of conditions.go (IsFinal too), the view.
			Phase: vmi.Status.Phase,
			// instancePhase, the view.
			Reason: vmi.Status.Reason,
			// observation.evacuating, runningInstance, observe, the
			// view.
			NodeName: vmi.Status.NodeName,
			// observation.evacuating, instanceEvacuating,
			// liveMigrationMessage, observe, the view.
			EvacuationNodeName: vmi.Status.EvacuationNodeName,
		},
	}
	kept.ManagedFields = nil
	for _, c := range vmi.Status.Conditions {
		if slices.Contains(instanceConditionsRead, c.Type) {
			kept.Status.Conditions = append(kept.Status.Conditions, c)
		}
	}
	// instanceIPs (machineAddresses, runningInstance, the view) reads
	// the addresses, in the interfaces' order; an interface without one
	// adds nothing.
	for _, iface := range vmi.Status.Interfaces {
		if iface.IP != "" || len(iface.IPs) > 0 {
			kept.Status.Interfaces = append(kept.Status.Interfaces,
				kubevirtv1.VirtualMachineInstanceNetworkInterface{IP: iface.IP, IPs: iface.IPs})
		}
	}
	// The view: a local migration that starts or ends reconciles the
	// machine.
	if m := vmi.Status.MigrationState; m != nil {
		kept.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
			MigrationUID: m.MigrationUID, TargetNode: m.TargetNode, Completed: m.Completed, Failed: m.Failed,
		}
	}
	*vmi = kept
	return vmi, nil
}

// StripUnreadSecretData is the cache's transform of a Secret: it keeps
// only what the machine controller reads (watchview.CachedSecret), a
// bootstrap data Secret's value and its own cloud-init Secret's user data.
// Which Secret is which is decided by its type and labels, not by a key
// name: the workload cluster's admin kubeconfig keeps its credentials under
// value too, and carries Cluster API's Secret type and the cluster-name
// label like bootstrap data, so Cluster API's own Secrets of a cluster
// (named <cluster>-<purpose>) keep nothing, nor do the CA, service account
// and etcd keys or any other Secret the selector lets in. Bootstrap data
// and user data are bounded only by the size of a Secret, so their limit
// is that size, and no value a Secret can hold is dropped for its size.
func StripUnreadSecretData(in any) (any, error) {
	return watchview.CachedSecret(in, keptSecretKeys)
}

// keptSecretKeys are the keys the machine controller reads of a cached
// Secret: user data of its own cloud-init Secrets (machine-name label), the
// value of bootstrap data (Cluster API's Secret type) that is not one of
// Cluster API's own Secrets of the cluster.
func keptSecretKeys(s *corev1.Secret) []watchview.KeptKey {
	if _, ours := s.Labels[infrav1.MachineNameLabel]; ours {
		return []watchview.KeptKey{{Name: vmspec.UserDataKey, MaxSize: corev1.MaxSecretSize}}
	}
	if s.Type != clusterv1.ClusterSecretType {
		return nil
	}
	if _, own := clustersecrets.Named(s.Labels[clusterv1.ClusterNameLabel], s.Name); own {
		return nil
	}
	return []watchview.KeptKey{{Name: BootstrapDataKey, MaxSize: corev1.MaxSecretSize}}
}
