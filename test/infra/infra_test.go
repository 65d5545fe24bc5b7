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

package infra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	"github.com/cozystack/cluster-api-workers/test/sim/fault"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
	"github.com/cozystack/cluster-api-workers/test/vmfixture"
)

var (
	env    *envtest.Environment
	stack  *infra.Infra
	strict = client.FieldValidation(metav1.FieldValidationStrict)
)

const (
	timeout = 60 * time.Second
	poll    = 50 * time.Millisecond
	// gpuResource is the device plugin resource of the permitted GPU.
	gpuResource = "nvidia.com/GA102GL_A10"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme := envtest.DefaultScheme()
	if err := infra.AddToScheme(scheme); err != nil {
		panic(err)
	}
	var err error
	env, err = envtest.Start(ctx, envtest.Options{Scheme: scheme, CRDPaths: envtest.ExternalCRDPaths()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	kcm, err := env.StartControllerManager(envtest.ManagementControllers...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kcm.Stop()

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stack, err = infra.Start(ctx, env, mgr, infra.Options{
		KubeVirt: kubevirt.Options{
			LogDir: os.Getenv("KUBEVIRT_LOG_DIR"),
			Configuration: kubevirtv1.KubeVirtConfiguration{PermittedHostDevices: &kubevirtv1.PermittedHostDevices{
				PciHostDevices: []kubevirtv1.PciHostDevice{{PCIVendorSelector: "10DE:2236", ResourceName: gpuResource}},
			}},
		},
		CDI: cdisim.Options{ImportDuration: time.Second},
		Hosts: kubevirtsim.Options{Nodes: []kubevirtsim.InfraNode{
			{Name: "infra-a", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}, Allocatable: corev1.ResourceList{gpuResource: resource.MustParse("2")}},
			{Name: "infra-b", Labels: map[string]string{corev1.LabelTopologyZone: "zone-b"}},
		}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = stack.Stop() }()
	mgrCtx, stopManager := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = mgr.Start(mgrCtx)
	}()
	// Watches still open when the apiserver stops delay its shutdown.
	defer func() { stopManager(); <-stopped }()
	return m.Run()
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sim-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// cloudConfig is the user data of every VM here; no scenario reads it.
var cloudConfig = []byte("#cloud-config\n")

func containerDisk() kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "registry.example.com/kairos@sha256:" + fmt.Sprintf("%064d", 1)}}
}

func httpDataVolume(ns, name string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://factory.example.com/image/abc/v1.13.6/nocloud-amd64.raw.xz"}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}},
		},
	}
}

func launcherPods(g Gomega, ns string) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(env.Client.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"})).To(Succeed())
	return pods.Items
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o, strict); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func get[T client.Object](g Gomega, key client.ObjectKey, obj T) T {
	g.Expect(env.Client.Get(context.Background(), key, obj)).To(Succeed())
	return obj
}

func gone(key client.ObjectKey, obj client.Object) func() bool {
	return func() bool { return apierrors.IsNotFound(env.Client.Get(context.Background(), key, obj)) }
}

func TestContainerDiskVirtualMachineRunsWithAnAddress(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "cd", containerDisk())
	create(t, vmfixture.UserData(ns, "cd", cloudConfig), vm)
	key := client.ObjectKeyFromObject(vm)

	g.Eventually(func(g Gomega) {
		vm := get(g, key, &kubevirtv1.VirtualMachine{})
		g.Expect(vm.Finalizers).To(ContainElement(kubevirtv1.VirtualMachineControllerFinalizer))
		g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusRunning))
		g.Expect(vm.Status.Ready).To(BeTrue())
		vmi := get(g, key, &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		g.Expect(metav1.IsControlledBy(vmi, vm)).To(BeTrue())
		g.Expect(vmi.Finalizers).To(ContainElement(kubevirtv1.VirtualMachineInstanceFinalizer))
		g.Expect(vmi.Status.NodeName).To(BeElementOf("infra-a", "infra-b"))
		g.Expect(vmi.Status.Interfaces).To(HaveLen(1))
		g.Expect(vmi.Status.Interfaces[0].Name).To(Equal("default"))
		g.Expect(vmi.Status.Interfaces[0].IP).To(HavePrefix("10.244.0."))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

// TestSettledObjectsAreNotRewritten: once a VM runs and its disk is
// imported, the simulator writes nothing more, as KubeVirt and CDI leave a
// settled VM alone; a simulator that rewrites them would keep every
// watcher busy.
func TestSettledObjectsAreNotRewritten(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	dv := httpDataVolume(ns, "settled-root")
	vm := vmfixture.New(ns, "settled", kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: dv.Name}})
	create(t, vmfixture.UserData(ns, "settled", cloudConfig), dv, vm)
	key := client.ObjectKeyFromObject(vm)
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachine{}).Status.Ready).To(BeTrue())
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	versions := func(g Gomega) []string {
		return []string{
			get(g, key, &kubevirtv1.VirtualMachine{}).ResourceVersion,
			get(g, key, &kubevirtv1.VirtualMachineInstance{}).ResourceVersion,
			get(g, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{}).ResourceVersion,
			get(g, client.ObjectKeyFromObject(dv), &corev1.PersistentVolumeClaim{}).ResourceVersion,
		}
	}
	settled := versions(g)
	g.Consistently(versions, 2*time.Second, 100*time.Millisecond).Should(Equal(settled))
}

