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
	"encoding/json"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
)

// cachedVM and cachedVMI are what the cache holds of a VM or an instance
// the API server sends: the transform of a copy; nil stays nil.
func cachedVM(t *testing.T, vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachine {
	t.Helper()
	return cached(t, vm, StripUnreadVirtualMachineFields)
}

func cachedVMI(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	return cached(t, vmi, StripUnreadInstanceFields)
}

func cached[T client.Object](t *testing.T, obj T, transform func(any) (any, error)) T {
	t.Helper()
	if util.IsNil(obj) {
		return obj
	}
	out, err := transform(obj.DeepCopyObject())
	if err != nil {
		t.Fatal(err)
	}
	return out.(T)
}

var (
	createdAt    = metav1.NewTime(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	transitionAt = metav1.NewTime(time.Date(2026, 3, 1, 10, 1, 0, 0, time.UTC))
)

// serverMeta is the metadata the API server, KubeVirt and Cluster API give
// a machine's object, managedFields included.
func serverMeta(meta metav1.ObjectMeta, uid string) metav1.ObjectMeta {
	meta.UID = types.UID(uid)
	meta.ResourceVersion = "48213"
	meta.Generation = 2
	meta.CreationTimestamp = createdAt
	meta.DeletionTimestamp = ptr.To(transitionAt)
	meta.DeletionGracePeriodSeconds = ptr.To[int64](0)
	meta.Finalizers = append(meta.Finalizers, "kubevirt.io/virtualMachineControllerFinalize")
	meta.Annotations = map[string]string{"kubevirt.io/latest-observed-api-version": "v1", "kubevirt.io/storage-observed-api-version": "v1"}
	meta.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubevirt-workers", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "kubevirt.io/v1", FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:runStrategy":{},"f:template":{}}}`)},
		{Manager: "virt-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "kubevirt.io/v1", FieldsType: "FieldsV1", Subresource: "status",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{},"f:printableStatus":{}}}`)},
	}
	return meta
}

// renderedMachine is a machine's VM as render makes it, for a machine with
// every part the VM carries (an HTTP import, two networks, placement), and
// what KubeVirt writes into it.
func renderedMachine(t *testing.T) *kubevirtv1.VirtualMachine {
	t.Helper()
	kvm := &infrav1.KubeVirtMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "kvm-1"},
		Spec: infrav1.KubeVirtMachineSpec{
			CPU:      &infrav1.CPU{Cores: 4},
			Memory:   ptr.To(resource.MustParse("8Gi")),
			RootDisk: &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi")), StorageClassName: "replicated"},
			Networks: []infrav1.Network{
				{Name: "pod", Pod: &infrav1.PodNetwork{}, Binding: infrav1.BridgeBinding},
				{Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: "ns/storage"}},
			},
			Tolerations:      []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "workers", Effect: corev1.TaintEffectNoSchedule}},
			EvictionStrategy: infrav1.EvictionStrategy(kubevirtv1.EvictionStrategyExternal),
			RunStrategy:      infrav1.RunStrategy(kubevirtv1.RunStrategyRerunOnFailure),
		},
	}
	objs, errs := vmspec.Render(vmspec.Input{
		Machine:       kvm,
		ClusterName:   "c",
		Image:         infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://images.example.com/worker.qcow2"}},
		FailureDomain: "zone-a",
		UserData:      []byte("#cloud-config\n"),
	})
	if len(errs) > 0 {
		t.Fatalf("render: %v", errs.ToAggregate())
	}
	vm := objs.VirtualMachine
	vm.ObjectMeta = serverMeta(vm.ObjectMeta, "vm-1")
	vm.Status = kubevirtv1.VirtualMachineStatus{
		Created:         true,
		Ready:           true,
		PrintableStatus: kubevirtv1.VirtualMachineStatusCrashLoopBackOff,
		Conditions: []kubevirtv1.VirtualMachineCondition{
			{Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: "VMINotExists", Message: "VMI does not exist", LastTransitionTime: transitionAt},
			{Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "launcher refused", LastTransitionTime: transitionAt},
			{Type: kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceIsMigratable), Status: corev1.ConditionFalse, Reason: "DisksNotLiveMigratable", Message: "cannot migrate VMI: PVC w-root is not shared"},
			{Type: kubevirtv1.VirtualMachinePaused, Status: corev1.ConditionFalse},
		},
		StartFailure:           &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 3, LastFailedVMIUID: "vmi-0", RetryAfterTimestamp: ptr.To(transitionAt)},
		StateChangeRequests:    []kubevirtv1.VirtualMachineStateChangeRequest{{Action: kubevirtv1.StartRequest}},
		VolumeSnapshotStatuses: []kubevirtv1.VolumeSnapshotStatus{{Name: "root", Enabled: false, Reason: "No VolumeSnapshotClass"}, {Name: "cloudinit", Reason: "Snapshot is not supported for this volumeSource type"}},
		ObservedGeneration:     2,
		DesiredGeneration:      2,
		RunStrategy:            kubevirtv1.RunStrategyRerunOnFailure,
	}
	return vm
}

