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
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/instancetype"
	"github.com/cozystack/cluster-api-workers/infrastructure/internal/metrics"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/internal/clustersecrets"
)

// Creating a machine's VM: what it boots (its image, disks and bootstrap
// data) is created first, each object only when absent and never adopted,
// then the VM; a step that cannot go on yet returns why (blocked).

// ensureVirtualMachine returns the machine's VM, creating it and what it
// boots from when everything they need is there. A VM that exists is never
// updated: everything else is observed from it, so a deleted template or
// bootstrap Secret no longer matters. A provisioned machine whose VM is
// gone gets no new one (nil): the node it ran is gone with it.
func (r *Reconciler) ensureVirtualMachine(ctx context.Context, s *scope) (*kubevirtv1.VirtualMachine, *blocked, error) {
	kvm, machine, cluster := s.kubeVirtMachine, s.machine, s.cluster
	key := client.ObjectKeyFromObject(kvm)
	infra := r.Infrastructure
	vm := &kubevirtv1.VirtualMachine{}
	err := infra.Client.Get(ctx, key, vm)
	if r.createdVMs.Pending(key, key.Name) {
		if err == nil {
			r.createdVMs.Seen(key)
		} else if apierrors.IsNotFound(err) {
			err = infra.Reader.Get(ctx, key, vm)
		}
	}
	switch {
	case err == nil:
		return vm, r.notControlled(vm, kvm, "VirtualMachine"), nil
	case !apierrors.IsNotFound(err):
		return nil, nil, err
	}
	if ptr.Deref(kvm.Status.Initialization.Provisioned, false) {
		return nil, nil, nil
	}
	if blocker := r.placementForbidden(ctx, kvm); blocker != nil {
		return nil, blocker, nil
	}
	if !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		return nil, waitingFor(infrav1.WaitingForClusterInfrastructureReason, "Cluster infrastructure is not provisioned yet"), nil
	}
	if machine.Spec.Bootstrap.DataSecretName == nil {
		return nil, waitingFor(infrav1.WaitingForBootstrapDataReason, "Machine has no bootstrap data Secret yet"), nil
	}
	image, blocker, err := r.machineImage(ctx, kvm)
	if err != nil || blocker != nil {
		return nil, blocker, err
	}
	userData, blocker, err := r.bootstrapData(ctx, machine)
	if err != nil || blocker != nil {
		return nil, blocker, err
	}

	var preference *instancetypev1beta1.VirtualMachinePreferenceSpec
	if ref := kvm.Spec.Preference; ref != nil {
		// A preference that does not exist is KubeVirt's to refuse; the VM is
		// rendered as without one.
		if preference, _, err = instancetype.Preference(ctx, infra.Client, kvm.Namespace, ref, field.NewPath("spec", "preference")); err != nil {
			return nil, nil, err
		}
	}
	objs, errs := vmspec.Render(vmspec.Input{
		Machine:        kvm,
		ClusterName:    cluster.Name,
		DeploymentName: machine.Labels[clusterv1.MachineDeploymentNameLabel],
		ControlPlane:   util.IsControlPlaneMachine(machine),
		Image:          image.source,
		Datasource:     image.datasource,
		FailureDomain:  machine.Spec.FailureDomain,
		UserData:       userData,
		Preference:     preference,
		Unowned:        infra.Remote,
		ExtraLabels:    infra.Labels(),
		// Every VM, whatever its spec asks for.
		ReservedNodeLabels: r.Placement.ReservedNodeLabels,
	})
	if len(errs) > 0 {
		return nil, waitingFor(infrav1.InvalidSpecReason, errs.ToAggregate().Error()), nil
	}

	if blocker, err := r.ensureUserData(ctx, kvm, objs.UserData); err != nil || blocker != nil {
		return nil, blocker, err
	}
	if objs.ImportCA != nil {
		if _, blocker, err := ensureCreated(ctx, r, kvm, objs.ImportCA, "ConfigMap", nil); err != nil || blocker != nil {
			return nil, blocker, err
		}
	}
	if objs.RootDataVolume != nil {
		if blocker, err := r.authorizeClone(ctx, image, objs.RootDataVolume); err != nil || blocker != nil {
			return nil, blocker, err
		}
		dv, blocker, err := ensureCreated(ctx, r, kvm, objs.RootDataVolume, "DataVolume", rootDiskCreated(image, objs.RootDataVolume.Name))
		if err != nil || blocker != nil {
			return nil, blocker, err
		}
		if dv == objs.RootDataVolume {
			// ensureCreated returns desired itself only when it created it.
			metrics.RootDiskCreated(dv, image.sharedImport != "")
		}
	}
	vm, blocker, err = ensureCreated(ctx, r, kvm, objs.VirtualMachine, "VirtualMachine", vmCreated(objs.VirtualMachine.Name))
	if err == nil && blocker == nil {
		r.createdVMs.Wrote(key, vm.Name)
	}
	return vm, blocker, err
}