// TestVirtAPIIsIdleWhenNothingHappens: virt-api reloads its serving
// certificate whenever the certificate's directory changes; with its log
// in that directory, every reload's log line caused the next, and virt-api
// spun a whole core in every tier. Idle, it reloads nothing.
func TestVirtAPIIsIdleWhenNothingHappens(t *testing.T) {
	g := NewWithT(t)
	reloads := func() int {
		raw, err := os.ReadFile(stack.KubeVirt.API.LogPath)
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Count(string(raw), "certificate with common name")
	}
	before := reloads()
	g.Consistently(reloads, 3*time.Second, 500*time.Millisecond).Should(Equal(before))
}

func TestDataVolumeTemplateImportsWithProgressBeforeTheInstanceStarts(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "tpl", kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "tpl-root"}})
	dv := httpDataVolume(ns, "tpl-root")
	vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: dv.Name}, Spec: dv.Spec}}
	create(t, vmfixture.UserData(ns, "tpl", cloudConfig), vm)
	key := client.ObjectKeyFromObject(vm)
	dvKey := client.ObjectKey{Namespace: ns, Name: "tpl-root"}

	sawProgress := false
	g.Eventually(func(g Gomega) {
		dv := get(g, dvKey, &cdiv1.DataVolume{})
		if dv.Status.Phase == cdiv1.ImportInProgress && dv.Status.Progress != "N/A" {
			sawProgress = true
			// No instance starts before its disk is imported.
			g.Expect(gone(key, &kubevirtv1.VirtualMachineInstance{})()).To(BeTrue())
			g.Expect(get(g, key, &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusProvisioning))
		}
		g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
	}, timeout, 10*time.Millisecond).Should(Succeed())
	g.Expect(sawProgress).To(BeTrue(), "the import reported no progress")

	dvObj := get(g, dvKey, &cdiv1.DataVolume{})
	g.Expect(metav1.IsControlledBy(dvObj, get(g, key, &kubevirtv1.VirtualMachine{}))).To(BeTrue())
	pvc := get(g, dvKey, &corev1.PersistentVolumeClaim{})
	g.Expect(metav1.IsControlledBy(pvc, dvObj)).To(BeTrue())
	g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	g.Expect(pvc.Spec.Resources.Requests.Storage().String()).To(Equal("20Gi"))
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachineInstance{}).Status.Phase).To(Equal(kubevirtv1.Running))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

// TestFailedImportRestartsTheImporterAndNeverStartsTheVM: the importer
// keeps failing and restarting; virt-controller creates the instance (the
// DataVolume is not one of the VM's templates) but never its launcher Pod.
func TestFailedImportRestartsTheImporterAndNeverStartsTheVM(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	stack.CDI.FailImports(fault.Named(client.ObjectKey{Namespace: ns, Name: "bad-root"}), 1)
	dv := httpDataVolume(ns, "bad-root")
	vm := vmfixture.New(ns, "bad", kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: dv.Name}})
	create(t, vmfixture.UserData(ns, "bad", cloudConfig), dv, vm)

	g.Eventually(func(g Gomega) {
		dv := get(g, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{})
		g.Expect(dv.Status.Phase).To(Equal(cdiv1.ImportInProgress))
		g.Expect(dv.Status.RestartCount).To(BeNumerically(">=", 3))
		g.Expect(dv.Status.Conditions).To(ContainElement(And(
			HaveField("Type", cdiv1.DataVolumeRunning), HaveField("Status", corev1.ConditionFalse),
			HaveField("Reason", "Error"), HaveField("Message", cdisim.ImportFailureMessage))))
		g.Expect(get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusDataVolumeError))
		g.Expect(get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachineInstance{}).Status.Phase).To(Equal(kubevirtv1.Pending))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	g.Expect(launcherPods(g, ns)).To(BeEmpty())

	// The fault was for one import only: the next one succeeds.
	next := httpDataVolume(ns, "bad-root-2")
	create(t, next)
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, client.ObjectKeyFromObject(next), &cdiv1.DataVolume{}).Status.Phase).To(Equal(cdiv1.Succeeded))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