// evacuatingInstance is the machine's instance as KubeVirt reports it while
// it runs, evacuates and migrates, with what KubeVirt adds to the VM's
// template.
func evacuatingInstance(vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstance {
	meta := *vm.Spec.Template.ObjectMeta.DeepCopy()
	meta.Name, meta.Namespace = vm.Name, vm.Namespace
	meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: serverMeta(meta, "vmi-1"), Spec: *vm.Spec.Template.Spec.DeepCopy()}
	vmi.Spec.Domain.Firmware = &kubevirtv1.Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223", Serial: "0d9c8d8b"}
	vmi.Spec.Domain.Machine = &kubevirtv1.Machine{Type: "q35"}
	vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
	vmi.Spec.Architecture = "amd64"
	vmi.Status = kubevirtv1.VirtualMachineInstanceStatus{
		NodeName:           "infra-1",
		EvacuationNodeName: "infra-1",
		Reason:             "Evicted",
		Phase:              kubevirtv1.Running,
		Conditions: []kubevirtv1.VirtualMachineInstanceCondition{
			{Type: kubevirtv1.VirtualMachineInstanceProvisioning, Status: corev1.ConditionTrue},
			{Type: kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available", LastTransitionTime: transitionAt},
			{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue, LastProbeTime: transitionAt, LastTransitionTime: transitionAt},
			{Type: kubevirtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse, Reason: "DisksNotLiveMigratable", Message: "cannot migrate VMI: PVC w-root is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"},
			{Type: kubevirtv1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue},
			{Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: failedCreateReason, Message: "failed to render launch manifest"},
		},
		PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: kubevirtv1.Pending, PhaseTransitionTimestamp: createdAt}, {Phase: kubevirtv1.Running, PhaseTransitionTimestamp: transitionAt}},
		Interfaces: []kubevirtv1.VirtualMachineInstanceNetworkInterface{
			{Name: "pod", IP: "10.244.1.7", IPs: []string{"10.244.1.7", "fd00::7"}, MAC: "02:00:00:00:00:01", InterfaceName: "eth0", InfoSource: "domain, guest-agent", PodInterfaceName: "eth0", QueueCount: 1, LinkState: "up"},
			{Name: "storage", IPs: []string{"192.168.1.7"}, MAC: "02:00:00:00:00:02", InterfaceName: "eth1", InfoSource: "domain, guest-agent, multus-status", PodInterfaceName: "pod1a2b3c"},
			{Name: "down", MAC: "02:00:00:00:00:03", InfoSource: "domain"},
		},
		GuestOSInfo: kubevirtv1.VirtualMachineInstanceGuestOSInfo{Name: "Kairos", KernelRelease: "6.8.0", ID: "kairos", Version: "3.4"},
		MigrationState: &kubevirtv1.VirtualMachineInstanceMigrationState{
			StartTimestamp: ptr.To(transitionAt), TargetNode: "infra-2", TargetNodeAddress: "10.0.0.9", TargetPod: "virt-launcher-w-x7k2p",
			SourceNode: "infra-1", SourcePod: "virt-launcher-w-a1b2c", MigrationUID: "m-1", Mode: kubevirtv1.MigrationPreCopy,
			TargetDirectMigrationNodePorts: map[string]int{"49152": 0}, MigrationConfiguration: &kubevirtv1.MigrationConfiguration{AllowAutoConverge: ptr.To(false)},
			SourceState: &kubevirtv1.VirtualMachineInstanceMigrationSourceState{VirtualMachineInstanceCommonMigrationState: kubevirtv1.VirtualMachineInstanceCommonMigrationState{Node: "infra-1", Pod: "virt-launcher-w-a1b2c", MigrationUID: "m-1"}},
		},
		MigrationMethod:               kubevirtv1.LiveMigration,
		MigrationTransport:            kubevirtv1.MigrationTransportUnix,
		QOSClass:                      ptr.To(corev1.PodQOSBurstable),
		LauncherContainerImageVersion: "quay.io/kubevirt/virt-launcher:v1.7.0",
		ActivePods:                    map[types.UID]string{"pod-1": "infra-1"},
		VolumeStatus: []kubevirtv1.VolumeStatus{
			{Name: "root", Target: "vda", PersistentVolumeClaimInfo: &kubevirtv1.PersistentVolumeClaimInfo{ClaimName: "w-root", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}},
			{Name: "cloudinit", Target: "vdb", Size: 1048576},
		},
		VirtualMachineRevisionName: "revision-start-vm-1-2",
		RuntimeUser:                107,
		SelinuxContext:             "system_u:object_r:container_file_t:s0:c1,c2",
		Machine:                    &kubevirtv1.Machine{Type: "pc-q35-rhel9.4.0"},
		CurrentCPUTopology:         &kubevirtv1.CPUTopology{Cores: 4, Sockets: 1, Threads: 1},
		Memory:                     &kubevirtv1.MemoryStatus{GuestAtBoot: ptr.To(resource.MustParse("8Gi")), GuestCurrent: ptr.To(resource.MustParse("8Gi"))},
	}
	return vmi
}

