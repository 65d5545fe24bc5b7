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

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// caBundle is a self-signed CA certificate, as an image factory behind a
// private CA would be trusted with.
func caBundle(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "image factory CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestMachineImageSourcesAndDatasources creates a machine for each image
// source and datasource and checks that every object is accepted by the real
// CRD schemas with strict field validation (the controller's client is
// strict) and carries the bootstrap data unchanged.
func TestMachineImageSourcesAndDatasources(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	ctx := context.Background()

	t.Run("container disk with NoCloud", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		kvm := tc.machine(t, "cd-nocloud", containerDiskSpec())
		vm := waitForVM(t, kvm)
		root := volumeNamed(vm, "root")
		g.Expect(root.ContainerDisk).NotTo(BeNil())
		g.Expect(root.ContainerDisk.Image).To(Equal(digestRef))
		cloudInit := volumeNamed(vm, "cloudinit")
		g.Expect(cloudInit.CloudInitNoCloud).To(Equal(&kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: "cd-nocloud-userdata"}}))
		expectUserData(t, kvm)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.ContainerDiskReason)
			expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ProvisioningReason)
		}).Should(Succeed())
	})

	t.Run("container disk with ConfigDrive", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.CloudInitDatasource = infrav1.ConfigDriveDatasource
		kvm := tc.machine(t, "cd-configdrive", spec)
		vm := waitForVM(t, kvm)
		g.Expect(volumeNamed(vm, "cloudinit").CloudInitConfigDrive).To(Equal(&kubevirtv1.CloudInitConfigDriveSource{
			UserDataSecretRef: &corev1.LocalObjectReference{Name: "cd-configdrive-userdata"}}))
		g.Expect(volumeNamed(vm, "cloudinit").CloudInitNoCloud).To(BeNil())
		expectUserData(t, kvm)
	})

	t.Run("HTTP import with a CA reports CDI progress and then a ready disk", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		testCABundle := caBundle(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{
			URL: "https://factory.example.com/image/abc/v1.13.6/nocloud-amd64.raw.xz", CABundle: testCABundle}}
		spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi")), StorageClassName: "replicated"}
		kvm := tc.machine(t, "http-import", spec)
		vm := waitForVM(t, kvm)
		g.Expect(volumeNamed(vm, "root").DataVolume).To(Equal(&kubevirtv1.DataVolumeSource{Name: "http-import-root"}))
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, "http-import-root"), dv)).To(Succeed())
		g.Expect(dv.Spec.Source.HTTP.URL).To(Equal(spec.Image.HTTPImport.URL))
		g.Expect(dv.Spec.Source.HTTP.CertConfigMap).To(Equal("http-import-import-ca"))
		g.Expect(dv.Spec.Storage.Resources.Requests.Storage().String()).To(Equal("20Gi"))
		ca := &corev1.ConfigMap{}
		g.Expect(c.Get(ctx, key(tc.namespace, "http-import-import-ca"), ca)).To(Succeed())
		g.Expect(ca.Data).To(HaveKeyWithValue("ca.pem", testCABundle))

		setDataVolumeStatus(t, dv, cdiv1.ImportInProgress, "42.50%", 0)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionUnknown, infrav1.ImportingReason)
			g.Expect(cond.Message).To(Equal("DataVolume http-import-root: ImportInProgress, 42.50%"))
			expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ImportingReason)
		}).Should(Succeed())

		setDataVolumeStatus(t, dv, cdiv1.Succeeded, "100.0%", 0)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.DiskReadyReason)
		}).Should(Succeed())
	})

	t.Run("clone of a golden DataSource", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "cozy-golden", Name: "talos-v1-13-6"}}
		kvm := tc.machine(t, "clone-ds", spec)
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, "clone-ds-root"), dv)).To(Succeed())
		g.Expect(dv.Spec.SourceRef).To(Equal(&cdiv1.DataVolumeSourceRef{Kind: "DataSource", Namespace: ptr.To("cozy-golden"), Name: "talos-v1-13-6"}))
		setDataVolumeStatus(t, dv, cdiv1.CSICloneInProgress, "", 0)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionUnknown, infrav1.CloningReason)
		}).Should(Succeed())
	})

	t.Run("clone of a golden PVC", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromPersistentVolumeClaim, Name: "golden"}}
		kvm := tc.machine(t, "clone-pvc", spec)
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, "clone-pvc-root"), dv)).To(Succeed())
		g.Expect(dv.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: tc.namespace, Name: "golden"}))
	})

	t.Run("a bootstrap Secret without the cluster-name label is read past the cache", func(t *testing.T) {
		t.Parallel()
		kvm := tc.machine(t, "unlabelled-bootstrap", containerDiskSpec(), func(_ *clusterv1.Machine, _ *infrav1.KubeVirtMachine, s *corev1.Secret) {
			s.Labels = nil
		})
		waitForVM(t, kvm)
		expectUserData(t, kvm)
	})
}