func TestSlowImportProgressesWithoutRestarts(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	stack.CDI.SlowImports(fault.Named(client.ObjectKey{Namespace: ns, Name: "slow"}), 1, 4*time.Second)
	dv := httpDataVolume(ns, "slow")
	create(t, dv)
	progress := map[cdiv1.DataVolumeProgress]bool{}
	g.Eventually(func(g Gomega) {
		dv := get(g, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{})
		g.Expect(dv.Status.RestartCount).To(BeZero())
		progress[dv.Status.Progress] = true
		g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
	}, timeout, 20*time.Millisecond).Should(Succeed())
	g.Expect(len(progress)).To(BeNumerically(">=", 3), "progress steps seen: %v", progress)
}

func TestNeverScheduledInstanceIsReportedUnschedulable(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	stack.Hosts.NeverSchedule(fault.WithLabels(map[string]string{"machine": "stuck"}), 1)
	vm := vmfixture.New(ns, "stuck", containerDisk())
	create(t, vmfixture.UserData(ns, "stuck", cloudConfig), vm)
	g.Eventually(func(g Gomega) {
		vmi := get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Scheduling))
		g.Expect(vmi.Status.Conditions).To(ContainElement(And(
			HaveField("Type", kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)),
			HaveField("Status", corev1.ConditionFalse), HaveField("Reason", corev1.PodReasonUnschedulable))))
		g.Expect(get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusUnschedulable))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachineInstance{}).Status.NodeName).To(BeEmpty())
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
}

func TestNodeAffinityToAZoneWithoutNodesIsUnschedulable(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	zoned := func(name, zone string) *kubevirtv1.VirtualMachine {
		vm := vmfixture.New(ns, name, containerDisk())
		vm.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
			}}},
		}}
		create(t, vmfixture.UserData(ns, name, cloudConfig), vm)
		return vm
	}
	inB, nowhere := zoned("in-b", "zone-b"), zoned("nowhere", "zone-x")
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, client.ObjectKeyFromObject(inB), &kubevirtv1.VirtualMachineInstance{}).Status.NodeName).To(Equal("infra-b"))
		g.Expect(get(g, client.ObjectKeyFromObject(nowhere), &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusUnschedulable))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

func TestCrashedInstanceIsReplacedUnderRunStrategyAlways(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "crash", containerDisk())
	create(t, vmfixture.UserData(ns, "crash", cloudConfig), vm)
	key := client.ObjectKeyFromObject(vm)
	var first types.UID
	g.Eventually(func(g Gomega) {
		vmi := get(g, key, &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		first = vmi.UID
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })

	g.Expect(stack.Hosts.Crash(key, "")).To(Succeed())
	g.Eventually(func(g Gomega) {
		vmi := get(g, key, &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.UID).NotTo(Equal(first))
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

func TestHaltedVirtualMachineStartsNoInstance(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "halted", containerDisk())
	vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
	create(t, vmfixture.UserData(ns, "halted", cloudConfig), vm)
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusStopped))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	g.Expect(gone(client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachineInstance{})()).To(BeTrue())
}

// TestMissingCloudInitSecretKeepsTheLauncherPodPending: virt-controller
// starts the instance whatever its cloud-init Secret, and mounts the
// Secret into the launcher Pod; the kubelet cannot mount a missing one,
// so the Pod stays Pending and the VM Starting until the Secret exists.
func TestMissingCloudInitSecretKeepsTheLauncherPodPending(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "nodata", containerDisk())
	create(t, vm)
	key := client.ObjectKeyFromObject(vm)
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusStarting))
		pods := launcherPods(g, ns)
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].Spec.NodeName).NotTo(BeEmpty())
		g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodPending))
		g.Expect(pods[0].Status.ContainerStatuses).To(ContainElement(HaveField("State.Waiting.Reason", "ContainerCreating")))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachineInstance{}).Status.Phase).NotTo(Equal(kubevirtv1.Running))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	create(t, vmfixture.UserData(ns, "nodata", cloudConfig))
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusRunning))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

