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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/cloneauth"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// authorizeClone refuses a clone source that the user of the admission
// request may not clone from, by CDI's rules. The object is named name in
// namespace; path is its image source.
func authorizeClone(ctx context.Context, clones *cloneauth.Authorizer, img *infrav1.ImageSource, namespace, name string, path *field.Path) (field.ErrorList, error) {
	if img == nil || img.Clone == nil {
		return nil, nil
	}
	if clones == nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("clone sources cannot be authorized: the webhook has no authorizer"))
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	decision, err := clones.AsUser(ctx, vmspec.CloneDataVolume(img.Clone, namespace, name), req.UserInfo)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	path = path.Child("clone")
	switch {
	case decision.Missing:
		return field.ErrorList{field.Invalid(path.Child("name"), img.Clone.Name, decision.Reason)}, nil
	case !decision.Allowed:
		return field.ErrorList{field.Forbidden(path.Child("namespace"),
			decision.Reason+": a clone from another namespace needs CDI's create on datavolumes/source there")}, nil
	}
	return nil, nil
}

// copiedFromTemplate reports whether obj is a copy, made by Cluster API, of
// a KubeVirtMachineTemplate in its namespace with the same image: a
// MachineSet's machine, or a template the topology controller copied from
// its ClusterClass. That template's clone source was authorized when it was
// written, and Cluster API's own service account is not the tenant.
func copiedFromTemplate(ctx context.Context, reader client.Reader, obj client.Object, img *infrav1.ImageSource) (bool, error) {
	name := obj.GetAnnotations()[clusterv1.TemplateClonedFromNameAnnotation]
	kind := infrav1.GroupVersion.WithKind("KubeVirtMachineTemplate").GroupKind()
	if name == "" || reader == nil || obj.GetAnnotations()[clusterv1.TemplateClonedFromGroupKindAnnotation] != kind.String() {
		return false, nil
	}
	if name == obj.GetName() {
		return false, nil
	}
	template := &infrav1.KubeVirtMachineTemplate{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, template); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, apierrors.NewInternalError(fmt.Errorf("reading KubeVirtMachineTemplate %s: %w", name, err))
	}
	return template.CopiesImage(img), nil
}
