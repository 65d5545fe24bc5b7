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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	"github.com/cozystack/cluster-api-workers/test/sim/fault"
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
// strict) and by KubeVirt's admission, carries the bootstrap data unchanged,
// and that the disk's state reaches the machine's conditions as CDI moves it.
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
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.ContainerDiskReason)
		// Until KubeVirt ran the instance, the machine was provisioning:
		// the reconcile that created the VM saw no instance yet.
		g.Expect(reportedConditions(kvm)).To(ContainElement(SatisfyAll(
			ContainElement(conditionMatching(infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.ContainerDiskReason, Not(BeEmpty()))),
			ContainElement(conditionMatching(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ProvisioningReason, Equal("Waiting for KubeVirt to start the VirtualMachineInstance"))),
		)), func() string { return describeWrites(kvm) })
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
		// Each of the importer's progress steps lasts seconds, far longer
		// than the controller's once-a-second limit per machine.
		stack.CDI.SlowImports(fault.Named(key(tc.namespace, "http-import-root")), 1, slowImport)
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

		importing := MatchRegexp(`^DataVolume http-import-root: ImportInProgress, [0-9]+\.[0-9]{2}%$`)
		g.Eventually(func() [][]metav1.Condition { return reportedConditions(kvm) }).WithTimeout(slowImport+time.Minute).Should(ContainElement(SatisfyAll(
			ContainElement(conditionMatching(infrav1.BootDiskReadyCondition, metav1.ConditionUnknown, infrav1.ImportingReason, importing)),
			ContainElement(conditionMatching(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ImportingReason, importing)),
		)), func() string { return describeWrites(kvm) + describe(tc.namespace) })
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.DiskReadyReason)
		}).WithTimeout(slowImport+time.Minute).Should(Succeed(), func() string { return describe(tc.namespace) })
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
	})

	t.Run("clone of a golden DataSource", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		goldenImage(t, "cozy-golden", "talos-v1-13-6")
		// The machine's namespace may clone from the golden namespace, as
		// CDI asks (clone_auth_test.go).
		ensureClusterRoles(t)
		bind(t, "cozy-golden", cloneSourceRole, namespaceServiceAccount(tc.namespace))
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "cozy-golden", Name: "talos-v1-13-6"}}
		stack.CDI.SlowImports(fault.Named(key(tc.namespace, "clone-ds-root")), 1, slowImport)
		kvm := tc.machine(t, "clone-ds", spec)
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, "clone-ds-root"), dv)).To(Succeed())
		// The claim the DataSource pointed at when the clone was
		// authorized (cloneauth.Pin).
		g.Expect(dv.Spec.SourceRef).To(BeNil())
		g.Expect(dv.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: "cozy-golden", Name: "talos-v1-13-6"}))
		g.Eventually(func() [][]metav1.Condition { return reportedConditions(kvm) }).WithTimeout(slowImport+time.Minute).Should(ContainElement(
			ContainElement(conditionMatching(infrav1.BootDiskReadyCondition, metav1.ConditionUnknown, infrav1.CloningReason,
				MatchRegexp(`^DataVolume clone-ds-root: CloneInProgress`)))),
			func() string { return describeWrites(kvm) + describe(tc.namespace) })
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.DiskReadyReason)
		}).WithTimeout(slowImport+time.Minute).Should(Succeed(), func() string { return describe(tc.namespace) })
	})

	t.Run("clone of a golden PVC", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		goldenImage(t, tc.namespace, "golden")
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromPersistentVolumeClaim, Name: "golden"}}
		kvm := tc.machine(t, "clone-pvc", spec)
		waitForVM(t, kvm)
		dv := &cdiv1.DataVolume{}
		g.Expect(c.Get(ctx, key(tc.namespace, "clone-pvc-root"), dv)).To(Succeed())
		g.Expect(dv.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: tc.namespace, Name: "golden"}))
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		expectCondition(g, kvm, infrav1.BootDiskReadyCondition, metav1.ConditionTrue, infrav1.DiskReadyReason)
	})

	t.Run("a bootstrap Secret without the cluster-name label is not followed", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		// Cluster API's bootstrap contract labels bootstrap data; the
		// Secret cache never selects this one, and the live read past it
		// finds a Secret that is not the machine's data.
		kvm := tc.machine(t, "unlabelled-bootstrap", containerDiskSpec(), func(_ *clusterv1.Machine, _ *infrav1.KubeVirtMachine, s *corev1.Secret) {
			s.Labels = nil
		})
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.BootstrapDataForbiddenReason)
			g.Expect(cond.Message).To(ContainSubstring("does not carry the label cluster.x-k8s.io/cluster-name="))
		}).Should(Succeed())
	})
}

