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

package kubevirtconfig

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/cozystack/cluster-api-workers/infrastructure/internal/rulecases"
)

// TestInstalled: the CR KubeVirt reads its configuration from is the one
// not being deleted that has a phase.
func TestInstalled(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(kubevirtv1.AddToScheme(scheme)).To(Succeed())
	cr := func(ns, name string, phase kubevirtv1.KubeVirtPhase, deleting bool) client.Object {
		kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: kubevirtv1.KubeVirtStatus{Phase: phase}}
		if deleting {
			kv.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			kv.Finalizers = []string{"foregroundDeleteKubeVirt"}
		}
		return kv
	}
	list := func(objs ...client.Object) *kubevirtv1.KubeVirt {
		kv, err := Installed(context.Background(), fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build())
		g.Expect(err).NotTo(HaveOccurred())
		return kv
	}
	g.Expect(list()).To(BeNil())
	g.Expect(list(cr("kubevirt", "kubevirt", "", false))).To(BeNil(), "virt-operator has not deployed it")
	g.Expect(list(cr("kubevirt", "kubevirt", kubevirtv1.KubeVirtPhaseDeployed, true))).To(BeNil(), "being deleted")
	g.Expect(list(cr("kubevirt", "old", kubevirtv1.KubeVirtPhaseDeployed, true), cr("kubevirt", "kubevirt", kubevirtv1.KubeVirtPhaseDeployed, false)).Name).To(Equal("kubevirt"))
	g.Expect(list(cr("a", "kubevirt", kubevirtv1.KubeVirtPhaseDeployed, false), cr("b", "kubevirt", kubevirtv1.KubeVirtPhaseDeployed, false)).Namespace).To(Equal("b"))
}

// TestValidate runs the rules' table: the installed KubeVirt's
// configuration refuses the cases marked so, at their field; the spec's own
// problems are instancetype.Validate's.
func TestValidate(t *testing.T) {
	for _, c := range rulecases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			g := NewWithT(t)
			errs := Validate(Input{Spec: &c.Spec, Instancetype: c.Instancetype, Preference: c.Preference, KubeVirt: c.KubeVirtCR()}, field.NewPath("spec"))
			if !c.Configuration {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			for _, e := range errs {
				g.Expect(e.Field).To(Equal("spec." + c.Field))
				g.Expect(e.Type).To(Equal(field.ErrorTypeForbidden))
			}
		})
	}
}
