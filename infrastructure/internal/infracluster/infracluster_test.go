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

package infracluster

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestControls(t *testing.T) {
	kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "worker-0", UID: "kvm-uid"}}
	controller := func(uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "KubeVirtMachine", Name: "worker-0", UID: apitypes.UID(uid), Controller: ptr.To(true)}
	}
	labelled := map[string]string{infrav1.MachineNameLabel: "worker-0", infrav1.ManagementClusterLabel: "mgmt-a"}
	ofAnother := map[string]string{infrav1.MachineNameLabel: "worker-0", infrav1.ManagementClusterLabel: "mgmt-b"}
	ofNone := map[string]string{infrav1.MachineNameLabel: "worker-0"}
	tests := []struct {
		name          string
		obj           metav1.ObjectMeta
		local, remote bool
	}{
		{name: "controlled by the machine", obj: metav1.ObjectMeta{Namespace: "tenant", Labels: labelled, OwnerReferences: []metav1.OwnerReference{controller("kvm-uid")}}, local: true},
		{name: "controlled by an earlier machine of the name", obj: metav1.ObjectMeta{Namespace: "tenant", Labels: labelled, OwnerReferences: []metav1.OwnerReference{controller("old-uid")}}},
		{name: "labelled, controlled by nobody (a remote cluster's, or a machine moved with a new UID)", obj: metav1.ObjectMeta{Namespace: "tenant", Labels: labelled}, remote: true},
		{name: "labelled for another machine", obj: metav1.ObjectMeta{Namespace: "tenant", Labels: map[string]string{infrav1.MachineNameLabel: "worker-1", infrav1.ManagementClusterLabel: "mgmt-a"}}},
		{name: "labelled for the machine of the name in another management cluster", obj: metav1.ObjectMeta{Namespace: "tenant", Labels: ofAnother}},
		{name: "labelled for the machine without a management cluster's identity", obj: metav1.ObjectMeta{Namespace: "tenant", Labels: ofNone}},
		{name: "labelled in another namespace", obj: metav1.ObjectMeta{Namespace: "other", Labels: labelled}},
		{name: "not labelled", obj: metav1.ObjectMeta{Namespace: "tenant"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (&Cluster{}).Controls(&tt.obj, kvm); got != tt.local {
				t.Errorf("in the management cluster: Controls = %v, want %v", got, tt.local)
			}
			if got := (&Cluster{Remote: true, Identity: "mgmt-a"}).Controls(&tt.obj, kvm); got != tt.remote {
				t.Errorf("in a remote cluster: Controls = %v, want %v", got, tt.remote)
			}
		})
	}
}

func TestOfAnotherManagementCluster(t *testing.T) {
	remote := &Cluster{Remote: true, Identity: "mgmt-a"}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{name: "this management cluster's", labels: map[string]string{infrav1.MachineNameLabel: "w", infrav1.ManagementClusterLabel: "mgmt-a"}},
		{name: "another management cluster's", labels: map[string]string{infrav1.MachineNameLabel: "w", infrav1.ManagementClusterLabel: "mgmt-b"}, want: true},
		{name: "a machine's without an identity", labels: map[string]string{infrav1.MachineNameLabel: "w"}, want: true},
		{name: "nobody's machine", labels: map[string]string{"app": "w"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &metav1.ObjectMeta{Labels: tt.labels}
			if got := remote.OfAnotherManagementCluster(o); got != tt.want {
				t.Errorf("in a remote cluster: OfAnotherManagementCluster = %v, want %v", got, tt.want)
			}
			if (&Cluster{}).OfAnotherManagementCluster(o) {
				t.Error("in the management cluster: OfAnotherManagementCluster = true, want false")
			}
		})
	}
}
