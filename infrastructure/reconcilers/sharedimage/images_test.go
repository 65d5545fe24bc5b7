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

package sharedimage

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

func TestStateOf(t *testing.T) {
	resolved := &infrav1.ResolvedMachine{
		Image:       infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/image.raw.xz"}},
		ContentHash: strings.Repeat("0f", 32),
	}
	disk := &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	name := vmspec.SharedImportName(resolved.ContentHash, disk)
	images := &Images{failureRestarts: 3}
	running := cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Message: "Unable to connect to http data source"}

	for _, tc := range []struct {
		name    string
		attempt int
		mutate  func(*cdiv1.DataVolume)
		want    *Wait
		failed  bool
	}{
		{name: "succeeded: machines clone it", mutate: func(dv *cdiv1.DataVolume) { dv.Status.Phase = cdiv1.Succeeded }},
		{name: "not started", want: &Wait{infrav1.WaitingForImageImportReason, "Shared import DataVolume " + name + ": waiting for CDI"}},
		{name: "importing", mutate: func(dv *cdiv1.DataVolume) {
			dv.Status.Phase, dv.Status.Progress = cdiv1.ImportInProgress, "42.00%"
		}, want: &Wait{infrav1.WaitingForImageImportReason, "Shared import DataVolume " + name + ": ImportInProgress, 42.00%"}},
		{name: "a failed first attempt is retried", mutate: func(dv *cdiv1.DataVolume) {
			dv.Status.Phase, dv.Status.Conditions = cdiv1.Failed, []cdiv1.DataVolumeCondition{running}
		}, failed: true, want: &Wait{infrav1.ImageImportFailedReason,
			"Shared import DataVolume " + name + ", attempt 1 of 2: failed: Unable to connect to http data source; importing it once more"}},
		{name: "a restarting second attempt is not", attempt: 2, mutate: func(dv *cdiv1.DataVolume) {
			dv.Status.Phase, dv.Status.RestartCount = cdiv1.ImportInProgress, 3
		}, failed: true, want: &Wait{infrav1.ImageImportFailedReason,
			"Shared import DataVolume " + name + ", attempt 2 of 2: its importer pod restarted 3 times; delete it to import again"}},
		// Real CDI restarts a failing importer for good: the message
		// names the count that failed it, not CDI's growing one, and CDI's
		// words kept from when the importer was down, not the Running
		// condition's silence while it runs again.
		{name: "an importer that keeps restarting keeps its message", attempt: 2, mutate: func(dv *cdiv1.DataVolume) {
			dv.Status.Phase, dv.Status.RestartCount = cdiv1.ImportInProgress, 7
			dv.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionTrue, Reason: "Pod is running"}}
			dv.Annotations[vmspec.ImportFailureAnnotation] = "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"
		}, failed: true, want: &Wait{infrav1.ImageImportFailedReason,
			"Shared import DataVolume " + name + ", attempt 2 of 2: its importer pod restarted 3 times: Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found; delete it to import again"}},
		{name: "being deleted", mutate: func(dv *cdiv1.DataVolume) {
			dv.Status.Phase, dv.DeletionTimestamp = cdiv1.Succeeded, ptr.To(metav1.Now())
		}, want: &Wait{infrav1.WaitingForImageImportReason, "Shared import DataVolume " + name + " is being deleted; it is imported again once gone"}},
		{name: "someone else's disk of that name", mutate: func(dv *cdiv1.DataVolume) {
			dv.Status.Phase, dv.Spec.Source.HTTP.URL = cdiv1.Succeeded, "https://elsewhere.example.com/other.raw"
		}, want: &Wait{infrav1.ImageImportFailedReason,
			"DataVolume " + name + " exists and is not the shared import of content hash " + resolved.ContentHash + "; delete it to import the template's image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dv, _ := vmspec.SharedImport(vmspec.SharedImportInput{Namespace: "tenant", Resolved: resolved, RootDisk: disk, Attempt: tc.attempt})
			if tc.mutate != nil {
				tc.mutate(dv)
			}
			st := images.stateOf(dv, resolved)
			g.Expect(st.wait).To(Equal(tc.want))
			g.Expect(st.failed).To(Equal(tc.failed))
		})
	}
}