// TestMachineShape checks GPUs, host devices, instancetypes, networks and the
// failure domain on a real VirtualMachine.
func TestMachineShape(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	spec := containerDiskSpec()
	spec.CPU, spec.Memory = nil, nil
	spec.Instancetype = &infrav1.InstancetypeReference{Name: "gn1.xlarge"}
	spec.Preference = &infrav1.PreferenceReference{Name: "linux"}
	spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}}
	spec.HostDevices = []infrav1.HostDevice{{Name: "nic", DeviceName: "intel.com/E810"}}
	spec.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}}, {Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: "infra/storage"}}}
	spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	spec.EvictionStrategy = infrav1.EvictionLiveMigrate
	kvm := tc.machine(t, "shaped", spec, func(m *clusterv1.Machine, _ *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		m.Spec.FailureDomain = "zone-b"
	})
	vm := waitForVM(t, kvm)
	g.Expect(vm.Spec.Instancetype).To(Equal(&kubevirtv1.InstancetypeMatcher{Kind: "VirtualMachineClusterInstancetype", Name: "gn1.xlarge"}))
	g.Expect(vm.Spec.Preference).To(Equal(&kubevirtv1.PreferenceMatcher{Kind: "VirtualMachineClusterPreference", Name: "linux"}))
	devices := vm.Spec.Template.Spec.Domain.Devices
	g.Expect(devices.GPUs).To(Equal([]kubevirtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}}))
	g.Expect(devices.HostDevices).To(Equal([]kubevirtv1.HostDevice{{Name: "nic", DeviceName: "intel.com/E810"}}))
	g.Expect(vm.Spec.Template.Spec.Networks).To(HaveLen(2))
	g.Expect(vm.Spec.Template.Spec.Tolerations).To(Equal(spec.Tolerations))
	g.Expect(vm.Spec.Template.Spec.EvictionStrategy).To(Equal(ptr.To(kubevirtv1.EvictionStrategyLiveMigrate)))
	g.Expect(vm.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal(
		[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-b"}}}}}))
	// The failure domain is reported with the provisioned machine.
	startInstance(t, vm, "10.244.2.9")
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(kvm.Status.FailureDomain).To(Equal("zone-b"))
	}).Should(Succeed())
}

// TestMachineProvisioning plays KubeVirt starting the VM and checks the
// contract fields Cluster API reads.
func TestMachineProvisioning(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	kvm := tc.machine(t, "provisioned", containerDiskSpec())
	vm := waitForVM(t, kvm)
	g.Expect(kvm.Spec.ProviderID).To(BeEmpty())
	vmi := startInstance(t, vm, "10.244.1.7")
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		g.Expect(kvm.Spec.ProviderID).To(Equal("kubevirt://provisioned"))
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(kvm.Status.ProvisionedInstanceUID).To(Equal(string(vmi.UID)))
		g.Expect(kvm.Status.NodeName).To(Equal("infra-node-1"))
		g.Expect(kvm.Status.Addresses).To(Equal([]clusterv1.MachineAddress{
			{Type: clusterv1.MachineHostName, Address: "provisioned"},
			{Type: clusterv1.MachineInternalIP, Address: "10.244.1.7"},
		}))
		expectCondition(g, kvm, infrav1.VirtualMachineProvisionedCondition, metav1.ConditionTrue, infrav1.ProvisionedReason)
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	}).Should(Succeed())
}

