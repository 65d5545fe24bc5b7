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

package kairosconfig

import (
	"context"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/contract"
)

// imageVersion is the Kubernetes version an image declares and how a
// Machine's version must match it.
type imageVersion struct {
	Version string
	// Match is status.resolved.kubernetesVersionMatch: Exact for a fixed
	// image, which carries one patch; Minor for platform images, which
	// follow the platform's patch map.
	Match workerclassv1.KubernetesVersionMatch
	// Source names the object the version was read from, for messages.
	Source string
}

// errInfrastructureNotFound means the Machine's infrastructure object does
// not exist yet.
var errInfrastructureNotFound = fmt.Errorf("the infrastructure machine does not exist yet")

// InfrastructureKinds are the kinds the controller follows from a Machine:
// its infrastructure machine's and the template's that machine was cloned
// from. Both are tenant-chosen (the Machine's spec.infrastructureRef, the
// machine's cluster.x-k8s.io/cloned-from-* annotations), and a read of a
// kind starts a shared informer: one of a kind the controller's role
// cannot list never syncs, and every reconcile that reads it would hold a
// worker until the reconcile timeout. Only these kinds are read, which the
// role lists.
type InfrastructureKinds struct {
	Machine, Template schema.GroupKind
}

// KubeVirtKinds are the kinds the pair defines, which the controller
// follows by default.
var KubeVirtKinds = InfrastructureKinds{
	Machine:  schema.GroupKind{Group: "infrastructure.cozystack.io", Kind: "KubeVirtMachine"},
	Template: schema.GroupKind{Group: "infrastructure.cozystack.io", Kind: "KubeVirtMachineTemplate"},
}

// unsupportedKindError names a kind the controller does not follow, and
// the field that named it.
type unsupportedKindError struct{ msg string }

func (e *unsupportedKindError) Error() string { return e.msg }

func unsupportedKind(subject string, path *field.Path, got, want schema.GroupKind) error {
	return &unsupportedKindError{msg: fmt.Sprintf("%s %s: %s; a KairosConfig reads no other infrastructure kind",
		subject, path, field.NotSupported(path, got.String(), []string{want.String()}).ErrorBody())}
}

// infrastructureTemplate follows the Machine's infrastructure object to
// the template it was cloned from (cluster.x-k8s.io/cloned-from-*
// annotations). Both are read from the cache, and only when they are of
// kinds (an *unsupportedKindError otherwise): the template whole, as
// unstructured, the infrastructure machine as its metadata alone
// (metadataReader). It returns nil when there is no template to read: no
// cloned-from annotations, or the template is gone.
func infrastructureTemplate(ctx context.Context, reader client.Reader, kinds InfrastructureKinds, machine *clusterv1.Machine) (*unstructured.Unstructured, error) {
	ref := machine.Spec.InfrastructureRef
	if gk := (schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind}); gk != kinds.Machine {
		return nil, unsupportedKind("Machine "+machine.Name, field.NewPath("spec", "infrastructureRef"), gk, kinds.Machine)
	}
	infra, err := external.GetObjectFromContractVersionedRef(ctx, metadataReader{reader}, ref, machine.Namespace)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errInfrastructureNotFound
		}
		return nil, fmt.Errorf("reading the infrastructure machine: %w", err)
	}
	annotations := infra.GetAnnotations()
	name, groupKind := annotations[clusterv1.TemplateClonedFromNameAnnotation], annotations[clusterv1.TemplateClonedFromGroupKindAnnotation]
	if name == "" || groupKind == "" {
		return nil, nil
	}
	gk := schema.ParseGroupKind(groupKind)
	if gk != kinds.Template {
		return nil, unsupportedKind(ref.Kind+" "+ref.Name,
			field.NewPath("metadata", "annotations").Key(clusterv1.TemplateClonedFromGroupKindAnnotation), gk, kinds.Template)
	}
	template, err := external.GetObjectFromContractVersionedRef(ctx, reader, clusterv1.ContractVersionedObjectReference{APIGroup: gk.Group, Kind: gk.Kind, Name: name}, machine.Namespace)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the infrastructure template %s %s: %w", gk.Kind, name, err)
	}
	return template, nil
}