// placementForbidden refuses a machine whose spec asks for placement the
// policy in force does not allow, before anything of it is created: the
// webhook applied the policy of its day, or none while it was down, and
// the VM is created with the provider's rights. Nothing a watch reports
// changes the answer (the spec is immutable, the policy is the flags'), so
// nothing is retried; a manager restarted with other flags reconciles
// every machine again.
func (r *Reconciler) placementForbidden(ctx context.Context, kvm *infrav1.KubeVirtMachine) *blocked {
	errs := r.Placement.Validate(&kvm.Spec, kvm.Namespace, field.NewPath("spec"))
	if len(errs) == 0 {
		return nil
	}
	fields := make([]string, 0, len(errs))
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	ctrl.LoggerFrom(ctx).Info("The machine asks for placement the hoster does not allow; creating no VirtualMachine", "fields", fields)
	return waitingFor(infrav1.PlacementForbiddenReason, errs.ToAggregate().Error())
}

// authorizeClone authorizes the clone of a root DataVolume that does not
// exist yet as the machine's namespace (cloneauth), when a tenant chose the
// source (rootImage.chosenBy): any source but a golden image of the
// hoster's catalog, which is not the tenant's to choose. A DataVolume that exists was
// authorized when it was created. dv is pinned: a DataSource it would name
// is replaced by the claim or snapshot that was authorized.
func (r *Reconciler) authorizeClone(ctx context.Context, image rootImage, dv *cdiv1.DataVolume) (*blocked, error) {
	if image.chosenBy == "" || image.source.Clone == nil {
		return nil, nil
	}
	err := r.Infrastructure.Client.Get(ctx, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{})
	if err == nil || !apierrors.IsNotFound(err) {
		return nil, err
	}
	decision, err := r.Clones.AsNamespace(ctx, dv)
	switch {
	case err != nil:
		return nil, err
	case decision.Missing:
		return cloneRefusedFor(infrav1.WaitingForCloneSourceReason, image.chosenBy+".clone: "+decision.Reason), nil
	case !decision.Allowed:
		ctrl.LoggerFrom(ctx).Info("The machine's namespace may not clone from the source its image names", "field", image.chosenBy+".clone", "reason", decision.Reason)
		return cloneRefusedFor(infrav1.CloneSourceForbiddenReason, image.chosenBy+".clone: "+decision.Reason), nil
	}
	return nil, nil
}