func TestShared(t *testing.T) {
	g := NewWithT(t)
	factory := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/image.raw.xz"}}
	tmpl := &infrav1.KubeVirtMachineTemplate{Status: infrav1.KubeVirtMachineTemplateStatus{Resolved: &infrav1.ResolvedMachine{Image: factory}}}
	g.Expect(Shared(tmpl)).To(BeTrue(), "a class-based template resolved to an HTTP import")

	classless := tmpl.DeepCopy()
	classless.Spec.Template.Spec.Image = factory.DeepCopy()
	g.Expect(Shared(classless)).To(BeTrue(), "a classless template whose spec.image is an HTTP import")

	golden := tmpl.DeepCopy()
	golden.Status.Resolved.Image = infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "talos"}}
	g.Expect(Shared(golden)).To(BeFalse(), "a golden clone is cloned as it is")

	g.Expect(Shared(&infrav1.KubeVirtMachineTemplate{})).To(BeFalse(), "an unresolved template")
}

func TestOriginOf(t *testing.T) {
	factory := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/image.raw.xz"}}
	other := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/other.raw"}}
	withCA := infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: factory.HTTPImport.URL, CABundle: "-----BEGIN CERTIFICATE-----"}}
	containerDisk := infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: "registry.example.com/worker@sha256:" + strings.Repeat("0", 64)}}
	golden := infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "talos"}}

	// template has spec.image specImage (nil: class-based) and, unless nil,
	// the resolution resolved.
	template := func(specImage, resolved *infrav1.ImageSource) *infrav1.KubeVirtMachineTemplate {
		tmpl := &infrav1.KubeVirtMachineTemplate{}
		tmpl.Spec.Template.Spec.Image = specImage
		if resolved != nil {
			tmpl.Status.Resolved = &infrav1.ResolvedMachine{Image: *resolved, ContentHash: strings.Repeat("0f", 32)}
		}
		return tmpl
	}
	for _, tc := range []struct {
		name     string
		template *infrav1.KubeVirtMachineTemplate
		image    *infrav1.ImageSource
		want     Origin
	}{
		{name: "a class-based template's machine clones the shared import",
			template: template(nil, &factory), want: SharedClone},
		{name: "a class-based template's machine waits for the resolution",
			template: template(nil, nil), want: AwaitResolution},
		{name: "a class-based template's golden clone is cloned as it is",
			template: template(nil, &golden), want: ResolvedImage},
		{name: "a class-based template's machine that names its own image imports it, even the resolution's",
			template: template(nil, &factory), image: &factory, want: OwnImage},
		{name: "a classless template's copy clones the shared import",
			template: template(&factory, &factory), image: factory.DeepCopy(), want: SharedClone},
		{name: "a classless template's copy waits for the resolution",
			template: template(&factory, nil), image: factory.DeepCopy(), want: AwaitResolution},
		{name: "a classless template's machine without an image clones the shared import",
			template: template(&factory, &factory), want: SharedClone},
		{name: "a machine that names another URL imports it, without waiting",
			template: template(&factory, nil), image: &other, want: OwnImage},
		{name: "a machine that names another CA bundle imports its own",
			template: template(&factory, &factory), image: &withCA, want: OwnImage},
		{name: "a copy of a template whose spec no longer names its resolution imports its own",
			template: template(&other, &factory), image: other.DeepCopy(), want: OwnImage},
		{name: "a classless container disk is the machine's own, without waiting",
			template: template(&containerDisk, nil), image: containerDisk.DeepCopy(), want: OwnImage},
		{name: "a classless golden clone is the machine's own",
			template: template(&golden, &golden), image: golden.DeepCopy(), want: OwnImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(OriginOf(tc.template, tc.image)).To(Equal(tc.want))
		})
	}
}