func TestInstancetypeSizesTheInstance(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	it := &instancetypev1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "sim-u1-large"},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 4},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("8Gi")},
			GPUs:   []kubevirtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}},
		},
	}
	create(t, it)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), it) })
	vm := vmfixture.New(ns, "sized", containerDisk())
	vm.Spec.Template.Spec.Domain.CPU, vm.Spec.Template.Spec.Domain.Memory = nil, nil
	vm.Spec.Instancetype = &kubevirtv1.InstancetypeMatcher{Kind: "VirtualMachineClusterInstancetype", Name: it.Name}
	create(t, vmfixture.UserData(ns, "sized", cloudConfig), vm)
	g.Eventually(func(g Gomega) {
		vmi := get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.Spec.Domain.CPU.Sockets).To(Equal(uint32(4)))
		g.Expect(vmi.Spec.Domain.Memory.Guest.String()).To(Equal("8Gi"))
		g.Expect(vmi.Spec.Domain.Devices.GPUs).To(ConsistOf(HaveField("DeviceName", gpuResource)))
		// Only infra-a has the GPU the launcher Pod requests.
		g.Expect(vmi.Status.NodeName).To(Equal("infra-a"))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

// TestDeletingTheVirtualMachineLeavesNothing proves KubeVirt's finalizers
// are honoured (the instance shuts down before the VM goes) and that,
// with the garbage collector, the VM's DataVolumes and claims go too.
func TestDeletingTheVirtualMachineLeavesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "del", kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "del-root"}})
	dv := httpDataVolume(ns, "del-root")
	vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: dv.Name}, Spec: dv.Spec}}
	create(t, vmfixture.UserData(ns, "del", cloudConfig), vm)
	key := client.ObjectKeyFromObject(vm)
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachineInstance{}).Status.Phase).To(Equal(kubevirtv1.Running))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })

	g.Expect(env.Client.Delete(context.Background(), vm)).To(Succeed())
	// The VM waits for its instance.
	g.Eventually(func(g Gomega) {
		vm := get(g, key, &kubevirtv1.VirtualMachine{})
		g.Expect(vm.Status.PrintableStatus).To(BeElementOf(kubevirtv1.VirtualMachineStatusTerminating))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	dvKey := client.ObjectKey{Namespace: ns, Name: "del-root"}
	for _, c := range []struct {
		key client.ObjectKey
		obj client.Object
	}{
		{key, &kubevirtv1.VirtualMachineInstance{}},
		{key, &kubevirtv1.VirtualMachine{}},
		{dvKey, &cdiv1.DataVolume{}},
		{dvKey, &corev1.PersistentVolumeClaim{}},
	} {
		g.Eventually(gone(c.key, c.obj), timeout, poll).Should(BeTrue(), "%T %s is left", c.obj, c.key)
	}
}

// describe lists what a namespace holds, for a failure message.
func describe(ns string) string {
	return infra.Describe(context.Background(), env.Client, ns)
}

// TestVirtAPIRefusesAnInvalidVirtualMachine: virt-api's webhook refuses
// what the CRD schema lets through (a disk that names no volume), with
// KubeVirt's own message.
func TestVirtAPIRefusesAnInvalidVirtualMachine(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "invalid", containerDisk())
	vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks,
		kubevirtv1.Disk{Name: "data", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{}}})
	err := env.Client.Create(context.Background(), vm, strict)
	g.Expect(err).To(MatchError(ContainSubstring(`admission webhook "virtualmachine-validator.kubevirt.io" denied the request`)))
	g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec.domain.devices.disks[2].Name 'data' not found")))
}

