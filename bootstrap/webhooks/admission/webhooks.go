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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/topology"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/clustersecrets"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cozystack-io-v1alpha1-kairosconfig,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cozystack.io,resources=kairosconfigs,versions=v1alpha1,name=validation.kairosconfig.bootstrap.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cozystack-io-v1alpha1-kairosconfigtemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cozystack.io,resources=kairosconfigtemplates,versions=v1alpha1,name=validation.kairosconfigtemplate.bootstrap.cozystack.io,sideEffects=None,timeoutSeconds=10,admissionReviewVersions=v1

// KairosConfig validates KairosConfigs. Their spec is immutable: a
// bootstrap change needs a new worker, never an edit of a rendered one.
type KairosConfig struct {
	// Clusters reads Clusters, uncached, to refuse files from the Secrets
	// of any cluster of the namespace; without it only the object's own
	// cluster (its label) is known.
	Clusters client.Reader
}

var _ admission.Validator[*bootstrapv1.KairosConfig] = &KairosConfig{}

// SetupWebhookWithManager registers the webhook.
func (w *KairosConfig) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bootstrapv1.KairosConfig{}).WithValidator(w).Complete()
}

// ValidateCreate validates a new KairosConfig.
func (w *KairosConfig) ValidateCreate(ctx context.Context, c *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	errs, err := validateConfig(ctx, w.Clusters, c)
	if err != nil {
		return nil, err
	}
	return nil, invalid("KairosConfig", c.Name, errs)
}

// ValidateUpdate refuses spec changes. An unchanged spec is not validated
// again: a rule tightened since it was stored must not block removing a
// finalizer, an owner reference or a label (deletion, clusterctl move).
func (w *KairosConfig) ValidateUpdate(ctx context.Context, oldC, newC *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	if reflect.DeepEqual(oldC.Spec, newC.Spec) {
		return nil, nil
	}
	errs, err := validateConfig(ctx, w.Clusters, newC)
	if err != nil {
		return nil, err
	}
	errs = append(errs, field.Forbidden(field.NewPath("spec"), "KairosConfig spec is immutable; replace the Machine to change how it bootstraps"))
	return nil, invalid("KairosConfig", newC.Name, errs)
}

func validateConfig(ctx context.Context, clusters client.Reader, c *bootstrapv1.KairosConfig) (field.ErrorList, error) {
	errs := ValidateSpec(&c.Spec, field.NewPath("spec"))
	sources, err := validateFileSources(ctx, clusters, c.Namespace, c.Labels, c.Spec.Files, field.NewPath("spec", "files"))
	return append(errs, sources...), err
}

// validateFileSources refuses files read from Cluster API's own Secrets of
// any cluster of the namespace: the object's own (its label names it;
// Cluster API sets it on the configs it creates) and every other Cluster's
// that exists, a bring-your-own CA of a neighbour included. The controller
// refuses them too, by name, label or type, when it renders.
func validateFileSources(ctx context.Context, clusters client.Reader, namespace string, labels map[string]string, files []bootstrapv1.File, fldPath *field.Path) (field.ErrorList, error) {
	own := labels[clusterv1.ClusterNameLabel]
	var errs field.ErrorList
	for i, f := range files {
		name := f.ContentFrom.Secret.Name
		cluster, purpose, ok := clustersecrets.Split(name)
		if !ok {
			continue
		}
		if cluster != own {
			if clusters == nil {
				continue
			}
			err := clusters.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster}, &clusterv1.Cluster{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, apierrors.NewInternalError(fmt.Errorf("looking up Cluster %s for %s: %w", cluster, fldPath.Index(i).Child("contentFrom", "secret", "name"), err))
			}
		}
		errs = append(errs, field.Forbidden(fldPath.Index(i).Child("contentFrom", "secret", "name"),
			fmt.Sprintf("Secret %s is Cluster API's %q Secret of cluster %s and is never copied into a worker", name, purpose, cluster)))
	}
	return errs, nil
}

// ValidateDelete allows deletion.
func (w *KairosConfig) ValidateDelete(context.Context, *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	return nil, nil
}

// KairosConfigTemplate validates KairosConfigTemplates, which are
// immutable except for the server-side-apply dry-run requests the
// ClusterClass topology controller sends to compute diffs.
type KairosConfigTemplate struct {
	// Clusters reads Clusters, uncached; see KairosConfig.Clusters.
	Clusters client.Reader
}

var _ admission.Validator[*bootstrapv1.KairosConfigTemplate] = &KairosConfigTemplate{}

// SetupWebhookWithManager registers the webhook.
func (w *KairosConfigTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bootstrapv1.KairosConfigTemplate{}).WithValidator(w).Complete()
}

// ValidateCreate validates a new template.
func (w *KairosConfigTemplate) ValidateCreate(ctx context.Context, t *bootstrapv1.KairosConfigTemplate) (admission.Warnings, error) {
	errs, err := validateTemplate(ctx, w.Clusters, t)
	if err != nil {
		return nil, err
	}
	return nil, invalid("KairosConfigTemplate", t.Name, errs)
}

// ValidateUpdate refuses spec changes unless the request is a topology
// dry-run.
func (w *KairosConfigTemplate) ValidateUpdate(ctx context.Context, oldT, newT *bootstrapv1.KairosConfigTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside the context: %v", err))
	}
	if reflect.DeepEqual(oldT.Spec, newT.Spec) {
		// Not validated again: see KairosConfig.ValidateUpdate.
		return nil, nil
	}
	errs, err := validateTemplate(ctx, w.Clusters, newT)
	if err != nil {
		return nil, err
	}
	if !topology.IsDryRunRequest(req, newT) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "KairosConfigTemplate spec is immutable; create a new template and point the MachineDeployment at it"))
	}
	return nil, invalid("KairosConfigTemplate", newT.Name, errs)
}

// ValidateDelete allows deletion.
func (w *KairosConfigTemplate) ValidateDelete(context.Context, *bootstrapv1.KairosConfigTemplate) (admission.Warnings, error) {
	return nil, nil
}

func validateTemplate(ctx context.Context, clusters client.Reader, t *bootstrapv1.KairosConfigTemplate) (field.ErrorList, error) {
	errs := ValidateSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
	sources, err := validateFileSources(ctx, clusters, t.Namespace, t.Labels, t.Spec.Template.Spec.Files, field.NewPath("spec", "template", "spec", "files"))
	if err != nil {
		return nil, err
	}
	errs = append(errs, sources...)
	return append(errs, t.Spec.Template.ObjectMeta.Validate(field.NewPath("spec", "template", "metadata"))...), nil
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(bootstrapv1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}

// SetupWebhooksWithManager registers every bootstrap webhook.
func SetupWebhooksWithManager(mgr ctrl.Manager) error {
	// Clusters are read uncached: only for a file whose Secret is named
	// like one of Cluster API's, and whatever namespace the cache watches.
	if err := (&KairosConfig{Clusters: mgr.GetAPIReader()}).SetupWebhookWithManager(mgr); err != nil {
		return err
	}
	return (&KairosConfigTemplate{Clusters: mgr.GetAPIReader()}).SetupWebhookWithManager(mgr)
}
