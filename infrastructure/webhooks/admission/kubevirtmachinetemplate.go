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
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-cozystack-io-v1alpha1-kubevirtmachinetemplate,mutating=true,failurePolicy=fail,groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,versions=v1alpha1,name=default.kubevirtmachinetemplate.infrastructure.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cozystack-io-v1alpha1-kubevirtmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cozystack.io,resources=kubevirtmachinetemplates,versions=v1alpha1,name=validation.kubevirtmachinetemplate.infrastructure.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1

// KubeVirtMachineTemplate defaults and validates KubeVirtMachineTemplates.
type KubeVirtMachineTemplate struct {
	// Clones authorizes a clone source as the user who writes it.
	Clones *cloneauth.Authorizer
	// Templates reads the KubeVirtMachineTemplate a template was copied
	// from, uncached.
	Templates client.Reader
	// Instancetypes reads KubeVirt's instancetypes and preferences in the
	// infrastructure cluster, uncached.
	Instancetypes client.Reader
	// Placement is what the hoster lets a tenant's machines ask of the
	// scheduler and the devices; the zero Policy allows none of it.
	Placement placement.Policy
}

var (
	_ admission.Defaulter[*infrav1.KubeVirtMachineTemplate] = &KubeVirtMachineTemplate{}
	_ admission.Validator[*infrav1.KubeVirtMachineTemplate] = &KubeVirtMachineTemplate{}
)

// SetupWebhookWithManager registers the webhooks.
func (w *KubeVirtMachineTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.KubeVirtMachineTemplate{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default labels a class-based template with its class, so the class
// controller finds the template without reading this API. The label
// follows the class: topology copies a ClusterClass template's labels into
// each clone and then patches spec.template.spec.workerClass, so a copied
// label can name the class the clone no longer uses; a classless template
// loses the label, which would otherwise count it as a user of the class
// it names and keep that class from being deleted.
func (w *KubeVirtMachineTemplate) Default(_ context.Context, t *infrav1.KubeVirtMachineTemplate) error {
	selection := t.Spec.Template.Spec.WorkerClass
	if selection == nil {
		delete(t.Labels, infrav1.WorkerClassLabel)
		return nil
	}
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[infrav1.WorkerClassLabel] = selection.Name
	return nil
}

// ValidateCreate checks the template.
func (w *KubeVirtMachineTemplate) ValidateCreate(ctx context.Context, t *infrav1.KubeVirtMachineTemplate) (admission.Warnings, error) {
	errs, err := w.validate(ctx, t)
	if err != nil {
		return nil, err
	}
	return nil, invalid("KubeVirtMachineTemplate", t.Name, errs)
}

// validate checks the template, against its instancetype and preference
// too, and, once it is valid, authorizes its clone source as the
// requesting user.
func (w *KubeVirtMachineTemplate) validate(ctx context.Context, t *infrav1.KubeVirtMachineTemplate) (field.ErrorList, error) {
	errs := validateTemplate(t, w.Placement)
	if len(errs) > 0 {
		return errs, nil
	}
	errs, err := validateReferences(ctx, w.Instancetypes, t.Namespace, &t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
	if err != nil || len(errs) > 0 {
		return errs, err
	}
	img := t.Spec.Template.Spec.Image
	if copied, err := copiedFromTemplate(ctx, w.Templates, t, img); err != nil || copied {
		return nil, err
	}
	return authorizeClone(ctx, w.Clones, img, t.Namespace, t.Name, field.NewPath("spec", "template", "spec", "image"))
}

// ValidateUpdate keeps the spec immutable, except for the Cluster API
// topology controller's server-side-apply dry runs, which compare a
// ClusterClass against the current template.
func (w *KubeVirtMachineTemplate) ValidateUpdate(ctx context.Context, oldT, newT *infrav1.KubeVirtMachineTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	if reflect.DeepEqual(oldT.Spec, newT.Spec) {
		// An unchanged spec is not validated again: a rule tightened since
		// the template was stored must not block removing a finalizer, an
		// owner reference or a label (deletion, clusterctl move). The class
		// label is metadata and is still checked.
		return nil, invalid("KubeVirtMachineTemplate", newT.Name, validateClassLabel(newT))
	}
	errs, err := w.validate(ctx, newT)
	if err != nil {
		return nil, err
	}
	if !topology.IsDryRunRequest(req, newT) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"),
			"a KubeVirtMachineTemplate is immutable; create a new template and point the MachineDeployment at it"))
	}
	return nil, invalid("KubeVirtMachineTemplate", newT.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *KubeVirtMachineTemplate) ValidateDelete(context.Context, *infrav1.KubeVirtMachineTemplate) (admission.Warnings, error) {
	return nil, nil
}

// validateClassLabel checks that a class-based template carries the label
// the class controller finds it by, naming its class, and that a
// classless one carries none.
func validateClassLabel(t *infrav1.KubeVirtMachineTemplate) field.ErrorList {
	selection := t.Spec.Template.Spec.WorkerClass
	label, ok := t.Labels[infrav1.WorkerClassLabel]
	switch {
	case selection == nil && ok:
		return field.ErrorList{field.Forbidden(field.NewPath("metadata", "labels").Key(infrav1.WorkerClassLabel),
			"a template without spec.template.spec.workerClass uses no class")}
	case selection == nil:
		return nil
	case !ok:
		return field.ErrorList{field.Required(field.NewPath("metadata", "labels").Key(infrav1.WorkerClassLabel),
			"the class controller finds the templates that use a class by this label")}
	case label != selection.Name:
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "labels").Key(infrav1.WorkerClassLabel), label,
			fmt.Sprintf("must name the template's class %q", selection.Name))}
	}
	return nil
}

// validateTemplate checks the template, its placement against policy;
// the class rules of its machine spec (no image beside a workerClass, the
// pool's GPUs) are ValidateMachineSpec's, which a KubeVirtMachine gets
// too.
func validateTemplate(t *infrav1.KubeVirtMachineTemplate, policy placement.Policy) field.ErrorList {
	spec := field.NewPath("spec")
	machine := spec.Child("template", "spec")
	errs := t.Spec.Template.ObjectMeta.Validate(spec.Child("template", "metadata"))
	errs = append(errs, ValidateMachineSpec(&t.Spec.Template.Spec, machine)...)
	errs = append(errs, vmspec.ValidateNetworkNamespaces(t.Spec.Template.Spec.Networks, t.Namespace, machine.Child("networks"))...)
	errs = append(errs, policy.Validate(&t.Spec.Template.Spec, t.Namespace, machine)...)
	if t.Spec.Template.Spec.ProviderID != "" {
		errs = append(errs, field.Forbidden(machine.Child("providerID"), "the controller sets each machine's providerID"))
	}
	if t.Spec.Template.Spec.WorkerClass == nil && t.Spec.Template.Spec.Image == nil {
		errs = append(errs, field.Required(machine.Child("image"), "a template without a workerClass needs an explicit image"))
	}
	return append(errs, validateClassLabel(t)...)
}