// TestRunStrategyRerunOnFailureRestartsOnlyAFailedGuest: virt-controller
// starts another instance after a crash, not after a power-off.
func TestRunStrategyRerunOnFailureRestartsOnlyAFailedGuest(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "rerun", containerDisk())
	vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyRerunOnFailure)
	create(t, vmfixture.UserData(ns, "rerun", cloudConfig), vm)
	key := client.ObjectKeyFromObject(vm)
	running := func() types.UID {
		var uid types.UID
		g.Eventually(func(g Gomega) {
			vmi := get(g, key, &kubevirtv1.VirtualMachineInstance{})
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
			uid = vmi.UID
		}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
		return uid
	}
	first := running()
	g.Expect(stack.Hosts.Crash(key, "")).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, key, &kubevirtv1.VirtualMachineInstance{}).UID).NotTo(Equal(first))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	second := running()
	g.Expect(second).NotTo(Equal(first))

	g.Expect(stack.Hosts.PowerOff(key)).To(Succeed())
	// A guest that powered off is not rerun: virt-controller deletes its
	// instance and the VM is Stopped.
	g.Eventually(func(g Gomega) {
		g.Expect(gone(key, &kubevirtv1.VirtualMachineInstance{})()).To(BeTrue())
		g.Expect(get(g, key, &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusStopped))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	g.Consistently(gone(key, &kubevirtv1.VirtualMachineInstance{}), 2*time.Second, 200*time.Millisecond).Should(BeTrue())
}

// TestLostDiskFailsTheInstanceAndKubeVirtBootsANewOne: the node loses the
// launcher Pod and the guest with it; virt-controller fails the instance
// and the run strategy starts another one, on a blank container disk.
func TestLostDiskFailsTheInstanceAndKubeVirtBootsANewOne(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := vmfixture.New(ns, "lost", containerDisk())
	create(t, vmfixture.UserData(ns, "lost", cloudConfig), vm)
	key := client.ObjectKeyFromObject(vm)
	var first types.UID
	g.Eventually(func(g Gomega) {
		vmi := get(g, key, &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		first = vmi.UID
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
	g.Expect(stack.Hosts.LoseDisk(context.Background(), key)).To(Succeed())
	g.Eventually(func(g Gomega) {
		vmi := get(g, key, &kubevirtv1.VirtualMachineInstance{})
		g.Expect(vmi.UID).NotTo(Equal(first))
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

// TestUnpullableContainerDiskIsReportedErrImagePull: the kubelet cannot
// pull the container disk; virt-controller reports the VM ErrImagePull
// (or ImagePullBackOff between attempts).
func TestUnpullableContainerDiskIsReportedErrImagePull(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	stack.Hosts.FailPulls(fault.InNamespace(ns), 1)
	vm := vmfixture.New(ns, "nopull", containerDisk())
	create(t, vmfixture.UserData(ns, "nopull", cloudConfig), vm)
	g.Eventually(func(g Gomega) {
		g.Expect(get(g, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}).Status.PrintableStatus).To(BeElementOf(
			kubevirtv1.VirtualMachineStatusErrImagePull, kubevirtv1.VirtualMachineStatusImagePullBackOff))
	}, timeout, poll).Should(Succeed(), func() string { return describe(ns) })
}

// TestInfrastructureNodesCarryVirtHandlersHeartbeat: virt-handler, acting
// under KubeVirt's node restriction policy, labels and beats its node,
// and runs as a Pod on it as virt-controller expects.
func TestInfrastructureNodesCarryVirtHandlersHeartbeat(t *testing.T) {
	g := NewWithT(t)
	for _, name := range []string{"infra-a", "infra-b"} {
		n := get(g, client.ObjectKey{Name: name}, &corev1.Node{})
		g.Expect(n.Labels).To(HaveKeyWithValue(kubevirtv1.NodeSchedulable, "true"))
		g.Expect(n.Annotations).To(HaveKey(kubevirtv1.VirtHandlerHeartbeat))
		g.Expect(n.Spec.Taints).To(BeEmpty())
		pod := get(g, client.ObjectKey{Namespace: kubevirt.Namespace, Name: "virt-handler-" + name}, &corev1.Pod{})
		g.Expect(pod.Spec.NodeName).To(Equal(name))
	}
}

// TestPopulatorPathForACSIStorageClass: a DataVolume whose storage class
// a CSI driver serves is populated through a prime claim and a
// VolumeImportSource, and its volume is rebound to the DataVolume's claim.
func TestPopulatorPathForACSIStorageClass(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	ctx := context.Background()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-" + ns}, Provisioner: "csi.example.com"}
	driver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "csi.example.com"}}
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, driver))).To(Succeed())
	create(t, sc)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sc) })
	dv := httpDataVolume(ns, "populated")
	dv.Spec.Storage.StorageClassName = ptr.To(sc.Name)
	create(t, dv)
	key := client.ObjectKeyFromObject(dv)
	sawPrime := false
	g.Eventually(func(g Gomega) {
		pvc := get(g, key, &corev1.PersistentVolumeClaim{})
		g.Expect(pvc.Spec.DataSourceRef).NotTo(BeNil())
		g.Expect(pvc.Spec.DataSourceRef.Kind).To(Equal("VolumeImportSource"))
		if pvc.Status.Phase != corev1.ClaimBound {
			prime := &corev1.PersistentVolumeClaim{}
			if env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "prime-" + string(pvc.UID)}, prime) == nil {
				sawPrime = true
				g.Expect(metav1.IsControlledBy(prime, pvc)).To(BeTrue())
			}
		}
		g.Expect(get(g, key, &cdiv1.DataVolume{}).Status.Phase).To(Equal(cdiv1.Succeeded))
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	}, timeout, 20*time.Millisecond).Should(Succeed(), func() string { return describe(ns) })
	g.Expect(sawPrime).To(BeTrue(), "no prime claim was populated")
	src := get(g, client.ObjectKey{Namespace: ns, Name: "volume-import-source-" + string(get(g, key, &cdiv1.DataVolume{}).UID)}, &cdiv1.VolumeImportSource{})
	g.Expect(src.Spec.Source.HTTP).NotTo(BeNil())
	pvc := get(g, key, &corev1.PersistentVolumeClaim{})
	pv := get(g, client.ObjectKey{Name: pvc.Spec.VolumeName}, &corev1.PersistentVolume{})
	g.Expect(pv.Spec.ClaimRef.UID).To(Equal(pvc.UID))
	g.Eventually(gone(client.ObjectKey{Namespace: ns, Name: "prime-" + string(pvc.UID)}, &corev1.PersistentVolumeClaim{}), timeout, poll).Should(BeTrue(), func() string { return describe(ns) })
}

