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

package integration

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/rulecases"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// TestKubeVirtAgreesWithTheRules runs the rules' table (GPUs and host
// devices beside an instancetype's, vCPUs a spread preference cannot
// place) through the webhook on the real apiserver and, for what the
// renderer renders, through KubeVirt's own virt-api (a dry-run create of
// the VirtualMachine, with the instancetype and preference in place): the
// webhook refuses a template exactly when virt-api refuses its VM. Cases
// of KubeVirt's configuration are the template resolution's
// (TestTemplateWaitsForKubeVirtFeatures).
func TestKubeVirtAgreesWithTheRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, rc := range rulecases.Cases() {
		if rc.Configuration || rc.KubeVirt != nil {
			// The installed KubeVirt's configuration is the template
			// resolution's, and this suite's is rulecases.Configured.
			continue
		}
		t.Run(rc.Name, func(t *testing.T) {
			g := NewWithT(t)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rules-"}}
			g.Expect(c.Create(ctx, ns)).To(Succeed())
			for _, o := range rc.Objects(ns.Name) {
				g.Expect(c.Create(ctx, o)).To(Succeed())
			}

			err := c.Create(ctx, classlessTemplate(ns.Name, "workers", *rc.Spec.DeepCopy()))
			if rc.SpecRefused() {
				g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec." + rc.Field + ":")))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}

			m := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns.Name}, Spec: *rc.Spec.DeepCopy()}
			// Kept off the reserved nodes, as every VM is.
			objs, errs := vmspec.Render(vmspec.Input{Machine: m, ClusterName: "tenant", Image: *rc.Spec.Image,
				Preference: rc.Preference, UserData: []byte("#cloud-config\n"), Unowned: true,
				ReservedNodeLabels: controllerPlacement.ReservedNodeLabels, FailureDomain: zoneA})
			if rc.RenderRefused() {
				g.Expect(errs).NotTo(BeEmpty())
				return
			}
			g.Expect(errs).To(BeEmpty())
			err = c.Create(ctx, objs.VirtualMachine, client.DryRunAll)
			if !rc.SpecRefused() {
				g.Expect(err).NotTo(HaveOccurred(), "virt-api admits what the webhook admits")
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(`admission webhook "virtualmachine-validator.kubevirt.io" denied the request`)),
				"virt-api refuses what the webhook refuses")
		})
	}
}