// slowImport is how long the imports and clones whose progress a test
// follows take: four progress steps of a few seconds each.
const slowImport = 20 * time.Second

// shapedInstancetype is the cluster instancetype the shaped machine names.
// It sizes the VM and leaves the GPUs to the machine's spec: KubeVirt's
// admission refuses a VM that sets what its instancetype sets.
func shapedInstancetype(t *testing.T) *instancetypev1beta1.VirtualMachineClusterInstancetype {
	t.Helper()
	it := &instancetypev1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "gn1.xlarge"},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 4},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("16Gi")},
		},
	}
	NewWithT(t).Expect(c.Create(context.Background(), it)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), it) })
	return it
}

// multusNetwork installs Multus's NetworkAttachmentDefinition CRD and the
// network a machine attaches to: virt-controller reads it to render the
// launcher Pod.
func multusNetwork(t *testing.T, namespace, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "network-attachment-definitions.k8s.cni.cncf.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "k8s.cni.cncf.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "network-attachment-definitions", Singular: "network-attachment-definition",
				Kind: "NetworkAttachmentDefinition", ListKind: "NetworkAttachmentDefinitionList", ShortNames: []string{"net-attach-def"}},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"config": {Type: "string"}}}}}}}},
		},
	}
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, crd))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		g.Expect(crd.Status.Conditions).To(ContainElement(And(
			HaveField("Type", apiextensionsv1.Established), HaveField("Status", apiextensionsv1.ConditionTrue))))
	}).Should(Succeed())
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))).To(Succeed())
	nad := &unstructured.Unstructured{}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	nad.SetNamespace(namespace)
	nad.SetName(name)
	g.Expect(unstructured.SetNestedField(nad.Object, `{"cniVersion": "0.3.1", "type": "bridge", "bridge": "br-storage"}`, "spec", "config")).To(Succeed())
	g.Eventually(func() error { return client.IgnoreAlreadyExists(c.Create(ctx, nad)) }).Should(Succeed())
}

// TestMachineShape checks GPUs, host devices, instancetypes, networks and the
// failure domain on a real VirtualMachine, which KubeVirt runs on the node
// of that zone with the devices.
func TestMachineShape(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	shapedInstancetype(t)
	multusNetwork(t, tc.namespace, "storage")
	spec := containerDiskSpec()
	spec.CPU, spec.Memory = nil, nil
	spec.Instancetype = &infrav1.InstancetypeReference{Name: "gn1.xlarge"}
	spec.Preference = &infrav1.PreferenceReference{Name: "linux"}
	spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: gpuResource}}
	spec.HostDevices = []infrav1.HostDevice{{Name: "nic", DeviceName: hostDeviceResource}}
	spec.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}}, {Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: tc.namespace + "/storage"}}}
	spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	// KubeVirt cannot live-migrate a VM with GPUs or host devices.
	spec.EvictionStrategy = infrav1.EvictionLiveMigrateIfPossible
	kvm := tc.machine(t, "shaped", spec, func(m *clusterv1.Machine, _ *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		m.Spec.FailureDomain = zoneB
	})
	vm := waitForVM(t, kvm)
	// virt-controller records the instancetype's revision in the matcher.
	g.Expect(vm.Spec.Instancetype).NotTo(BeNil())
	g.Expect(vm.Spec.Instancetype.Kind).To(Equal("VirtualMachineClusterInstancetype"))
	g.Expect(vm.Spec.Instancetype.Name).To(Equal("gn1.xlarge"))
	g.Expect(vm.Spec.Preference).NotTo(BeNil())
	g.Expect(vm.Spec.Preference.Kind).To(Equal("VirtualMachineClusterPreference"))
	g.Expect(vm.Spec.Preference.Name).To(Equal("linux"))
	devices := vm.Spec.Template.Spec.Domain.Devices
	g.Expect(devices.GPUs).To(Equal([]kubevirtv1.GPU{{Name: "gpu1", DeviceName: gpuResource}}))
	g.Expect(devices.HostDevices).To(Equal([]kubevirtv1.HostDevice{{Name: "nic", DeviceName: hostDeviceResource}}))
	g.Expect(vm.Spec.Template.Spec.Networks).To(HaveLen(2))
	g.Expect(vm.Spec.Template.Spec.Tolerations).To(Equal(spec.Tolerations))
	g.Expect(vm.Spec.Template.Spec.EvictionStrategy).To(Equal(ptr.To(kubevirtv1.EvictionStrategyLiveMigrateIfPossible)))
	g.Expect(vm.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal(
		[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: placement.ControlPlaneLabel, Operator: corev1.NodeSelectorOpDoesNotExist},
			{Key: reservedNodeLabel, Operator: corev1.NodeSelectorOpDoesNotExist},
			{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zoneB}},
		}}}))
	// The failure domain is reported with the provisioned machine, on the
	// node of that zone.
	expectProvisioned(t, kvm)
	g.Expect(kvm.Status.FailureDomain).To(Equal(zoneB))
	g.Expect(kvm.Status.NodeName).To(Equal("infra-b"))
}

