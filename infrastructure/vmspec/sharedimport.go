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
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

const (
	// SharedImageLabel marks a template's shared import: the DataVolume
	// that imports a resolved HTTP image once per namespace, and its CA
	// ConfigMap. Its value is the DataVolume's name.
	SharedImageLabel = "infrastructure.cozystack.io/shared-image"
	// ContentHashAnnotation is the full content hash of the resolution a
	// shared import holds: a disk is cloned only for templates of that
	// hash.
	ContentHashAnnotation = "infrastructure.cozystack.io/content-hash"
	// ImportAttemptAnnotation counts the shared import's attempts: a
	// failed first attempt is imported once more.
	ImportAttemptAnnotation = "infrastructure.cozystack.io/import-attempt"
	// ImportFailureAnnotation keeps CDI's words on a shared import's last
	// failure. Real CDI restarts a failing importer for good and has them
	// in the DataVolume's Running condition only while the importer is
	// down, not while it runs again: the machines read them from here then.
	ImportFailureAnnotation = "infrastructure.cozystack.io/import-failure"
	// CloneSourceFinalizer keeps a shared import that garbage collection
	// or a user deletes while machines' clones of it are in progress.
	CloneSourceFinalizer = "infrastructure.cozystack.io/clone-source"

	sharedImagePrefix = "image-"
)

var lowerHex = regexp.MustCompile(`^[0-9a-f]{16,}$`)

// SharedImportName is the name of the DataVolume that imports a resolved
// image once for the templates of its content hash and disk shape: the
// hash's first 16 digits, and a digest of the hash and the disk shape (a
// clone may not be smaller than its source, and a storage class or volume
// mode is the template's choice). A name is only ever reused for the same
// hash, which ContentHashAnnotation confirms.
func SharedImportName(contentHash string, disk *infrav1.RootDisk) string {
	h := sha256.New()
	for _, part := range append([]string{contentHash}, diskShape(disk)...) {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	digest := hex.EncodeToString(h.Sum(nil))
	prefix := digest[:16]
	if lowerHex.MatchString(contentHash) {
		prefix = contentHash[:16]
	}
	return sharedImagePrefix + prefix + "-" + digest[:10]
}

// diskShape lists what of a root disk decides the shared disk's claim.
func diskShape(disk *infrav1.RootDisk) []string {
	if disk == nil {
		return nil
	}
	var parts []string
	if disk.Size != nil {
		parts = append(parts, "size", disk.Size.String())
	}
	parts = append(parts, "class", disk.StorageClassName)
	for _, m := range disk.AccessModes {
		parts = append(parts, "access", string(m))
	}
	if disk.VolumeMode != nil {
		parts = append(parts, "mode", string(*disk.VolumeMode))
	}
	return parts
}

// SharedImportCAName is the name of a shared import's CA ConfigMap.
func SharedImportCAName(dataVolumeName string) string { return dataVolumeName + "-ca" }

// SharedImportInput is what a shared import is rendered from.
type SharedImportInput struct {
	// Namespace of the templates that share the import.
	Namespace string
	// Resolved is the templates' frozen resolution; its image must be an
	// HTTP import.
	Resolved *infrav1.ResolvedMachine
	// RootDisk is the templates' root disk: the shared disk is the size
	// and kind of the machines' clones.
	RootDisk *infrav1.RootDisk
	// Attempt is 1 for the first import, 2 for its retry.
	Attempt int
	// Owners are the templates that resolve to the image, as
	// non-controller owner references: garbage collection deletes the
	// import once none of them exists.
	Owners []metav1.OwnerReference
}

// SharedImport renders the DataVolume that imports a resolved HTTP image
// once, and the ConfigMap of its CA bundle (nil without one), which the
// DataVolume owns once it exists (SharedImportCA).
func SharedImport(in SharedImportInput) (*cdiv1.DataVolume, *corev1.ConfigMap) {
	img := in.Resolved.Image.HTTPImport
	name := SharedImportName(in.Resolved.ContentHash, in.RootDisk)
	labels := map[string]string{SharedImageLabel: name}
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: in.Namespace,
			Labels:    labels,
			Annotations: map[string]string{
				KeepAfterCompletionAnnotation: "false",
				ContentHashAnnotation:         in.Resolved.ContentHash,
				ImportAttemptAnnotation:       strconv.Itoa(max(in.Attempt, 1)),
			},
			OwnerReferences: append([]metav1.OwnerReference(nil), in.Owners...),
			Finalizers:      []string{CloneSourceFinalizer},
		},
		Spec: cdiv1.DataVolumeSpec{
			Storage: storageSpec(in.RootDisk),
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: img.URL}},
		},
	}
	if img.CABundle == "" {
		return dv, nil
	}
	dv.Spec.Source.HTTP.CertConfigMap = SharedImportCAName(name)
	ca := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: SharedImportCAName(name), Namespace: in.Namespace, Labels: copyMap(labels)},
		Data:       map[string]string{ImportCAKey: img.CABundle},
	}
	return dv, ca
}

// SharedImportCA sets the shared import's DataVolume as the controller of
// its CA ConfigMap, so that the bundle goes with the disk.
func SharedImportCA(ca *corev1.ConfigMap, dv *cdiv1.DataVolume) {
	ca.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: cdiv1.SchemeGroupVersion.String(),
		Kind:       "DataVolume",
		Name:       dv.Name,
		UID:        dv.UID,
		Controller: ptr.To(true),
	}}
}

// TemplateOwnerReference is a template's non-controller reference on the
// shared import it resolves to. It does not block the template's
// deletion.
func TemplateOwnerReference(t *infrav1.KubeVirtMachineTemplate) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: infrav1.GroupVersion.String(),
		Kind:       "KubeVirtMachineTemplate",
		Name:       t.Name,
		UID:        t.UID,
	}
}

// SharedImportMatches reports whether an existing DataVolume is the shared
// import a resolution and disk would render: the same content hash and the
// same HTTP source. Anything else is never cloned for the template.
func SharedImportMatches(dv *cdiv1.DataVolume, resolved *infrav1.ResolvedMachine) bool {
	if dv.Labels[SharedImageLabel] != dv.Name || dv.Annotations[ContentHashAnnotation] != resolved.ContentHash {
		return false
	}
	src := dv.Spec.Source
	return src != nil && src.HTTP != nil && resolved.Image.HTTPImport != nil && src.HTTP.URL == resolved.Image.HTTPImport.URL
}

// SharedCloneSource is the image of a machine whose template's HTTP import
// is shared: a clone of the shared disk's claim in the machine's own
// namespace.
func SharedCloneSource(dataVolumeName string) infrav1.ImageSource {
	return infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromPersistentVolumeClaim, Name: dataVolumeName}}
}
