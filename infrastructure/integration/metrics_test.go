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
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/metrics"
	"github.com/cozystack/cluster-api-workers/internal/metrics/metricstest"
)

// metricCounts are the provider's counters and its histogram's count.
type metricCounts struct {
	sharedImports, ownImports, clones, savedBytes, provisioned float64
}

func readMetricCounts(t *testing.T) metricCounts {
	t.Helper()
	return metricCounts{
		sharedImports: testutil.ToFloat64(metrics.ImageImports.WithLabelValues(metrics.SharedScope)),
		ownImports:    testutil.ToFloat64(metrics.ImageImports.WithLabelValues(metrics.MachineScope)),
		clones:        testutil.ToFloat64(metrics.SharedImportClones),
		savedBytes:    testutil.ToFloat64(metrics.SavedBytes),
		provisioned:   float64(metricstest.ReadHistogram(t, metrics.Provisioned).Count),
	}
}

func (m metricCounts) minus(o metricCounts) metricCounts {
	return metricCounts{m.sharedImports - o.sharedImports, m.ownImports - o.ownImports, m.clones - o.clones, m.savedBytes - o.savedBytes, m.provisioned - o.provisioned}
}

// TestMetricsOfMachinesLives: two machines of a template whose image is an
// HTTP import clone its one shared import, a machine of its own imports
// its image, and a machine whose VM KubeVirt refuses is counted by kind
// and reason; each provisioned machine is observed once. The test is not
// parallel: the suite's parallel tests start after it, so no other
// machine moves the process's metrics meanwhile.
func TestMetricsOfMachinesLives(t *testing.T) {
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	before := readMetricCounts(t)

	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/metrics.raw"}}
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	tmpl := classlessTemplate(tc.namespace, "pool", spec)
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	waitResolved(t, tmpl)
	machines := append(templateMachines(t, tc, tmpl, 2), tc.machine(t, "standalone", spec))
	for _, kvm := range machines {
		expectProvisioned(t, kvm)
	}
	g.Expect(readMetricCounts(t).minus(before)).To(Equal(metricCounts{
		sharedImports: 1, ownImports: 1, clones: 2, savedBytes: 2 * (10 << 30), provisioned: 3,
	}))

	// virt-api refuses a VM with fewer vCPUs than its preference requires.
	g.Expect(c.Create(ctx, &instancetypev1beta1.VirtualMachinePreference{
		ObjectMeta: metav1.ObjectMeta{Name: "two-vcpus", Namespace: tc.namespace},
		Spec: instancetypev1beta1.VirtualMachinePreferenceSpec{Requirements: &instancetypev1beta1.PreferenceRequirements{
			CPU: &instancetypev1beta1.CPUPreferenceRequirement{Guest: 2},
		}},
	})).To(Succeed())
	refusedSpec := containerDiskSpec()
	refusedSpec.CPU = &infrav1.CPU{Cores: 1}
	refusedSpec.Preference = &infrav1.PreferenceReference{Kind: infrav1.NamespacedPreferenceKind, Name: "two-vcpus"}
	refusals := metrics.CreateRefusals.WithLabelValues("VirtualMachine", string(metav1.StatusReasonInvalid))
	refusedBefore := testutil.ToFloat64(refusals)
	refused := tc.machine(t, "refused", refusedSpec)
	expectReady(t, refused, metav1.ConditionUnknown, infrav1.CreateRefusedReason)
	g.Expect(conditionOf(refused, infrav1.ReadyCondition).Message).To(ContainSubstring(`admission webhook "virtualmachine-validator.kubevirt.io" denied the request`))
	// The refused machine asks again a minute later, and each refused
	// create counts.
	g.Expect(testutil.ToFloat64(refusals) - refusedBefore).To(BeNumerically(">=", 1))

	// Nothing was observed again since: provisioned machines' later
	// reconciles, and the refused one, move no other metric.
	g.Expect(readMetricCounts(t).minus(before)).To(Equal(metricCounts{
		sharedImports: 1, ownImports: 1, clones: 2, savedBytes: 2 * (10 << 30), provisioned: 3,
	}))
}
