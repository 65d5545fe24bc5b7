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

package vmspec

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

func TestSharedImportName(t *testing.T) {
	g := NewWithT(t)
	hash := strings.Repeat("ab", 32)
	disk := &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	name := SharedImportName(hash, disk)
	g.Expect(name).To(HavePrefix("image-" + hash[:16] + "-"))
	g.Expect(validation.IsDNS1123Label(name)).To(BeEmpty())
	g.Expect(SharedImportName(hash, disk.DeepCopy())).To(Equal(name), "the same resolution and disk share one import")

	bigger := &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
	classed := &infrav1.RootDisk{Size: disk.Size, StorageClassName: "fast"}
	block := &infrav1.RootDisk{Size: disk.Size, VolumeMode: ptr.To(corev1.PersistentVolumeBlock)}
	other := strings.Repeat("cd", 32)
	names := map[string]bool{name: true}
	for _, n := range []string{SharedImportName(hash, bigger), SharedImportName(hash, classed), SharedImportName(hash, block), SharedImportName(other, disk)} {
		g.Expect(names).NotTo(HaveKey(n), "another disk shape or resolution is another import")
		names[n] = true
	}

	// A hash that is not lower-case hex is only digested.
	odd := SharedImportName("Not/A.Hash", disk)
	g.Expect(validation.IsDNS1123Label(odd)).To(BeEmpty())
}

func TestSharedImport(t *testing.T) {
	g := NewWithT(t)
	resolved := &infrav1.ResolvedMachine{
		Image:       infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/image.raw.xz", CABundle: "CA"}},
		ContentHash: strings.Repeat("0f", 32),
	}
	disk := &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi")), StorageClassName: "fast"}
	owner := metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "KubeVirtMachineTemplate", Name: "workers", UID: "uid-1"}
	dv, ca := SharedImport(SharedImportInput{Namespace: "tenant", Resolved: resolved, RootDisk: disk, Attempt: 2, Owners: []metav1.OwnerReference{owner}})

	name := SharedImportName(resolved.ContentHash, disk)
	g.Expect(dv.Name).To(Equal(name))
	g.Expect(dv.Namespace).To(Equal("tenant"))
	g.Expect(dv.Labels).To(Equal(map[string]string{SharedImageLabel: name}))
	g.Expect(dv.Annotations).To(Equal(map[string]string{
		KeepAfterCompletionAnnotation: "false",
		ContentHashAnnotation:         resolved.ContentHash,
		ImportAttemptAnnotation:       "2",
	}))
	g.Expect(dv.OwnerReferences).To(Equal([]metav1.OwnerReference{owner}))
	g.Expect(dv.Finalizers).To(Equal([]string{CloneSourceFinalizer}))
	g.Expect(dv.Spec.Source.HTTP.URL).To(Equal(resolved.Image.HTTPImport.URL))
	g.Expect(dv.Spec.Source.HTTP.CertConfigMap).To(Equal(name + "-ca"))
	g.Expect(*dv.Spec.Storage.StorageClassName).To(Equal("fast"))
	g.Expect(dv.Spec.Storage.Resources.Requests.Storage().String()).To(Equal("10Gi"))
	g.Expect(SharedImportMatches(dv, resolved)).To(BeTrue())

	g.Expect(ca.Name).To(Equal(name + "-ca"))
	g.Expect(ca.Data).To(Equal(map[string]string{ImportCAKey: "CA"}))
	dv.UID = "dv-uid"
	SharedImportCA(ca, dv)
	g.Expect(metav1.IsControlledBy(ca, dv)).To(BeTrue())

	noCA := resolved.DeepCopy()
	noCA.Image.HTTPImport.CABundle = ""
	plain, none := SharedImport(SharedImportInput{Namespace: "tenant", Resolved: noCA, RootDisk: disk})
	g.Expect(none).To(BeNil())
	g.Expect(plain.Spec.Source.HTTP.CertConfigMap).To(BeEmpty())
	g.Expect(plain.Annotations).To(HaveKeyWithValue(ImportAttemptAnnotation, "1"))
}

func TestSharedImportMatches(t *testing.T) {
	resolved := &infrav1.ResolvedMachine{
		Image:       infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/image.raw.xz"}},
		ContentHash: strings.Repeat("0f", 32),
	}
	disk := &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
	for name, tc := range map[string]struct {
		mutate func(*infrav1.ResolvedMachine)
	}{
		"another content hash": {mutate: func(r *infrav1.ResolvedMachine) { r.ContentHash = strings.Repeat("1f", 32) }},
		"another URL":          {mutate: func(r *infrav1.ResolvedMachine) { r.Image.HTTPImport.URL = "https://elsewhere.example.com/x.raw" }},
		"not an HTTP import": {mutate: func(r *infrav1.ResolvedMachine) {
			r.Image = infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: "r@sha256:1"}}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			dv, _ := SharedImport(SharedImportInput{Namespace: "tenant", Resolved: resolved, RootDisk: disk})
			other := resolved.DeepCopy()
			tc.mutate(other)
			NewWithT(t).Expect(SharedImportMatches(dv, other)).To(BeFalse())
		})
	}
	t.Run("a DataVolume without the label", func(t *testing.T) {
		dv, _ := SharedImport(SharedImportInput{Namespace: "tenant", Resolved: resolved, RootDisk: disk})
		delete(dv.Labels, SharedImageLabel)
		NewWithT(t).Expect(SharedImportMatches(dv, resolved)).To(BeFalse())
	})
}