// bootstrapData reads the Machine's bootstrap data. Cluster API bootstrap
// Secrets carry the cluster-name label the Secret cache selects; one not
// cached yet is read from the API server. Only a bootstrap Secret of the
// machine is followed (bootstrapSecretProblem): the Machine's tenant writes
// dataSecretName, and whatever it names goes into a VM the tenant runs.
func (r *Reconciler) bootstrapData(ctx context.Context, machine *clusterv1.Machine) ([]byte, *blocked, error) {
	key := client.ObjectKey{Namespace: machine.Namespace, Name: *machine.Spec.Bootstrap.DataSecretName}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, secret)
	}
	if apierrors.IsNotFound(err) {
		return nil, waitingFor(infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("Bootstrap data Secret %s does not exist yet", key.Name)), nil
	}
	if err != nil {
		return nil, nil, err
	}
	if problem := bootstrapSecretProblem(machine, secret); problem != "" {
		return nil, refusedFor(infrav1.BootstrapDataForbiddenReason,
			fmt.Sprintf("spec.bootstrap.dataSecretName: Secret %s %s", key.Name, problem)), nil
	}
	value, ok := secret.Data[BootstrapDataKey]
	if !ok {
		return nil, waitingFor(infrav1.WaitingForBootstrapDataReason,
			fmt.Sprintf("Bootstrap data Secret %s has no %q key", key.Name, BootstrapDataKey)), nil
	}
	return value, nil, nil
}

// ensureUserData creates the cloud-init Secret, or brings its user data back
// to the bootstrap data while the VM does not exist yet. A Secret of that
// name the machine does not control blocks it, as any other object would.
func (r *Reconciler) ensureUserData(ctx context.Context, kvm *infrav1.KubeVirtMachine, desired *corev1.Secret) (*blocked, error) {
	infra := r.Infrastructure
	existing := &corev1.Secret{}
	err := infra.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		_, blocker, err := ensureCreated(ctx, r, kvm, desired, "Secret", nil)
		return blocker, err
	}
	if err != nil {
		return nil, err
	}
	if blocker := r.notControlled(existing, kvm, "Secret"); blocker != nil {
		return blocker, nil
	}
	if bytes.Equal(existing.Data[vmspec.UserDataKey], desired.Data[vmspec.UserDataKey]) {
		return nil, nil
	}
	original := existing.DeepCopy()
	existing.Data = desired.Data
	if err := infra.Client.Patch(ctx, existing, client.MergeFrom(original)); err != nil {
		return nil, fmt.Errorf("updating cloud-init Secret %s: %w", desired.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Updated the cloud-init user data Secret to the current bootstrap data", "Secret", klog.KObj(existing))
	return nil, nil
}

// ensureCreated creates desired unless it exists, and returns the live
// object; event, when not nil, is the Event of the create. It never
// updates: a machine's VM and disks are immutable. An object of the same
// name that this machine does not control blocks provisioning.
func ensureCreated[T client.Object](ctx context.Context, r *Reconciler, kvm *infrav1.KubeVirtMachine, desired T, kind string, event *created) (T, *blocked, error) {
	var none T
	key := client.ObjectKeyFromObject(desired)
	infra := r.Infrastructure
	existing := newLike(desired)
	err := infra.Client.Get(ctx, key, existing)
	if err == nil {
		return existing, r.notControlled(existing, kvm, kind), nil
	}
	if !apierrors.IsNotFound(err) {
		return none, nil, err
	}
	if err := infra.Client.Create(ctx, desired); err != nil {
		if refused(err) {
			// Asking again at once would be refused again.
			ctrl.LoggerFrom(ctx).Info("The API server refused the machine's "+kind, kind, klog.KObj(desired), "reason", err.Error())
			metrics.CreateRefused(kind, err)
			return none, refusal(kind, key.Name, err), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return none, nil, fmt.Errorf("creating %s %s: %w", kind, key.Name, err)
		}
		// Not in the cache yet, or not ours: the API server decides.
		live := newLike(desired)
		if err := infra.Reader.Get(ctx, key, live); err != nil {
			return none, nil, err
		}
		return live, r.notControlled(live, kvm, kind), nil
	}
	ctrl.LoggerFrom(ctx).Info("Created the machine's "+kind, kind, klog.KObj(desired))
	r.recordCreated(kvm, event)
	return desired, nil, nil
}

// newLike is a zero object of obj's type for a read to fill. A read
// decodes into the object it is given, so one decoded into the rendered
// object would keep what the live one lacks (our owner reference, labels)
// and someone else's object would pass for ours; a zero one also spares
// copying the rendered object on every reconcile.
func newLike[T client.Object](obj T) T {
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
}

// refused reports whether the API server refused a create for what it is
// (an admission webhook's or policy's denial, a schema violation, a
// namespace missing from an infrastructure cluster of its own), as
// opposed to failing to answer.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsRequestEntityTooLargeError(err) ||
		apierrors.IsNotFound(err)
}