// TestCozystackShape writes a machine as Cozystack renders its workers
// (the pod network bridged with KubeVirt's live-migration annotation on
// the instance, eviction strategy External, a spread by hostname, its own
// VM and instance labels) and finds a VirtualMachine that virt-api
// admitted with them, beside Cluster API's labels its WorkloadMonitor
// selects the workers by, and an instance that KubeVirt started with
// them.
func TestCozystackShape(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	deployment := tc.cluster.Name + "-md-0"
	spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}}}}
	spec := containerDiskSpec()
	spec.Networks = []infrav1.Network{{Name: "default", Pod: &infrav1.PodNetwork{}, Binding: infrav1.BridgeBinding}}
	spec.EvictionStrategy = infrav1.EvictionExternal
	spec.TopologySpreadConstraints = spread
	spec.VirtualMachineMetadata = infrav1.ObjectMetadata{
		Labels:      map[string]string{"node-role.kubernetes.io/worker": ""},
		Annotations: map[string]string{"apps.cozystack.io/release": "kubernetes-tenant"},
	}
	instanceLabels := map[string]string{
		"apps.cozystack.io/application.group": "apps.cozystack.io",
		"apps.cozystack.io/application.kind":  "Kubernetes",
		"apps.cozystack.io/application.name":  "tenant",
		"node-role.kubernetes.io/worker":      "",
	}
	spec.InstanceMetadata = infrav1.ObjectMetadata{Labels: instanceLabels,
		Annotations: map[string]string{kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation: "true"}}
	kvm := tc.machine(t, "cozystack", spec, func(m *clusterv1.Machine, _ *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		m.Labels[clusterv1.MachineDeploymentNameLabel] = deployment
	})
	capi := map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name, clusterv1.MachineDeploymentNameLabel: deployment, vmspec.RoleLabel: vmspec.WorkerRole}

	vm := waitForVM(t, kvm)
	g.Expect(vm.Labels).To(HaveKeyWithValue("node-role.kubernetes.io/worker", ""))
	g.Expect(vm.Labels).To(HaveKeyWithValue(infrav1.MachineNameLabel, kvm.Name))
	g.Expect(vm.Annotations).To(HaveKeyWithValue("apps.cozystack.io/release", "kubernetes-tenant"))
	template := vm.Spec.Template
	for k, v := range instanceLabels {
		g.Expect(template.ObjectMeta.Labels).To(HaveKeyWithValue(k, v))
	}
	for _, labels := range []map[string]string{vm.Labels, template.ObjectMeta.Labels} {
		for k, v := range capi {
			g.Expect(labels).To(HaveKeyWithValue(k, v))
		}
	}
	g.Expect(template.ObjectMeta.Annotations).To(HaveKeyWithValue(kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation, "true"))
	g.Expect(template.Spec.TopologySpreadConstraints).To(Equal(spread))
	g.Expect(template.Spec.EvictionStrategy).To(Equal(ptr.To(kubevirtv1.EvictionStrategyExternal)))
	g.Expect(template.Spec.Domain.Devices.Interfaces).To(ConsistOf(HaveField("InterfaceBindingMethod.Bridge", Not(BeNil()))))
	userData := &corev1.Secret{}
	g.Expect(c.Get(context.Background(), key(kvm.Namespace, vmspec.UserDataSecretName(kvm.Name)), userData)).To(Succeed())
	for k, v := range capi {
		g.Expect(userData.Labels).To(HaveKeyWithValue(k, v))
	}

	// KubeVirt starts the instance with them: its launcher Pod carries
	// what the WorkloadMonitor selects.
	vmi := runningInstance(t, kvm)
	for k, v := range capi {
		g.Expect(vmi.Labels).To(HaveKeyWithValue(k, v))
	}
	g.Expect(vmi.Labels).To(HaveKeyWithValue("apps.cozystack.io/application.name", "tenant"))
	g.Expect(vmi.Annotations).To(HaveKeyWithValue(kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation, "true"))
	g.Expect(vmi.Spec.TopologySpreadConstraints).To(Equal(spread))
}

