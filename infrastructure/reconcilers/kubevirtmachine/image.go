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

package kubevirtmachine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
)

// rootImage is what a machine's root disk is made from and how it boots.
type rootImage struct {
	source     infrav1.ImageSource
	datasource infrav1.CloudInitDatasource
	// chosenBy names the field by which a tenant chose the source (the
	// machine's spec.image, its classless template's, or a template's
	// resolution that the hoster's catalog does not vouch for), whose
	// clone is authorized as the machine's namespace before the disk is
	// created. Empty when no tenant chose it: a golden image of the
	// hoster's catalog (fromHostersCatalog), and a template's shared
	// import, which lives in the machine's own namespace.
	chosenBy string
	// sharedImport names the template's shared import when the source is
	// a clone of it.
	sharedImport string
}

// ownImage is a machine's own spec.image.
func ownImage(kvm *infrav1.KubeVirtMachine) rootImage {
	return rootImage{source: *kvm.Spec.Image, datasource: ownDatasource(kvm), chosenBy: "spec.image"}
}

// machineImage returns the root disk's image: the machine's own
// spec.image, or the frozen resolution of the KubeVirtMachineTemplate it
// was cloned from (a clone of its shared import when that is an HTTP
// import), or what the machine waits for. sharedimage.OriginOf decides
// which.
func (r *Reconciler) machineImage(ctx context.Context, kvm *infrav1.KubeVirtMachine) (rootImage, *blocked, error) {
	names := clonedFromTemplate(kvm)
	if len(names) == 0 {
		if kvm.Spec.Image != nil {
			return ownImage(kvm), nil, nil
		}
		return rootImage{}, waitingFor(infrav1.InvalidSpecReason,
			"spec.image: Required value: a KubeVirtMachine that is not cloned from a KubeVirtMachineTemplate needs an image"), nil
	}
	template := &infrav1.KubeVirtMachineTemplate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: names[0]}, template); err != nil {
		if !apierrors.IsNotFound(err) {
			return rootImage{}, nil, err
		}
		if kvm.Spec.Image != nil {
			// A template that is gone shares nothing; the machine names
			// its bytes itself.
			return ownImage(kvm), nil, nil
		}
		return rootImage{}, waitingFor(infrav1.WaitingForTemplateReason,
			fmt.Sprintf("KubeVirtMachineTemplate %s does not exist", names[0])), nil
	}
	resolved := template.Status.Resolved
	origin := sharedimage.OriginOf(template, kvm.Spec.Image)
	if origin == sharedimage.SharedClone && r.SharedImages == nil {
		// No shared imports outside the management cluster: the machine
		// imports the same bytes itself.
		origin = sharedimage.ResolvedImage
		if kvm.Spec.Image != nil {
			origin = sharedimage.OwnImage
		}
	}
	switch origin {
	case sharedimage.OwnImage:
		return ownImage(kvm), nil, nil
	case sharedimage.AwaitResolution:
		message := fmt.Sprintf("KubeVirtMachineTemplate %s is not resolved yet", template.Name)
		if c := conditions.Get(template, infrav1.ResolvedCondition); c != nil && c.Message != "" {
			message += ": " + c.Message
		}
		return rootImage{}, waitingFor(infrav1.WaitingForTemplateReason, message), nil
	case sharedimage.SharedClone:
		// The image is imported once for the template's namespace and
		// cloned per machine.
		image, wait, err := r.SharedImages.CloneSource(ctx, template)
		if err != nil {
			return rootImage{}, nil, err
		}
		if wait != nil {
			return rootImage{}, waitingFor(wait.Reason, wait.Message), nil
		}
		shared := sharedimage.Name(template)
		if kvm.Spec.Image != nil {
			// The machine's own spec names the bytes and how they boot.
			return rootImage{source: image, datasource: ownDatasource(kvm), sharedImport: shared}, nil, nil
		}
		return rootImage{source: image, datasource: resolved.CloudInitDatasource, sharedImport: shared}, nil, nil
	}
	img := rootImage{source: resolved.Image, datasource: resolved.CloudInitDatasource}
	catalog, err := r.fromHostersCatalog(ctx, template, resolved.Image)
	if err != nil {
		return rootImage{}, nil, err
	}
	if !catalog {
		img.chosenBy = fmt.Sprintf("KubeVirtMachineTemplate %s status.resolved.image", template.Name)
		if template.Spec.Template.Spec.WorkerClass == nil {
			// A classless template's image is its writer's spec.image.
			img.chosenBy = fmt.Sprintf("KubeVirtMachineTemplate %s spec.template.spec.image", template.Name)
		}
	}
	return img, nil, nil
}

// fromHostersCatalog says whether a template's resolved clone source is
// one the hoster publishes: the template's spec names a WorkerClass, and
// the WorkerPlatform's golden catalog lists that very source now. Only
// then is the clone not authorized as the tenant. It is decided from what
// the tenant and the hoster wrote, never from status.resolved alone:
// anyone with the status subresource can write the first resolution (it
// is frozen only once written), and a forged resolution that names
// another namespace's disk must be authorized like a spec.image that
// names it. A hoster who withdraws a golden image from the catalog makes
// new machines of templates frozen on it clone as their tenant.
func (r *Reconciler) fromHostersCatalog(ctx context.Context, template *infrav1.KubeVirtMachineTemplate, image infrav1.ImageSource) (bool, error) {
	clone := image.Clone
	if clone == nil || template.Spec.Template.Spec.WorkerClass == nil || !r.WorkerClasses {
		return false, nil
	}
	platform := &workerclassv1.WorkerPlatform{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: workerclassv1.PlatformName}, platform); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	for _, golden := range platform.Spec.GoldenImages {
		if golden.Source.Namespace == clone.Namespace && golden.Source.Name == clone.Name && cloneKindOf(golden.Source.Kind) == clone.Kind {
			return true, nil
		}
	}
	return false, nil
}

// cloneKindOf is the clone kind a golden image's source kind resolves to
// (the template controller's FromResult).
func cloneKindOf(kind workerclassv1.GoldenImageSourceKind) infrav1.CloneSourceKind {
	if kind == workerclassv1.GoldenPersistentVolumeClaim {
		return infrav1.CloneFromPersistentVolumeClaim
	}
	return infrav1.CloneFromDataSource
}

// ownDatasource is the datasource a machine's own spec.image boots with:
// its spec's, NoCloud unless set.
func ownDatasource(kvm *infrav1.KubeVirtMachine) infrav1.CloudInitDatasource {
	if kvm.Spec.CloudInitDatasource == "" {
		return infrav1.NoCloudDatasource
	}
	return kvm.Spec.CloudInitDatasource
}
