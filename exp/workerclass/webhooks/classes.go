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

// Package webhooks serves the WorkerClass API's admission webhooks: class
// and platform validation, and the mutating and validating admission of the
// KubernetesNodes pool API over unstructured objects.
package webhooks

import (
	"context"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

// +kubebuilder:webhook:path=/validate-cozystack-io-v1alpha1-workerclass,mutating=false,failurePolicy=fail,sideEffects=None,groups=cozystack.io,resources=workerclasses,verbs=create;update,versions=v1alpha1,name=validation.workerclass.cozystack.io,timeoutSeconds=10,admissionReviewVersions=v1

// WorkerClass validates classes: a well-formed spec that never changes.
// Deletion is allowed; the in-use finalizer protects classes in use.
type WorkerClass struct{}

var _ admission.Validator[*workerclassv1.WorkerClass] = &WorkerClass{}

// SetupWebhookWithManager registers the class webhook.
func (w *WorkerClass) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &workerclassv1.WorkerClass{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new class.
func (w *WorkerClass) ValidateCreate(_ context.Context, c *workerclassv1.WorkerClass) (admission.Warnings, error) {
	return nil, classInvalid(c, validation.ValidateClass(c))
}

// ValidateUpdate refuses any spec change. An unchanged spec is not
// validated again: a rule tightened since the class was stored must not
// block removing its in-use finalizer or a label.
func (w *WorkerClass) ValidateUpdate(_ context.Context, oldClass, newClass *workerclassv1.WorkerClass) (admission.Warnings, error) {
	if reflect.DeepEqual(oldClass.Spec, newClass.Spec) {
		return nil, nil
	}
	errs := validation.ValidateClassUpdate(&oldClass.Spec, &newClass.Spec, field.NewPath("spec"))
	if len(errs) == 0 {
		errs = validation.ValidateClass(newClass)
	}
	return nil, classInvalid(newClass, errs)
}

// ValidateDelete allows deletion.
func (w *WorkerClass) ValidateDelete(context.Context, *workerclassv1.WorkerClass) (admission.Warnings, error) {
	return nil, nil
}

func classInvalid(c *workerclassv1.WorkerClass, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(workerclassv1.GroupVersion.WithKind("WorkerClass").GroupKind(), c.Name, errs)
}

// +kubebuilder:webhook:path=/validate-cozystack-io-v1alpha1-workerplatform,mutating=false,failurePolicy=fail,sideEffects=None,groups=cozystack.io,resources=workerplatforms,verbs=create;update,versions=v1alpha1,name=validation.workerplatform.cozystack.io,timeoutSeconds=10,admissionReviewVersions=v1

// WorkerPlatform validates the platform configuration.
type WorkerPlatform struct{}

var _ admission.Validator[*workerclassv1.WorkerPlatform] = &WorkerPlatform{}

// SetupWebhookWithManager registers the platform webhook.
func (w *WorkerPlatform) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &workerclassv1.WorkerPlatform{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new platform configuration.
func (w *WorkerPlatform) ValidateCreate(_ context.Context, p *workerclassv1.WorkerPlatform) (admission.Warnings, error) {
	return nil, platformInvalid(p, validation.ValidatePlatform(p))
}

// ValidateUpdate checks a changed platform configuration; an unchanged one
// is not validated again (see WorkerClass.ValidateUpdate).
func (w *WorkerPlatform) ValidateUpdate(_ context.Context, old, p *workerclassv1.WorkerPlatform) (admission.Warnings, error) {
	if reflect.DeepEqual(old.Spec, p.Spec) {
		return nil, nil
	}
	return nil, platformInvalid(p, validation.ValidatePlatform(p))
}

// ValidateDelete allows deletion; the class controller recreates the
// default configuration.
func (w *WorkerPlatform) ValidateDelete(context.Context, *workerclassv1.WorkerPlatform) (admission.Warnings, error) {
	return nil, nil
}

func platformInvalid(p *workerclassv1.WorkerPlatform, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(workerclassv1.GroupVersion.WithKind("WorkerPlatform").GroupKind(), p.Name, errs)
}