// TestMachineProvisioning lets KubeVirt start the VM and checks the
// contract fields Cluster API reads.
func TestMachineProvisioning(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	kvm := tc.machine(t, "provisioned", containerDiskSpec())
	waitForVM(t, kvm)
	g.Expect(kvm.Spec.ProviderID).To(BeEmpty())
	expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
	vmi := runningInstance(t, kvm)
	g.Expect(vmi.Status.NodeName).To(BeElementOf("infra-a", "infra-b"))
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		g.Expect(kvm.Spec.ProviderID).To(Equal("kubevirt://provisioned"))
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(kvm.Status.ProvisionedInstanceUID).To(Equal(string(vmi.UID)))
		g.Expect(kvm.Status.NodeName).To(Equal(vmi.Status.NodeName))
		g.Expect(kvm.Status.Addresses).To(Equal([]clusterv1.MachineAddress{
			{Type: clusterv1.MachineHostName, Address: "provisioned"},
			{Type: clusterv1.MachineInternalIP, Address: vmi.Status.Interfaces[0].IP},
		}))
		expectCondition(g, kvm, infrav1.VirtualMachineProvisionedCondition, metav1.ConditionTrue, infrav1.ProvisionedReason)
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
	}).Should(Succeed())
}

// TestMachineFailureConditions drives each failure a MachineHealthCheck acts
// on, through the stand-ins' faults or as a user would, and checks it
// reaches Ready=False with its reason.
func TestMachineFailureConditions(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	ctx := context.Background()
	goldenImage(t, tc.namespace, "golden")

	t.Run("a failed import", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/missing.raw.xz"}}
		spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
		// The importer fails every run, each after a few seconds: the
		// restarts below the limit stay long enough to be seen.
		dvKey := key(tc.namespace, "import-fails-root")
		stack.CDI.FailImports(fault.Named(dvKey), 1)
		stack.CDI.SlowImports(fault.Named(dvKey), 1, slowImport)
		kvm := tc.machine(t, "import-fails", spec)
		waitForVM(t, kvm)
		// An importer that restarted fewer times than the limit is still
		// importing.
		dv := &cdiv1.DataVolume{}
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, dvKey, dv)).To(Succeed())
			g.Expect(dv.Status.RestartCount).To(BeNumerically(">=", 1))
			g.Expect(dv.Status.RestartCount).To(BeNumerically("<", 3))
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ImportingReason)
		}).Should(Succeed(), func() string { return describe(tc.namespace) })
		expectReadySaying(t, kvm, metav1.ConditionFalse, infrav1.ImportFailedReason, cdisim.ImportFailureMessage)
	})

	t.Run("an unschedulable VM", func(t *testing.T) {
		t.Parallel()
		stack.Hosts.NeverSchedule(fault.Named(key(tc.namespace, "unschedulable")), 1)
		kvm := tc.machine(t, "unschedulable", containerDiskSpec())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.UnschedulableReason)
	})

	t.Run("a GPU KubeVirt does not permit", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		// virt-api admits a GPU that KubeVirt's permittedHostDevices does
		// not list, and virt-controller then cannot render the launcher
		// Pod: the instance stays Pending and the VM says only Starting.
		// The machine reports virt-controller's words, and stays put.
		const missing = "nvidia.com/TU104GL_Tesla_T4"
		spec := containerDiskSpec()
		spec.GPUs = []infrav1.GPU{{Name: "gpu1", DeviceName: missing}}
		spec.EvictionStrategy = infrav1.EvictionLiveMigrateIfPossible
		kvm := tc.machine(t, "gpu-missing", spec)
		expectReady(t, kvm, metav1.ConditionUnknown, infrav1.CreateRefusedReason)
		g.Expect(conditionOf(kvm, infrav1.ReadyCondition).Message).To(Equal("KubeVirt cannot create the instance's launcher Pod: " +
			"failed to render launch manifest: GPU " + missing + " is not permitted in permittedHostDevices configuration"))
		version := kvm.ResourceVersion
		g.Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
			g.Expect(kvm.ResourceVersion).To(Equal(version), "the machine is not rewritten while it waits")
		}).WithTimeout(3 * time.Second).Should(Succeed())
	})

	t.Run("a container disk that cannot be pulled", func(t *testing.T) {
		t.Parallel()
		stack.Hosts.FailPulls(fault.Named(key(tc.namespace, "image-pull")), 1)
		kvm := tc.machine(t, "image-pull", containerDiskSpec())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.ImagePullFailedReason)
	})

	t.Run("a failed instance whose run strategy starts no other", func(t *testing.T) {
		t.Parallel()
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}
		spec.RunStrategy = infrav1.RunOnce
		kvm := tc.machine(t, "instance-fails", spec)
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		NewWithT(t).Expect(stack.Hosts.Crash(client.ObjectKeyFromObject(kvm), "")).To(Succeed())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.InstanceFailedReason)
	})

	t.Run("a restarted container-disk instance lost the node's state", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		kvm := tc.machine(t, "ephemeral", containerDiskSpec())
		expectProvisioned(t, kvm)
		first := kvm.Status.ProvisionedInstanceUID
		// The guest joined: Cluster API sets the Machine's Node.
		machine := &clusterv1.Machine{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), machine)).To(Succeed())
		joined := machine.DeepCopy()
		joined.Status.NodeRef = clusterv1.MachineNodeReference{Name: kvm.Name}
		g.Expect(c.Status().Patch(ctx, joined, client.MergeFrom(machine))).To(Succeed())
		// The node loses the instance with its container disk; KubeVirt
		// boots a new instance on a blank copy of the image.
		g.Expect(stack.Hosts.LoseDisk(ctx, client.ObjectKeyFromObject(kvm))).To(Succeed())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.EphemeralDiskLostReason)
		g.Expect(conditionOf(kvm, infrav1.ReadyCondition).Message).To(ContainSubstring(first))
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "provisioned is never reset")
		// KubeVirt runs a new instance, which is not the one that booted
		// the disk: the machine stays lost.
		g.Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), vmi)).To(Succeed())
			g.Expect(string(vmi.UID)).NotTo(Equal(first))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		}).Should(Succeed(), func() string { return describe(tc.namespace) })
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.EphemeralDiskLostReason)
	})

	t.Run("a container-disk instance restarted before the node joined lost nothing", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		kvm := tc.machine(t, "restarted-before-join", containerDiskSpec())
		expectProvisioned(t, kvm)
		first := kvm.Status.ProvisionedInstanceUID
		// The instance stops before the guest joined (a QEMU that crashed
		// early in its boot, as under KubeVirt's real node side): the new
		// instance boots the same image with the same bootstrap data.
		g.Expect(stack.Hosts.LoseDisk(ctx, client.ObjectKeyFromObject(kvm))).To(Succeed())
		g.Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), vmi)).To(Succeed())
			g.Expect(string(vmi.UID)).NotTo(Equal(first))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
			latest := &infrav1.KubeVirtMachine{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), latest)).To(Succeed())
			g.Expect(latest.Status.ProvisionedInstanceUID).To(Equal(string(vmi.UID)), "the new instance is the provisioned one")
		}).Should(Succeed(), func() string { return describe(tc.namespace) })
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
	})

	t.Run("a VM deleted after provisioning is reported, not recreated", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}
		kvm := tc.machine(t, "vm-deleted", spec)
		vm := waitForVM(t, kvm)
		expectReady(t, kvm, metav1.ConditionTrue, infrav1.ReadyReason)
		// KubeVirt stops the instance before the VM goes.
		g.Expect(c.Delete(ctx, vm)).To(Succeed())
		expectReady(t, kvm, metav1.ConditionFalse, infrav1.VirtualMachineDeletedReason)
		g.Consistently(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}))
		}).WithTimeout(syncPeriod+time.Second).Should(BeTrue(), "the VM is not recreated")
	})
}

