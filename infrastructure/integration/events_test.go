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
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
)

// TestEventsOnceForEachTransition follows machines through the transitions
// a person watches with kubectl describe and lists their Events: a machine
// of a template whose HTTP import is shared (the template's import
// created, the machine's clone of it, its VM created, provisioned) with a
// second template sharing the import, a machine whose launcher Pod
// KubeVirt refuses (a GPU it does not permit) and one whose namespace may
// not clone the source its image names. Each transition is one Event of
// its reason, never a series, and the controllers' resyncs (every
// syncPeriod) re-reconcile every machine without adding one.
func TestEventsOnceForEachTransition(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()

	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/events.raw"}}
	spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	tmpl := classlessTemplate(tc.namespace, "shared", spec)
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	waitResolved(t, tmpl)
	g.Expect(sharedimage.Shared(tmpl)).To(BeTrue())
	shared := templateMachines(t, tc, tmpl, 1)[0]

	gpu := containerDiskSpec()
	gpu.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/TU104GL_Tesla_T4"}}
	refused := tc.machine(t, "refused", gpu)

	// Written past admission (an administrator's machine): the controller
	// asks as the machine's namespace, which may not clone from there.
	golden := "events-golden-" + rand.String(5)
	goldenImage(t, golden, "talos")
	clone := containerDiskSpec()
	clone.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: golden, Name: "talos"}}
	forbidden := tc.machine(t, "forbidden", clone)

	expectReady(t, shared, metav1.ConditionTrue, infrav1.ReadyReason)
	// The patch helper sends the conditions before the provisioned fields.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(shared), shared)).To(Succeed())
		g.Expect(shared.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	}).Should(Succeed())
	expectReady(t, refused, metav1.ConditionUnknown, infrav1.CreateRefusedReason)
	expectReady(t, forbidden, metav1.ConditionUnknown, infrav1.CloneSourceForbiddenReason)

	sharedImport := sharedimage.Name(tmpl)
	// A second template of the same resolution, once the import exists,
	// shares it.
	again := classlessTemplate(tc.namespace, "shared-again", spec)
	g.Expect(c.Create(ctx, again)).To(Succeed())
	waitResolved(t, again)
	g.Expect(sharedimage.Name(again)).To(Equal(sharedImport))
	want := map[string][]string{
		"KubeVirtMachineTemplate/shared": {
			"Normal SharedImportCreated Import: Importing the image once into the shared DataVolume " + sharedImport + " (attempt 1) for the machines to clone",
		},
		"KubeVirtMachineTemplate/shared-again": {
			"Normal SharedImportJoined Import: The machines clone the shared DataVolume " + sharedImport + ", imported for another template",
		},
		"KubeVirtMachine/" + shared.Name: {
			"Normal Provisioned Provision: VirtualMachineInstance " + shared.Name + " runs on node " + shared.Status.NodeName,
			"Normal SharedImportCloned Create: Created root DataVolume " + shared.Name + "-root, a clone of the shared import " + sharedImport,
			"Normal VirtualMachineCreated Create: Created VirtualMachine " + shared.Name,
		},
		"KubeVirtMachine/refused": {
			"Normal VirtualMachineCreated Create: Created VirtualMachine refused",
			"Warning CreateRefused Create: KubeVirt cannot create the instance's launcher Pod: failed to render launch manifest: " +
				"GPU nvidia.com/TU104GL_Tesla_T4 is not permitted in permittedHostDevices configuration",
		},
		"KubeVirtMachine/forbidden": {
			"Warning CloneSourceForbidden Clone: " + conditionOf(forbidden, infrav1.VirtualMachineProvisionedCondition).Message,
		},
	}
	g.Eventually(func(g Gomega) {
		g.Expect(eventsIn(g, tc.namespace)).To(Equal(want))
	}).Should(Succeed())
	// Every machine is reconciled again at each resync; none adds an
	// Event, or makes one a series.
	g.Consistently(func(g Gomega) {
		g.Expect(eventsIn(g, tc.namespace)).To(Equal(want))
	}).WithTimeout(2*syncPeriod + time.Second).Should(Succeed())
}

// eventsIn lists the Events about the provider's objects in a namespace
// (KubeVirt's about its own are left out) as "type reason action: note" by
// the kind and name of their object, sorted; an Event the recorder made a
// series (a repeat) says so, and no note may carry bootstrap data.
func eventsIn(g Gomega, namespace string) map[string][]string {
	list := &eventsv1.EventList{}
	g.Expect(c.List(context.Background(), list, client.InNamespace(namespace))).To(Succeed())
	out := map[string][]string{}
	for _, e := range list.Items {
		if e.Regarding.APIVersion != infrav1.GroupVersion.String() {
			continue
		}
		g.Expect(e.Note).NotTo(ContainSubstring("#cloud-config"))
		line := fmt.Sprintf("%s %s %s: %s", e.Type, e.Reason, e.Action, e.Note)
		if e.Series != nil {
			line += fmt.Sprintf(" (repeated %d times)", e.Series.Count)
		}
		k := e.Regarding.Kind + "/" + e.Regarding.Name
		out[k] = append(out[k], line)
	}
	for _, lines := range out {
		sort.Strings(lines)
	}
	return out
}

// waitForEvents waits until the Events of the object of kind and key have
// at least the reasons given, so that a test that counts a namespace's
// writes starts after the recorder, which sends them in the background,
// sent them.
func waitForEvents(t *testing.T, kind string, obj client.Object, reasons ...string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var got []string
		for _, line := range eventsIn(g, obj.GetNamespace())[kind+"/"+obj.GetName()] {
			got = append(got, strings.Fields(line)[1])
		}
		g.Expect(got).To(ContainElements(reasons))
	}).Should(Succeed())
}
