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

// Package instancetype reads the KubeVirt instancetypes and preferences a
// machine spec names, for the template controller (capacity, GPUs) and the
// machine controller (the VM's CPU topology and disk bus).
package instancetype

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// Instancetype reads the spec an instancetype reference names; a missing
// instancetype is a field error at path (the reference).
func Instancetype(ctx context.Context, c client.Reader, namespace string, ref *infrav1.InstancetypeReference, path *field.Path) (*instancetypev1beta1.VirtualMachineInstancetypeSpec, *field.Error, error) {
	key := client.ObjectKey{Name: ref.Name}
	var obj client.Object
	var spec *instancetypev1beta1.VirtualMachineInstancetypeSpec
	if ref.EffectiveKind() == infrav1.NamespacedInstancetypeKind {
		it := &instancetypev1beta1.VirtualMachineInstancetype{}
		obj, spec, key.Namespace = it, &it.Spec, namespace
	} else {
		it := &instancetypev1beta1.VirtualMachineClusterInstancetype{}
		obj, spec = it, &it.Spec
	}
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, field.NotFound(path.Child("name"), fmt.Sprintf("%s %s", ref.EffectiveKind(), ref.Name)), nil
		}
		return nil, nil, err
	}
	return spec, nil, nil
}

// Preference reads the spec a preference reference names; a missing
// preference is a field error at path (the reference).
func Preference(ctx context.Context, c client.Reader, namespace string, ref *infrav1.PreferenceReference, path *field.Path) (*instancetypev1beta1.VirtualMachinePreferenceSpec, *field.Error, error) {
	key := client.ObjectKey{Name: ref.Name}
	var obj client.Object
	var spec *instancetypev1beta1.VirtualMachinePreferenceSpec
	if ref.EffectiveKind() == infrav1.NamespacedPreferenceKind {
		p := &instancetypev1beta1.VirtualMachinePreference{}
		obj, spec, key.Namespace = p, &p.Spec, namespace
	} else {
		p := &instancetypev1beta1.VirtualMachineClusterPreference{}
		obj, spec = p, &p.Spec
	}
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, field.NotFound(path.Child("name"), fmt.Sprintf("%s %s", ref.EffectiveKind(), ref.Name)), nil
		}
		return nil, nil, err
	}
	return spec, nil, nil
}