// TestPersistentDiskInstanceRestarts crashes the guest of a provisioned
// machine on a cloned disk: KubeVirt (run strategy Always) fails the
// instance, deletes it and starts another on the same disk. The disk keeps
// the node's state, so the machine reports InstanceRestarting (Unknown,
// never remediated) until the new instance is ready, never the first
// boot's Provisioning nor a lost disk, and then Provisioned again; the
// instance that first became ready stays recorded.
func TestPersistentDiskInstanceRestarts(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	goldenImage(t, tc.namespace, "golden")
	spec := containerDiskSpec()
	spec.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}}
	kvm := tc.machine(t, "restarts", spec)
	expectProvisioned(t, kvm)
	first := kvm.Status.ProvisionedInstanceUID
	before := len(reportedConditions(kvm))

	g.Expect(stack.Hosts.Crash(client.ObjectKeyFromObject(kvm), "")).To(Succeed())
	// KubeVirt runs another instance, and the machine is ready on it.
	g.Eventually(func(g Gomega) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), vmi)).To(Succeed())
		g.Expect(string(vmi.UID)).NotTo(Equal(first))
		g.Expect(vmi.Status.Conditions).To(ContainElement(And(
			HaveField("Type", kubevirtv1.VirtualMachineInstanceReady), HaveField("Status", corev1.ConditionTrue))))
	}).Should(Succeed(), func() string { return describe(tc.namespace) })
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(kvm.Status.NodeName).NotTo(BeEmpty())
		// The reconcile that saw the new instance ready has written.
		reported := reportedConditions(kvm)
		g.Expect(len(reported)).To(BeNumerically(">", before))
		g.Expect(reported[len(reported)-1]).To(ContainElement(conditionMatching(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason, Not(BeEmpty()))))
	}).Should(Succeed(), func() string { return describeWrites(kvm) + describe(tc.namespace) })
	g.Expect(kvm.Status.ProvisionedInstanceUID).To(Equal(first))
	var restarting []metav1.Condition
	for _, conds := range reportedConditions(kvm)[before:] {
		for _, cond := range conds {
			if cond.Type == infrav1.ReadyCondition && cond.Status != metav1.ConditionTrue {
				restarting = append(restarting, cond)
			}
		}
	}
	// The new instance is reported restarting. Before it, a reconcile may
	// see the crashed instance still Running but no longer ready: KubeVirt
	// reports the launcher's readiness (virt-controller) and the domain's
	// end (virt-handler) independently, in either order. Nothing is lost
	// or terminal either way.
	g.Expect(restarting).To(ContainElement(conditionMatching(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.InstanceRestartingReason, Not(BeEmpty()))),
		func() string { return describeWrites(kvm) })
	g.Expect(restarting).To(HaveEach(Or(
		conditionMatching(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.InstanceRestartingReason, Not(BeEmpty())),
		conditionMatching(infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.InstanceNotReadyReason, Not(BeEmpty())))),
		func() string { return describeWrites(kvm) })
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