// TestMachineFailureConditions drives each failure a MachineHealthCheck acts
// on and checks it reaches Ready=False with its reason.
func TestMachineFailureConditions(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	ctx := context.Background()

	expectReady := func(t *testing.T, kvm *infrav1.KubeVirtMachine, status metav1.ConditionStatus, reason string) {
		t.Helper()
		NewWithT(t).Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.ReadyCondition, status, reason)
		}).Should(Succeed())
	}

	t.Run("a failed import", func(t *testing.T) {
		t.Parallel()
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/missing.raw.xz"}}
		spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
		kvm := tc.machine(t, "import-fails", spec)
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		NewWithT(t).Expect(c.Get(ctx, key(tc.namespace, "import-fails-root"), dv)).To(Succeed())
		setDataVolumeStatus(t, dv, cdiv1.ImportInProgress, "0.00%", 1)
		expectReady(t, kvm, metav1.ConditionUnknown, infrav1.ImportingReason)
		setDataVolumeStatus(t, dv, cdiv1.ImportInProgress, "0.00%", 3)
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.ImportFailedReason)
	})

	t.Run("an unschedulable VM", func(t *testing.T) {
		t.Parallel()
		kvm := tc.machine(t, "unschedulable", containerDiskSpec())
		vm := waitForVM(t, kvm)
		setVMStatus(t, vm, kubevirtv1.VirtualMachineStatusUnschedulable)
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.UnschedulableReason)
	})

	t.Run("a container disk that cannot be pulled", func(t *testing.T) {
		t.Parallel()
		kvm := tc.machine(t, "image-pull", containerDiskSpec())
		vm := waitForVM(t, kvm)
		setVMStatus(t, vm, kubevirtv1.VirtualMachineStatusImagePullBackOff)
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.ImagePullFailedReason)
	})

	t.Run("a failed instance whose run strategy starts no other", func(t *testing.T) {
		t.Parallel()
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}
		spec.RunStrategy = infrav1.RunOnce
		kvm := tc.machine(t, "instance-fails", spec)
		vm := waitForVM(t, kvm)
		vmi := startInstance(t, vm, "10.244.1.8")
		expectReady(t, kvm, metav1.ConditionUnknown, infrav1.DiskPendingReason)
		vmi.Status.Phase = kubevirtv1.Failed
		vmi.Status.Conditions = nil
		NewWithT(t).Expect(c.Update(ctx, vmi)).To(Succeed())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.InstanceFailedReason)
	})

	t.Run("a restarted container-disk instance lost the node's state", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		kvm := tc.machine(t, "ephemeral", containerDiskSpec())
		vm := waitForVM(t, kvm)
		first := startInstance(t, vm, "10.244.1.9")
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		// KubeVirt replaces the instance: a new UID on a blank container disk.
		g.Expect(c.Delete(ctx, first)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(first), &kubevirtv1.VirtualMachineInstance{}))
		}).Should(BeTrue())
		second := startInstance(t, vm, "10.244.1.10")
		g.Expect(second.UID).NotTo(Equal(first.UID))
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.EphemeralDiskLostReason)
		g.Expect(conditionOf(kvm, infrav1.ReadyCondition).Message).To(ContainSubstring(string(first.UID)))
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "provisioned is never reset")
	})

	t.Run("a VM deleted after provisioning is reported, not recreated", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}
		kvm := tc.machine(t, "vm-deleted", spec)
		vm := waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, "vm-deleted-root"), dv)).To(Succeed())
		setDataVolumeStatus(t, dv, cdiv1.Succeeded, "100.0%", 0)
		vmi := startInstance(t, vm, "10.244.1.11")
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(c.Delete(ctx, vmi)).To(Succeed())
		g.Expect(c.Delete(ctx, vm)).To(Succeed())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.VirtualMachineDeletedReason)
		g.Consistently(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}))
		}).WithTimeout(syncPeriod+time.Second).Should(BeTrue(), "the VM is not recreated")
	})
}

