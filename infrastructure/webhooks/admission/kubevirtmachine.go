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
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cozystack-io-v1alpha1-kubevirtmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cozystack.io,resources=kubevirtmachines,versions=v1alpha1,name=validation.kubevirtmachine.infrastructure.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1

// KubeVirtMachine validates KubeVirtMachines.
type KubeVirtMachine struct {
	// Clones authorizes a clone source as the user who writes it.
	Clones *cloneauth.Authorizer
	// Templates reads the KubeVirtMachineTemplate a machine was copied
	// from, uncached.
	Templates client.Reader
	// Instancetypes reads KubeVirt's instancetypes and preferences in the
	// infrastructure cluster, uncached.
	Instancetypes client.Reader
	// Placement is what the hoster lets a tenant's machine ask of the
	// scheduler and the devices; the zero Policy allows none of it.
	Placement placement.Policy
}

var _ admission.Validator[*infrav1.KubeVirtMachine] = &KubeVirtMachine{}

// SetupWebhookWithManager registers the webhook.
func (w *KubeVirtMachine) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.KubeVirtMachine{}).WithValidator(w).Complete()
}

// ValidateCreate checks the spec, against its instancetype and preference
// too and against the hoster's placement policy, and that the name can
// name a VM, and authorizes a clone source as the requesting user unless the machine is
// Cluster API's copy of a template that has the same image.
func (w *KubeVirtMachine) ValidateCreate(ctx context.Context, m *infrav1.KubeVirtMachine) (admission.Warnings, error) {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(m.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), m.Name,
			"the VirtualMachine, its hostname and the providerID take this name: "+msg))
	}
	errs = append(errs, ValidateMachineSpec(&m.Spec, field.NewPath("spec"))...)
	errs = append(errs, vmspec.ValidateNetworkNamespaces(m.Spec.Networks, m.Namespace, field.NewPath("spec", "networks"))...)
	errs = append(errs, w.Placement.Validate(&m.Spec, m.Namespace, field.NewPath("spec"))...)
	if m.Spec.ProviderID != "" && m.Spec.ProviderID != infrav1.ProviderID(m.Name) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "providerID"), m.Spec.ProviderID,
			"must be empty or "+infrav1.ProviderID(m.Name)))
	}
	if len(errs) > 0 {
		return nil, invalid("KubeVirtMachine", m.Name, errs)
	}
	errs, err := validateReferences(ctx, w.Instancetypes, m.Namespace, &m.Spec, field.NewPath("spec"))
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, invalid("KubeVirtMachine", m.Name, errs)
	}
	copied, err := copiedFromTemplate(ctx, w.Templates, m, m.Spec.Image)
	if err != nil || copied {
		return nil, err
	}
	errs, err = authorizeClone(ctx, w.Clones, m.Spec.Image, m.Namespace, m.Name, field.NewPath("spec", "image"))
	if err != nil {
		return nil, err
	}
	return nil, invalid("KubeVirtMachine", m.Name, errs)
}

// ValidateUpdate keeps the spec immutable: a machine's VM is created once.
// Only the controller's providerID may be filled in.
func (w *KubeVirtMachine) ValidateUpdate(_ context.Context, oldM, newM *infrav1.KubeVirtMachine) (admission.Warnings, error) {
	var errs field.ErrorList
	oldSpec, newSpec := oldM.Spec.DeepCopy(), newM.Spec.DeepCopy()
	if oldSpec.ProviderID != newSpec.ProviderID {
		if oldSpec.ProviderID != "" || newSpec.ProviderID != infrav1.ProviderID(newM.Name) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "providerID"), newSpec.ProviderID,
				"can only be set once, to "+infrav1.ProviderID(newM.Name)))
		}
		oldSpec.ProviderID, newSpec.ProviderID = "", ""
	}
	if !reflect.DeepEqual(oldSpec, newSpec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "a KubeVirtMachine's spec is immutable; roll out a new template instead"))
	}
	return nil, invalid("KubeVirtMachine", newM.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *KubeVirtMachine) ValidateDelete(context.Context, *infrav1.KubeVirtMachine) (admission.Warnings, error) {
	return nil, nil
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(infrav1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