// TestTheCacheKeepsWhatTheControllerReadsOfVMsAndInstances: a
// VM and an instance as full as KubeVirt makes them keep in the cache their
// metadata without managedFields and exactly the fields the controller
// reads, the predicates' views and the status rules see the same in the
// cache's copy as in the whole object, and a second transform changes
// nothing.
func TestTheCacheKeepsWhatTheControllerReadsOfVMsAndInstances(t *testing.T) {
	g := NewWithT(t)
	full := renderedMachine(t)
	instance := evacuatingInstance(full)
	vm, vmi := cachedVM(t, full), cachedVMI(t, instance)

	meta := func(m metav1.ObjectMeta) metav1.ObjectMeta {
		m.ManagedFields = nil
		return m
	}
	g.Expect(vm).To(Equal(&kubevirtv1.VirtualMachine{
		TypeMeta:   full.TypeMeta,
		ObjectMeta: meta(full.ObjectMeta),
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyRerunOnFailure),
			Template:    &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: full.Spec.Template.Spec.Volumes}},
		},
		Status: kubevirtv1.VirtualMachineStatus{
			PrintableStatus: kubevirtv1.VirtualMachineStatusCrashLoopBackOff,
			Conditions:      []kubevirtv1.VirtualMachineCondition{full.Status.Conditions[1]},
			StartFailure:    full.Status.StartFailure,
		},
	}))
	g.Expect(vm.Spec.Template.Spec.Volumes).To(HaveLen(2), "the root DataVolume and the cloud-init volume")
	g.Expect(vmi).To(Equal(&kubevirtv1.VirtualMachineInstance{
		ObjectMeta: meta(instance.ObjectMeta),
		Spec:       kubevirtv1.VirtualMachineInstanceSpec{Hostname: "w", EvictionStrategy: ptr.To(kubevirtv1.EvictionStrategyExternal)},
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			NodeName:           "infra-1",
			EvacuationNodeName: "infra-1",
			Reason:             "Evicted",
			Phase:              kubevirtv1.Running,
			Conditions:         []kubevirtv1.VirtualMachineInstanceCondition{instance.Status.Conditions[1], instance.Status.Conditions[2], instance.Status.Conditions[5]},
			Interfaces: []kubevirtv1.VirtualMachineInstanceNetworkInterface{
				{IP: "10.244.1.7", IPs: []string{"10.244.1.7", "fd00::7"}},
				{IPs: []string{"192.168.1.7"}},
			},
			MigrationState: &kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-1", TargetNode: "infra-2"},
		},
	}))
	for _, o := range []struct {
		name         string
		whole, cache any
	}{{"VM", full, vm}, {"instance", instance, vmi}} {
		whole, err := json.Marshal(o.whole)
		g.Expect(err).NotTo(HaveOccurred())
		kept, err := json.Marshal(o.cache)
		g.Expect(err).NotTo(HaveOccurred())
		t.Logf("%s: %d bytes of JSON whole, %d in the cache", o.name, len(whole), len(kept))
	}

	g.Expect(viewOfVirtualMachine(vm)).To(Equal(viewOfVirtualMachine(full)))
	g.Expect(viewOfInstance(vmi)).To(Equal(viewOfInstance(instance)))
	g.Expect(rootDataVolume(vm)).To(Equal("w-root"))
	g.Expect(rootContainerDisk(vm)).To(Equal(rootContainerDisk(full)))
	g.Expect(vmFailureDetail(vm)).To(Equal(": launcher refused"))
	g.Expect(machineAddresses(vmi)).To(Equal(machineAddresses(instance)))
	for _, provisioned := range []bool{false, true} {
		whole := &observation{provisioned: provisioned, provisionedInstanceUID: "vmi-0", vm: full, vmi: instance, rootDataVolumeName: "w-root",
			rootDataVolume: dataVolume(cdiv1.Succeeded, "100.0%", 0, "")}
		cache := *whole
		cache.vm, cache.vmi = vm, vmi
		g.Expect(virtualMachineCondition(&cache)).To(Equal(virtualMachineCondition(whole)))
		g.Expect(cache.evacuating()).To(Equal(whole.evacuating()))
		g.Expect(cache.evictionStrategy()).To(Equal(whole.evictionStrategy()))
		g.Expect(cache.runStrategy()).To(Equal(whole.runStrategy()))
		g.Expect(cache.claimStatusStale()).To(Equal(whole.claimStatusStale()))
		g.Expect(cache.restartedInstance()).To(Equal(whole.restartedInstance()))
		g.Expect(pendingInstance(&cache)).To(Equal(pendingInstance(whole)))
		g.Expect(runningInstance(&cache)).To(Equal(runningInstance(whole)))
	}

	g.Expect(cachedVM(t, vm)).To(Equal(vm), "a second transform changes nothing")
	g.Expect(cachedVMI(t, vmi)).To(Equal(vmi), "a second transform changes nothing")
	g.Expect(cachedVM(t, &kubevirtv1.VirtualMachine{})).To(Equal(&kubevirtv1.VirtualMachine{}), "a VM without a template keeps none")
}