// TestMachineFromTemplate checks that a machine cloned from a class-less
// template waits for nothing and one cloned from an unresolved template waits.
func TestMachineWaitsForItsTemplate(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	spec := containerDiskSpec()
	spec.Image = nil
	kvm := tc.machine(t, "from-template", spec, func(_ *clusterv1.Machine, k *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		k.Annotations = map[string]string{
			clusterv1.TemplateClonedFromNameAnnotation:      "late-template",
			clusterv1.TemplateClonedFromGroupKindAnnotation: "KubeVirtMachineTemplate.infrastructure.cozystack.io",
		}
	})
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForTemplateReason)
		g.Expect(cond.Message).To(Equal("KubeVirtMachineTemplate late-template does not exist"))
	}).Should(Succeed())

	template := &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "late-template", Namespace: tc.namespace},
		Spec:       infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: containerDiskSpec()}},
	}
	template.Spec.Template.Spec.CloudInitDatasource = infrav1.ConfigDriveDatasource
	g.Expect(c.Create(ctx, template)).To(Succeed())
	vm := waitForVM(t, kvm)
	g.Expect(volumeNamed(vm, "root").ContainerDisk.Image).To(Equal(digestRef))
	g.Expect(volumeNamed(vm, "cloudinit").CloudInitConfigDrive).NotTo(BeNil(), "the template's resolved datasource is used")
}

// TestPausedMachine checks that a paused cluster stops provisioning.
func TestPausedMachine(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	tc.cluster.Spec.Paused = ptr.To(true)
	g.Expect(c.Update(ctx, tc.cluster)).To(Succeed())
	kvm := tc.machine(t, "paused", containerDiskSpec())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, clusterv1.PausedCondition, metav1.ConditionTrue, clusterv1.PausedReason)
	}).Should(Succeed())
	g.Consistently(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(kvm), &kubevirtv1.VirtualMachine{}))
	}).WithTimeout(syncPeriod + time.Second).Should(BeTrue())

	tc.cluster.Spec.Paused = ptr.To(false)
	g.Expect(c.Update(ctx, tc.cluster)).To(Succeed())
	waitForVM(t, kvm)
}

func volumeNamed(vm *kubevirtv1.VirtualMachine, name string) kubevirtv1.Volume {
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return kubevirtv1.Volume{}
}

// expectUserData checks that the cloud-init Secret holds the bootstrap
// Secret's value byte for byte.
func expectUserData(t *testing.T, kvm *infrav1.KubeVirtMachine) {
	t.Helper()
	g := NewWithT(t)
	secret := &corev1.Secret{}
	g.Eventually(func() error {
		return c.Get(context.Background(), key(kvm.Namespace, kvm.Name+"-userdata"), secret)
	}).Should(Succeed())
	g.Expect(secret.Data).To(Equal(map[string][]byte{"userdata": bootstrapData(kvm.Name)}))
	g.Expect(metav1.IsControlledBy(secret, kvm)).To(BeTrue())
}

func setDataVolumeStatus(t *testing.T, dv *cdiv1.DataVolume, phase cdiv1.DataVolumePhase, progress string, restarts int32) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(dv), dv); err != nil {
			return err
		}
		dv.Status.Phase = phase
		dv.Status.Progress = cdiv1.DataVolumeProgress(progress)
		dv.Status.RestartCount = restarts
		return c.Status().Update(ctx, dv)
	}).Should(Succeed())
}

func setVMStatus(t *testing.T, vm *kubevirtv1.VirtualMachine, printable kubevirtv1.VirtualMachinePrintableStatus) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		vm.Status.PrintableStatus = printable
		return c.Status().Update(ctx, vm)
	}).Should(Succeed())
}