// TestImportClaimVolumeAndImporterPodFollowCDI: the claim carries CDI's
// import annotations and is bound to a provisioned volume, a hostPath
// directory (as kind's local-path provisioner makes) whose disk.img is the
// image, where CDI writes it and KubeVirt's virt-handler looks for it; an
// importer Pod mounts it while the import runs and is removed once it
// succeeded.
func TestImportClaimVolumeAndImporterPodFollowCDI(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	ctx := context.Background()
	stack.CDI.SlowImports(fault.InNamespace(ns), 1, 3*time.Second)
	dv := httpDataVolume(ns, "imported")
	create(t, dv)
	key := client.ObjectKeyFromObject(dv)
	sawImporter := false
	g.Eventually(func(g Gomega) {
		pod := &corev1.Pod{}
		if env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "importer-imported"}, pod) == nil && pod.Status.Phase == corev1.PodRunning {
			sawImporter = true
			g.Expect(pod.Spec.Volumes).To(ContainElement(HaveField("PersistentVolumeClaim.ClaimName", "imported")))
		}
		g.Expect(get(g, key, &cdiv1.DataVolume{}).Status.Phase).To(Equal(cdiv1.Succeeded))
	}, timeout, 20*time.Millisecond).Should(Succeed(), func() string { return describe(ns) })
	g.Expect(sawImporter).To(BeTrue(), "no importer Pod ran")
	pvc := get(g, key, &corev1.PersistentVolumeClaim{})
	g.Expect(pvc.Annotations).To(HaveKeyWithValue("cdi.kubevirt.io/storage.import.endpoint", dv.Spec.Source.HTTP.URL))
	g.Expect(pvc.Annotations).To(HaveKeyWithValue("cdi.kubevirt.io/storage.import.source", "http"))
	g.Expect(pvc.Spec.VolumeName).NotTo(BeEmpty())
	pv := get(g, client.ObjectKey{Name: pvc.Spec.VolumeName}, &corev1.PersistentVolume{})
	g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound))
	g.Expect(pv.Spec.HostPath).NotTo(BeNil())
	g.Expect(pv.Spec.HostPath.Type).To(Equal(ptr.To(corev1.HostPathDirectoryOrCreate)))
	g.Expect(cdisim.DiskImage(pv)).To(Equal(filepath.Join(pv.Spec.HostPath.Path, "disk.img")))
	g.Eventually(gone(client.ObjectKey{Namespace: ns, Name: "importer-imported"}, &corev1.Pod{}), timeout, poll).Should(BeTrue())
}
