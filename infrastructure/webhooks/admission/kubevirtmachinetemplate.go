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
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
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
// controller finds the template without reading this API.
func (w *KubeVirtMachineTemplate) Default(_ context.Context, t *infrav1.KubeVirtMachineTemplate) error {
	if t.Spec.WorkerClassName == "" {
		return nil
	}
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	if _, set := t.Labels[infrav1.WorkerClassLabel]; !set {
		t.Labels[infrav1.WorkerClassLabel] = t.Spec.WorkerClassName
	}
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

// validate checks the template and, once it is valid, authorizes its clone
// source as the requesting user.
func (w *KubeVirtMachineTemplate) validate(ctx context.Context, t *infrav1.KubeVirtMachineTemplate) (field.ErrorList, error) {
	errs := validateTemplate(t)
	if len(errs) > 0 {
		return errs, nil
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
// the class controller finds it by, naming its class.
func validateClassLabel(t *infrav1.KubeVirtMachineTemplate) field.ErrorList {
	if t.Spec.WorkerClassName == "" {
		return nil
	}
	label, ok := t.Labels[infrav1.WorkerClassLabel]
	switch {
	case !ok:
		return field.ErrorList{field.Required(field.NewPath("metadata", "labels").Key(infrav1.WorkerClassLabel),
			"the class controller finds the templates that use a class by this label")}
	case label != t.Spec.WorkerClassName:
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "labels").Key(infrav1.WorkerClassLabel), label,
			fmt.Sprintf("must name the template's class %q", t.Spec.WorkerClassName))}
	}
	return nil
}

func validateTemplate(t *infrav1.KubeVirtMachineTemplate) field.ErrorList {
	spec := field.NewPath("spec")
	machine := spec.Child("template", "spec")
	errs := t.Spec.Template.ObjectMeta.Validate(spec.Child("template", "metadata"))
	errs = append(errs, ValidateMachineSpec(&t.Spec.Template.Spec, machine)...)
	if t.Spec.Template.Spec.ProviderID != "" {
		errs = append(errs, field.Forbidden(machine.Child("providerID"), "the controller sets each machine's providerID"))
	}

	if t.Spec.WorkerClassName == "" {
		if t.Spec.Template.Spec.Image == nil {
			errs = append(errs, field.Required(machine.Child("image"), "a template without a workerClassName needs an explicit image"))
		}
		if !reflect.DeepEqual(t.Spec.PoolSettings, workerclassv1.PoolSettings{}) {
			errs = append(errs, field.Forbidden(spec, "version and the pool overrides are resolved against a class; set workerClassName or remove them"))
		}
		return errs
	}
	if t.Spec.Template.Spec.Image != nil {
		errs = append(errs, field.Forbidden(machine.Child("image"), "a template that names a workerClassName takes its image from the class"))
	}
	errs = append(errs, validateClassLabel(t)...)
	// The pool's GPUs drive class resolution (the NVIDIA module rule); the
	// machines get the VM's GPUs and those of its instancetype. Without an
	// instancetype the two lists name the same devices; with one, the VM
	// lists only what the instancetype does not attach (KubeVirt refuses a
	// GPU listed twice), which the template controller checks against the
	// instancetype when it resolves the template.
	poolGPUs := make([]string, 0, len(t.Spec.GPUs))
	for _, g := range t.Spec.GPUs {
		poolGPUs = append(poolGPUs, g.Name)
	}
	vmGPUs := make([]string, 0, len(t.Spec.Template.Spec.GPUs))
	for _, g := range t.Spec.Template.Spec.GPUs {
		vmGPUs = append(vmGPUs, g.DeviceName)
	}
	slices.Sort(poolGPUs)
	slices.Sort(vmGPUs)
	switch {
	case t.Spec.Template.Spec.Instancetype == nil && !slices.Equal(poolGPUs, vmGPUs):
		errs = append(errs, field.Invalid(spec.Child("gpus"), poolGPUs,
			fmt.Sprintf("must list the same devices as spec.template.spec.gpus[].deviceName %v", vmGPUs)))
	case t.Spec.Template.Spec.Instancetype != nil:
		for i, g := range t.Spec.Template.Spec.GPUs {
			if !slices.Contains(poolGPUs, g.DeviceName) {
				errs = append(errs, field.Invalid(machine.Child("gpus").Index(i).Child("deviceName"), g.DeviceName,
					fmt.Sprintf("must be listed in spec.gpus %v, which drive the class's GPU rules", poolGPUs)))
			}
		}
	}
	return errs
}