// TestMachineWithoutItsCluster: a machine whose Cluster does not exist says
// so by name, creates nothing, and provisions once the Cluster is there.
func TestMachineWithoutItsCluster(t *testing.T) {
	t.Parallel()
	tc := newCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	late := &testCluster{namespace: tc.namespace, cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: tc.namespace}}}
	kvm := late.machine(t, "orphan", containerDiskSpec())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		cond := expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForClusterReason)
		g.Expect(cond.Message).To(Equal("Cluster " + tc.namespace + "/late does not exist"))
	}).Should(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(kvm), &kubevirtv1.VirtualMachine{}))).To(BeTrue())

	unlabelled := tc.machine(t, "unlabelled", containerDiskSpec(), func(_ *clusterv1.Machine, k *infrav1.KubeVirtMachine, _ *corev1.Secret) {
		k.Labels = nil
	})
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(unlabelled), unlabelled)).To(Succeed())
		cond := expectCondition(g, unlabelled, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.WaitingForClusterReason)
		g.Expect(cond.Message).To(Equal("The machine has no " + clusterv1.ClusterNameLabel + " label"))
	}).Should(Succeed())

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: tc.namespace},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.late.example.com", Port: 6443}},
	}
	g.Expect(c.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(c.Status().Update(ctx, cluster)).To(Succeed())
	waitForVM(t, kvm)
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
