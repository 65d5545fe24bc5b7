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

// Package infracluster is the cluster the machines' VirtualMachines run in:
// the management cluster itself, or another cluster the hoster points the
// provider at (--infrastructure-kubeconfig). Keeping the VMs in a cluster of
// their own lets `clusterctl move` carry a pool's Cluster API objects to
// another management cluster while its VMs keep running.
package infracluster

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// What the provider does in a remote infrastructure cluster, as the role
// the hoster binds to the identity of --infrastructure-kubeconfig there
// (config/infrastructure/infrastructure-cluster): the machines' VMs,
// instances, disks, cloud-init Secrets and import CAs; instancetype reads;
// the reads that show a drained instance's fate (KubeVirt's migrations and
// its cluster-wide eviction strategy);
// and the clone authorization (cloneauth), which asks the API server as the
// tenant and reads namespaces and DataSources; and the KubeVirt CR, whose
// feature gates and permitted host devices decide whether a template's
// VMs can run (listed and watched through the cache, never read by
// name). The management cluster's role holds the same rules for the
// management cluster.
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=list
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes/source,verbs=create
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datasources,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=instancetype.kubevirt.io,resources=virtualmachineclusterinstancetypes;virtualmachineinstancetypes;virtualmachineclusterpreferences;virtualmachinepreferences,verbs=get;list;watch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=list;watch

// Cluster is where a machine's VirtualMachine, instance, root DataVolume,
// cloud-init Secret and import CA ConfigMap live, where KubeVirt's
// instancetypes are read and where clones are authorized.
type Cluster struct {
	// Client reads through the cluster's cache and writes (with strict
	// field validation where the manager wires it).
	Client client.Client
	// Reader reads from the API server, past the cache.
	Reader client.Reader
	// Cache serves the watches on the machines' VMs, instances and
	// DataVolumes.
	Cache cache.Cache
	// Remote is true for a cluster other than the management cluster. An
	// owner reference cannot point across clusters, so there a machine's
	// objects carry only its labels, and the machine controller deletes
	// them by name: nothing else would.
	Remote bool
	// Identity is the management cluster's identity in a remote cluster,
	// which every object created there carries as its
	// infrav1.ManagementClusterLabel: several management clusters may
	// share one infrastructure cluster, and a machine takes as its own only
	// objects of its management cluster's identity. Empty for the
	// management cluster itself.
	Identity string
}

// Labels returns the labels every object a machine creates in the cluster
// carries besides its machine and cluster names: the management cluster's
// identity in a remote cluster, nothing in the management cluster.
func (c *Cluster) Labels() map[string]string {
	if !c.Remote {
		return nil
	}
	return map[string]string{infrav1.ManagementClusterLabel: c.Identity}
}

// Labelled reports whether o carries the machine's labels: its name and,
// in a remote cluster, this management cluster's identity. A
// VirtualMachineInstance, which KubeVirt owns, is the machine's so.
func (c *Cluster) Labelled(o metav1.Object, kvm *infrav1.KubeVirtMachine) bool {
	return o.GetNamespace() == kvm.Namespace &&
		o.GetLabels()[infrav1.MachineNameLabel] == kvm.Name &&
		(!c.Remote || o.GetLabels()[infrav1.ManagementClusterLabel] == c.Identity)
}

// OfAnotherManagementCluster reports whether o, in a remote cluster, is
// labelled with a machine's name but not with this management cluster's
// identity: a machine of the same namespace and name in another
// management cluster that shares the infrastructure cluster.
func (c *Cluster) OfAnotherManagementCluster(o metav1.Object) bool {
	if !c.Remote {
		return false
	}
	_, machine := o.GetLabels()[infrav1.MachineNameLabel]
	return machine && o.GetLabels()[infrav1.ManagementClusterLabel] != c.Identity
}

// Controls reports whether o is the machine's own: controlled by the
// KubeVirtMachine in the management cluster; in a remote cluster, labelled
// with the machine's name and this management cluster's identity and
// controlled by nobody. A machine moved to another management cluster (a
// new UID) of the same identity finds its objects so; an object of
// another identity is never the machine's.
func (c *Cluster) Controls(o metav1.Object, kvm *infrav1.KubeVirtMachine) bool {
	if !c.Remote {
		return metav1.IsControlledBy(o, kvm)
	}
	return c.Labelled(o, kvm) && metav1.GetControllerOfNoCopy(o) == nil
}
