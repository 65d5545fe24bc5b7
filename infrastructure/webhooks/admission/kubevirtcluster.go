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
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cozystack-io-v1alpha1-kubevirtcluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cozystack.io,resources=kubevirtclusters,versions=v1alpha1,name=validation.kubevirtcluster.infrastructure.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cozystack-io-v1alpha1-kubevirtclustertemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cozystack.io,resources=kubevirtclustertemplates,versions=v1alpha1,name=validation.kubevirtclustertemplate.infrastructure.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1

// KubeVirtCluster validates KubeVirtClusters.
type KubeVirtCluster struct{}

var _ admission.Validator[*infrav1.KubeVirtCluster] = &KubeVirtCluster{}

// SetupWebhookWithManager registers the webhook.
func (w *KubeVirtCluster) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.KubeVirtCluster{}).WithValidator(w).Complete()
}

// ValidateCreate checks the endpoint.
func (w *KubeVirtCluster) ValidateCreate(_ context.Context, c *infrav1.KubeVirtCluster) (admission.Warnings, error) {
	return nil, invalid("KubeVirtCluster", c.Name, validateClusterSpec(&c.Spec, field.NewPath("spec")))
}

// ValidateUpdate keeps a set control plane endpoint: Cluster API copies it
// into the Cluster once.
func (w *KubeVirtCluster) ValidateUpdate(_ context.Context, oldC, newC *infrav1.KubeVirtCluster) (admission.Warnings, error) {
	if reflect.DeepEqual(oldC.Spec, newC.Spec) {
		// Not validated again: see KubeVirtMachineTemplate.ValidateUpdate.
		return nil, nil
	}
	errs := validateClusterSpec(&newC.Spec, field.NewPath("spec"))
	if !oldC.Spec.ControlPlaneEndpoint.IsZero() && oldC.Spec.ControlPlaneEndpoint != newC.Spec.ControlPlaneEndpoint {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "controlPlaneEndpoint"), "cannot be changed once set"))
	}
	return nil, invalid("KubeVirtCluster", newC.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *KubeVirtCluster) ValidateDelete(context.Context, *infrav1.KubeVirtCluster) (admission.Warnings, error) {
	return nil, nil
}

func validateClusterSpec(spec *infrav1.KubeVirtClusterSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	ep := spec.ControlPlaneEndpoint
	if !ep.IsZero() && (ep.Host == "" || ep.Port == 0) {
		errs = append(errs, field.Invalid(path.Child("controlPlaneEndpoint"), fmt.Sprintf("%s:%d", ep.Host, ep.Port),
			"host and port are required together"))
	}
	return errs
}

// KubeVirtClusterTemplate validates KubeVirtClusterTemplates.
type KubeVirtClusterTemplate struct{}

var _ admission.Validator[*infrav1.KubeVirtClusterTemplate] = &KubeVirtClusterTemplate{}

// SetupWebhookWithManager registers the webhook.
func (w *KubeVirtClusterTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.KubeVirtClusterTemplate{}).WithValidator(w).Complete()
}

// ValidateCreate checks the template.
func (w *KubeVirtClusterTemplate) ValidateCreate(_ context.Context, t *infrav1.KubeVirtClusterTemplate) (admission.Warnings, error) {
	return nil, invalid("KubeVirtClusterTemplate", t.Name, validateClusterTemplate(t))
}

// ValidateUpdate keeps the spec immutable except for topology dry runs.
func (w *KubeVirtClusterTemplate) ValidateUpdate(ctx context.Context, oldT, newT *infrav1.KubeVirtClusterTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	if reflect.DeepEqual(oldT.Spec, newT.Spec) {
		// Not validated again: see KubeVirtMachineTemplate.ValidateUpdate.
		return nil, nil
	}
	errs := validateClusterTemplate(newT)
	if !topology.IsDryRunRequest(req, newT) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "a KubeVirtClusterTemplate is immutable"))
	}
	return nil, invalid("KubeVirtClusterTemplate", newT.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *KubeVirtClusterTemplate) ValidateDelete(context.Context, *infrav1.KubeVirtClusterTemplate) (admission.Warnings, error) {
	return nil, nil
}

func validateClusterTemplate(t *infrav1.KubeVirtClusterTemplate) field.ErrorList {
	errs := t.Spec.Template.ObjectMeta.Validate(field.NewPath("spec", "template", "metadata"))
	return append(errs, validateClusterSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))...)
}
