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

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestDeletingConditions(t *testing.T) {
	g := NewWithT(t)
	kvm := &infrav1.KubeVirtMachine{}
	setConditions(kvm, deletingConditions([]string{"VirtualMachine w", "DataVolume w-root"})...)
	g.Expect(setReady(kvm)).To(Succeed())
	g.Expect(kvm.Status.Conditions).To(HaveLen(3))
	for _, c := range kvm.Status.Conditions {
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(infrav1.DeletingReason))
		g.Expect(c.Message).To(Equal("Waiting for VirtualMachine w, DataVolume w-root to be deleted"))
	}
}