// TestTheCacheTransformsPassOtherObjectsUnchanged: controller-runtime
// calls a kind's transform with that kind's objects; anything else passes
// as it is, as the default transform lets it.
func TestTheCacheTransformsPassOtherObjectsUnchanged(t *testing.T) {
	g := NewWithT(t)
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: kubevirtv1.VirtualMachineSpec{DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{{}}}}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Status: kubevirtv1.VirtualMachineInstanceStatus{LauncherContainerImageVersion: "v1.7.0"}}
	tombstone := toolscache.DeletedFinalStateUnknown{Key: "ns/w", Obj: vm}
	for _, tc := range []struct {
		transform func(any) (any, error)
		in        any
	}{
		{StripUnreadVirtualMachineFields, vmi},
		{StripUnreadVirtualMachineFields, tombstone},
		{StripUnreadVirtualMachineFields, "w"},
		{StripUnreadInstanceFields, vm},
		{StripUnreadInstanceFields, &cdiv1.DataVolume{}},
		{StripUnreadInstanceFields, nil},
	} {
		before := fmt.Sprintf("%#v", tc.in)
		out, err := tc.transform(tc.in)
		g.Expect(err).NotTo(HaveOccurred())
		if tc.in == nil {
			g.Expect(out).To(BeNil())
			continue
		}
		g.Expect(out).To(BeIdenticalTo(tc.in))
		g.Expect(fmt.Sprintf("%#v", out)).To(Equal(before))
	}
	g.Expect(vm.ManagedFields).To(HaveLen(1))
	g.Expect(vmi.ManagedFields).To(HaveLen(1))
}

// TestCachedSecretsKeepOnlyWhatTheControllerReads: every Secret with a
// cluster-name label is cached, the cluster CA's key and the workload
// cluster's admin kubeconfig among them, so the transform keeps only
// bootstrap data and cloud-init user data, told apart by type and labels:
// the kubeconfig keeps its credentials under value, with the type and the
// label of bootstrap data.
func TestCachedSecretsKeepOnlyWhatTheControllerReads(t *testing.T) {
	cluster := map[string]string{clusterv1.ClusterNameLabel: "prod"}
	machine := map[string]string{clusterv1.ClusterNameLabel: "prod", infrav1.MachineNameLabel: "prod-workers-x"}
	for name, tc := range map[string]struct {
		name   string
		labels map[string]string
		typ    corev1.SecretType
		data   map[string][]byte
		kept   []string
	}{
		"bootstrap data keeps its value": {"prod-workers-x", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"value": []byte("#cloud-config"), "format": []byte("cloud-config")}, []string{"value"}},
		"a cloud-init Secret keeps its user data": {"prod-workers-x-userdata", machine, corev1.SecretTypeOpaque,
			map[string][]byte{"userdata": []byte("#cloud-config")}, []string{"userdata"}},
		"the admin kubeconfig keeps nothing": {"prod-kubeconfig", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")}, nil},
		"the cluster CA keeps nothing": {"prod-ca", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, nil},
		"the service account keys keep nothing": {"prod-sa", cluster, clusterv1.ClusterSecretType,
			map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, nil},
		"another Secret with a value key keeps nothing": {"tenant-kubeconfig-copy", cluster, corev1.SecretTypeOpaque,
			map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")}, nil},
		"a Secret without data stays without data": {"prod-workers-y", cluster, clusterv1.ClusterSecretType, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			in := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Labels: tc.labels, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Type: tc.typ, Data: tc.data}
			out, err := StripUnreadSecretData(in)
			g.Expect(err).NotTo(HaveOccurred())
			s := out.(*corev1.Secret)
			g.Expect(s.ManagedFields).To(BeEmpty())
			g.Expect(s.Data).To(HaveLen(len(tc.kept)))
			for _, k := range tc.kept {
				g.Expect(s.Data).To(HaveKeyWithValue(k, tc.data[k]))
			}
		})
	}
}
