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

package admission

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/instancetype"
)

// validateReferences reads the instancetype and preference a machine spec
// in namespace names, from the infrastructure cluster, and refuses what
// KubeVirt refuses once it applies them (instancetype.Validate, the rule
// the template's resolution and the renderer apply too). One that does
// not exist is not checked: KubeVirt refuses the VM on its own, and the
// template reports it missing.
func validateReferences(ctx context.Context, reader client.Reader, namespace string, spec *infrav1.KubeVirtMachineSpec, path *field.Path) (field.ErrorList, error) {
	if spec.Instancetype == nil && spec.Preference == nil {
		return nil, nil
	}
	if reader == nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("instancetypes and preferences cannot be read: the webhook has no reader of the infrastructure cluster"))
	}
	var it *instancetypev1beta1.VirtualMachineInstancetypeSpec
	var preference *instancetypev1beta1.VirtualMachinePreferenceSpec
	if ref := spec.Instancetype; ref != nil {
		found, _, err := instancetype.Instancetype(ctx, reader, namespace, ref, path.Child("instancetype"))
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("reading %s %s: %w", ref.EffectiveKind(), ref.Name, err))
		}
		it = found
	}
	if ref := spec.Preference; ref != nil {
		found, _, err := instancetype.Preference(ctx, reader, namespace, ref, path.Child("preference"))
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("reading %s %s: %w", ref.EffectiveKind(), ref.Name, err))
		}
		preference = found
	}
	return instancetype.Validate(spec, it, preference, path), nil
}