// metadataReader gives Cluster API's contract lookup
// (external.GetObjectFromContractVersionedRef, which picks the version the
// CRD serves for the contract) an unstructured object's metadata alone,
// read from a cache of metadata; other reads (the CRD's metadata the
// lookup reads first) pass through. The controller reads the
// infrastructure machine for its cloned-from annotations only, and a
// cache of whole infrastructure machines decoded each of the
// infrastructure provider's status writes and held every machine: 38% of
// the bootstrap provider's live heap at N = 1000 (docs/benchmarks.md).
type metadataReader struct{ client.Reader }

func (r metadataReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return r.Reader.Get(ctx, key, obj, opts...)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(u.GroupVersionKind())
	if err := r.Reader.Get(ctx, key, m, opts...); err != nil {
		return err
	}
	objectMeta, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.ObjectMeta)
	if err != nil {
		return fmt.Errorf("reading the metadata of %s %s: %w", u.GetKind(), key.Name, err)
	}
	u.Object["metadata"] = objectMeta
	return nil
}

// imageVersionFrom reads status.resolved.kubernetesVersion and
// status.resolved.kubernetesVersionMatch of an infrastructure machine
// template. It returns nil when the template has not resolved a version.
func imageVersionFrom(template *unstructured.Unstructured) (*imageVersion, error) {
	version, _, err := unstructured.NestedString(template.Object, contract.ResolvedKubernetesVersionField...)
	if err != nil {
		return nil, fmt.Errorf("reading %s of %s %s: %w", fieldPath(contract.ResolvedKubernetesVersionField), template.GetKind(), template.GetName(), err)
	}
	if version == "" {
		return nil, nil
	}
	match, _, err := unstructured.NestedString(template.Object, contract.ResolvedKubernetesVersionMatchField...)
	if err != nil {
		return nil, fmt.Errorf("reading %s of %s %s: %w", fieldPath(contract.ResolvedKubernetesVersionMatchField), template.GetKind(), template.GetName(), err)
	}
	return &imageVersion{Version: version, Match: workerclassv1.KubernetesVersionMatch(match), Source: template.GetKind() + " " + template.GetName()}, nil
}

// checkVersion compares Machine.spec.version with the image's version:
// the exact patch for a fixed image (Exact), the minor for platform images
// (Minor, also the default when the match is not stated). It returns a
// message naming both versions when they do not match.
func checkVersion(machineVersion string, image imageVersion) (mismatch string, err error) {
	want, err := semver.ParseTolerant(machineVersion)
	if err != nil {
		return "", fmt.Errorf("machine spec.version %q is not a version: %w", machineVersion, err)
	}
	have, err := semver.ParseTolerant(image.Version)
	if err != nil {
		return "", fmt.Errorf("%s declares Kubernetes version %q, which is not a version: %w", image.Source, image.Version, err)
	}
	switch image.Match {
	case workerclassv1.KubernetesVersionMatchExact:
		if want.Major != have.Major || want.Minor != have.Minor || want.Patch != have.Patch {
			return fmt.Sprintf("Machine version %s does not match the image's Kubernetes version %s (%s, exact patch required)",
				vPrefixed(machineVersion), vPrefixed(image.Version), image.Source), nil
		}
	case workerclassv1.KubernetesVersionMatchMinor, "":
		if want.Major != have.Major || want.Minor != have.Minor {
			return fmt.Sprintf("Machine version %s does not match the image's Kubernetes version %s (%s, same minor required)",
				vPrefixed(machineVersion), vPrefixed(image.Version), image.Source), nil
		}
	default:
		return "", fmt.Errorf("%s has an unknown kubernetesVersionMatch %q", image.Source, image.Match)
	}
	return "", nil
}

func vPrefixed(v string) string {
	if strings.HasPrefix(v, "v") {
		return v
	}
	return "v" + v
}