// refusal is what blocks a machine whose object the API server refused,
// with the refusal's own words (KubeVirt's admission messages name fields
// of the VM, never the bootstrap data, which stays in its Secret).
func refusal(kind, name string, err error) *blocked {
	message := err.Error()
	if status, ok := err.(apierrors.APIStatus); ok {
		message = status.Status().Message
	}
	return refusedFor(infrav1.CreateRefusedReason, fmt.Sprintf("The API server refused %s %s: %s", kind, name, message))
}

// notControlled blocks a machine on an object of its name that it does not
// control: the leftover of an earlier machine is waited for; anyone else's
// is never adopted or touched.
func (r *Reconciler) notControlled(o client.Object, kvm *infrav1.KubeVirtMachine, kind string) *blocked {
	if r.Infrastructure.Controls(o, kvm) {
		return nil
	}
	if r.Infrastructure.OfAnotherManagementCluster(o) {
		// A machine of the same namespace and name in another management
		// cluster that shares the infrastructure cluster: never adopted,
		// never deleted, whatever its state.
		return &blocked{status: metav1.ConditionFalse, reason: infrav1.NameConflictReason,
			message: fmt.Sprintf("%s %s exists and belongs to another management cluster", kind, o.GetName())}
	}
	if !o.GetDeletionTimestamp().IsZero() {
		return waitingFor(infrav1.WaitingForOldVirtualMachineReason,
			fmt.Sprintf("%s %s of an earlier machine is being deleted", kind, o.GetName()))
	}
	return &blocked{status: metav1.ConditionFalse, reason: infrav1.NameConflictReason,
		message: fmt.Sprintf("%s %s exists and is not controlled by this KubeVirtMachine", kind, o.GetName())}
}

// bootstrapSecretProblem says why s is not a bootstrap data Secret of the
// Machine, or "": one is of Cluster API's Secret type, carries the
// Machine's cluster-name label, is none of the cluster's own Secrets (its
// kubeconfig, CAs and keys), and, when the Machine names a bootstrap
// config, is controlled by that config, as the bootstrap contract has it.
func bootstrapSecretProblem(machine *clusterv1.Machine, s *corev1.Secret) string {
	cluster := machine.Spec.ClusterName
	switch {
	case s.Type != clusterv1.ClusterSecretType:
		return fmt.Sprintf("is not of type %s", clusterv1.ClusterSecretType)
	case s.Labels[clusterv1.ClusterNameLabel] != cluster:
		return fmt.Sprintf("does not carry the label %s=%s", clusterv1.ClusterNameLabel, cluster)
	}
	if _, own := clustersecrets.Named(cluster, s.Name); own {
		return fmt.Sprintf("is one of Cluster %s's own Secrets, not bootstrap data", cluster)
	}
	ref := machine.Spec.Bootstrap.ConfigRef
	if !ref.IsDefined() {
		return ""
	}
	owner := metav1.GetControllerOfNoCopy(s)
	if owner == nil || owner.Kind != ref.Kind || owner.Name != ref.Name || !strings.HasPrefix(owner.APIVersion, ref.APIGroup+"/") {
		return fmt.Sprintf("is not controlled by the Machine's bootstrap config %s %s", ref.Kind, ref.Name)
	}
	return ""
}
