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

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
)

// machineImage returns the root disk source and datasource: the machine's
// own spec.image, or the frozen resolution of the KubeVirtMachineTemplate it
// was cloned from (a clone of its shared import when that is an HTTP
// import), or what the machine waits for. sharedimage.OriginOf decides
// which.
func (r *Reconciler) machineImage(ctx context.Context, kvm *infrav1.KubeVirtMachine) (infrav1.ImageSource, infrav1.CloudInitDatasource, *blocked, error) {
	names := clonedFromTemplate(kvm)
	if len(names) == 0 {
		if kvm.Spec.Image != nil {
			return *kvm.Spec.Image, ownDatasource(kvm), nil, nil
		}
		return infrav1.ImageSource{}, "", waitingFor(infrav1.InvalidSpecReason,
			"spec.image: Required value: a KubeVirtMachine that is not cloned from a KubeVirtMachineTemplate needs an image"), nil
	}
	template := &infrav1.KubeVirtMachineTemplate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kvm.Namespace, Name: names[0]}, template); err != nil {
		if !apierrors.IsNotFound(err) {
			return infrav1.ImageSource{}, "", nil, err
		}
		if kvm.Spec.Image != nil {
			// A template that is gone shares nothing; the machine names
			// its bytes itself.
			return *kvm.Spec.Image, ownDatasource(kvm), nil, nil
		}
		return infrav1.ImageSource{}, "", waitingFor(infrav1.WaitingForTemplateReason,
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
		return *kvm.Spec.Image, ownDatasource(kvm), nil, nil
	case sharedimage.AwaitResolution:
		message := fmt.Sprintf("KubeVirtMachineTemplate %s is not resolved yet", template.Name)
		if c := conditions.Get(template, infrav1.ResolvedCondition); c != nil && c.Message != "" {
			message += ": " + c.Message
		}
		return infrav1.ImageSource{}, "", waitingFor(infrav1.WaitingForTemplateReason, message), nil
	case sharedimage.SharedClone:
		// The image is imported once for the template's namespace and
		// cloned per machine.
		image, wait, err := r.SharedImages.CloneSource(ctx, template)
		if err != nil {
			return infrav1.ImageSource{}, "", nil, err
		}
		if wait != nil {
			return infrav1.ImageSource{}, "", waitingFor(wait.Reason, wait.Message), nil
		}
		if kvm.Spec.Image != nil {
			// The machine's own spec names the bytes and how they boot.
			return image, ownDatasource(kvm), nil, nil
		}
		return image, resolved.CloudInitDatasource, nil, nil
	}
	return resolved.Image, resolved.CloudInitDatasource, nil, nil
}

// ownDatasource is the datasource a machine's own spec.image boots with:
// its spec's, NoCloud unless set.
func ownDatasource(kvm *infrav1.KubeVirtMachine) infrav1.CloudInitDatasource {
	if kvm.Spec.CloudInitDatasource == "" {
		return infrav1.NoCloudDatasource
	}
	return kvm.Spec.CloudInitDatasource
}
