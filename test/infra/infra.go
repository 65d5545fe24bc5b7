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

// Package infra runs the infrastructure cluster the KubeVirt provider
// creates VirtualMachines in, on an envtest apiserver: KubeVirt's real
// control plane (virt-api and virt-controller, test/kubevirt), and the
// stand-ins for what cannot run here, the node side (scheduler, kubelets,
// virt-handler: test/sim/kubevirtnode) and CDI (test/sim/cdi). The harness, the
// sandbox and the suites that need VMs to run use it.
package infra

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/cdi"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

// Options configure the infrastructure cluster.
type Options struct {
	// KubeVirt configures the real control plane (the KubeVirt CR's
	// configuration, logs).
	KubeVirt kubevirt.Options
	// Hosts configure the node side: nodes, timings, the hypervisor.
	Hosts kubevirtsim.Options
	// CDI configures the CDI stand-in: timings, the importer.
	CDI cdisim.Options
	// RealCDI, when set, runs CDI's real cdi-controller (test/cdi) in
	// place of the stand-in's DataVolume controller and importer, with
	// these options; the stand-in only provisions the claims (CDI.
	// StorageOnly, CDI.VolumeDir), and a default StorageClass names its
	// provisioner. Its worker Pods need a real node with CDI's images:
	// with RealNodes only.
	RealCDI *cdi.Options
	// RealNodes leaves the node side to real nodes (test/node: a kubelet,
	// kube-scheduler and virt-handler): no stand-in scheduler, kubelets or
	// virt-handler run, and Hosts is nil.
	RealNodes bool
}

// Infra is a running infrastructure cluster.
type Infra struct {
	KubeVirt *kubevirt.ControlPlane
	// Hosts is the node-side stand-in; nil with Options.RealNodes.
	Hosts *kubevirtsim.Hosts
	CDI   *cdisim.CDI
	// RealCDI is CDI's real controller; nil unless Options.RealCDI.
	RealCDI *cdi.Controller
}

// AddToScheme adds what the stand-ins read and write.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, storagev1.AddToScheme, kubevirtv1.AddToScheme, instancetypev1beta1.AddToScheme, cdiv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// Start installs KubeVirt into env and starts its control plane, and
// registers the node side and CDI with mgr, which the caller starts. env
// must serve KubeVirt's and CDI's CRDs (envtest.ExternalCRDPaths) and
// mgr's scheme must include AddToScheme's. Run kube-controller-manager's
// garbage collector beside it: owners' deletions cascade as in a cluster.
func Start(ctx context.Context, env *envtest.Environment, mgr ctrl.Manager, opts Options) (_ *Infra, rerr error) {
	cp, err := kubevirt.Start(ctx, env, opts.KubeVirt)
	if err != nil {
		return nil, fmt.Errorf("starting KubeVirt's control plane: %w", err)
	}
	defer func() {
		if rerr != nil {
			rerr = errors.Join(rerr, cp.Stop())
		}
	}()
	if opts.RealCDI != nil {
		if !opts.RealNodes {
			return nil, errors.New("real CDI runs its worker Pods on real nodes only")
		}
		opts.CDI.StorageOnly = true
	}
	i := &Infra{KubeVirt: cp, CDI: cdisim.New(opts.CDI)}
	if opts.RealCDI != nil {
		if err := installStorageClass(ctx, env.Client); err != nil {
			return nil, err
		}
		if i.RealCDI, err = cdi.Start(ctx, env, *opts.RealCDI); err != nil {
			return nil, fmt.Errorf("starting CDI's controller: %w", err)
		}
		defer func() {
			if rerr != nil {
				rerr = errors.Join(rerr, i.RealCDI.Stop())
			}
		}()
	}
	if !opts.RealNodes {
		i.Hosts = kubevirtsim.New(opts.Hosts)
		if err := i.Hosts.SetupWithManager(ctx, mgr); err != nil {
			return nil, err
		}
	}
	if err := i.CDI.SetupWithManager(ctx, mgr); err != nil {
		return nil, err
	}
	return i, nil
}

// Stop stops KubeVirt's control plane and CDI's real controller; the
// stand-ins stop with their manager.
func (i *Infra) Stop() error {
	if i == nil || i.KubeVirt == nil {
		return nil
	}
	return errors.Join(i.RealCDI.Stop(), i.KubeVirt.Stop())
}

// StorageClass is the default StorageClass of real CDI's claims, whose
// provisioner is the stand-in's (it names its volumes so), binding at
// once.
const StorageClass = "sim-local"

// installStorageClass creates the default StorageClass and its
// StorageProfile. Real CDI renders a DataVolume's spec.storage into a
// claim from the class's StorageProfile: with no class there is no
// profile and the claim is never made, and CDI knows no access mode or
// volume mode for a provisioner outside its table (pkg/storagecapabilities),
// so the profile says them, as a cluster's administrator does. Binding is
// immediate: a WaitForFirstConsumer class leaves a shared import, which no
// Pod consumes, pending unless its DataVolume asks for immediate binding.
func installStorageClass(ctx context.Context, c client.Client) error {
	class := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       cdisim.Provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	profile := &cdiv1.StorageProfile{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass},
		Spec: cdiv1.StorageProfileSpec{ClaimPropertySets: []cdiv1.ClaimPropertySet{{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  ptr.To(corev1.PersistentVolumeFilesystem),
		}}},
	}
	for _, o := range []client.Object{class, profile} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
