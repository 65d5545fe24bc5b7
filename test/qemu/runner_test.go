//go:build !qemu

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

package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/infra"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	"github.com/cozystack/cluster-api-workers/test/vmfixture"
)

// The runner as the infrastructure cluster's VM backend: KubeVirt's real
// virt-api and virt-controller with the node-side and CDI stand-ins
// (test/infra) on envtest, configured by the runner, booting stand-in
// guests (a sleep process per guest, so no QEMU runs). What virt-controller
// creates is what the runner boots; imports run for real. The real-guest
// suite (build tag qemu) runs the same path with QEMU and leaves this out,
// so that a second KubeVirt control plane does not compete with its guests
// for the host's cores.

const (
	runnerTimeout = 60 * time.Second
	runnerPoll    = 50 * time.Millisecond
)

func TestRunnerBootsWhatKubeVirtCreates(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl.SetLogger(logr.Discard())
	scheme := envtest.DefaultScheme()
	g.Expect(infra.AddToScheme(scheme)).To(Succeed())
	disk := testDisk(t)
	runner, err := NewRunner(t.Context(), RunnerOptions{Disk: disk, ContainerDisks: map[string]Disk{workerDiskRef: disk}, Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	defer runner.Stop()
	guests := &fakeGuests{}
	runner.startGuest = guests.start

	env, err := envtest.Start(ctx, envtest.Options{Scheme: scheme, CRDPaths: envtest.ExternalCRDPaths()})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(env.Stop()).To(Succeed()) }()
	kcm, err := env.StartControllerManager(envtest.ManagementControllers...)
	g.Expect(err).NotTo(HaveOccurred())
	defer kcm.Stop()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	g.Expect(err).NotTo(HaveOccurred())
	opts := infra.Options{}
	runner.Configure(&opts)
	stack, err := infra.Start(ctx, env, mgr, opts)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = stack.Stop() }()
	mgrCtx, stopManager := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = mgr.Start(mgrCtx)
	}()
	// Watches still open when the apiserver stops delay its shutdown.
	defer func() { stopManager(); <-stopped }()

	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "runner-"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	namespace := ns.Name
	describe := func() string { return infra.Describe(context.Background(), c, namespace) }

	t.Run("a VM with a mapped container disk boots a guest on the guest node with its Secret as the seed", func(t *testing.T) {
		g := NewWithT(t)
		vm := createVM(g, c, namespace, "boot", containerDiskVolume(workerDiskRef), "#cloud-config\nboot: 1\n", false)
		vmi := waitForPhase(g, c, vm, kubevirtv1.Running, describe)
		g.Expect(vmi.Status.Interfaces).To(ConsistOf(And(HaveField("Name", "default"), HaveField("IP", GuestAddress))))
		g.Expect(vmi.Status.NodeName).To(Equal(GuestNode))
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.Ready).To(BeTrue())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusRunning))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		booted := guests.booted("boot")
		g.Expect(booted).To(HaveLen(1))
		g.Expect(booted[0].UserData).To(Equal([]byte("#cloud-config\nboot: 1\n")), "the user data is attached unchanged")
		g.Expect(booted[0].Seed).To(Equal(NoCloud))
		g.Expect(booted[0].Disk).To(Equal(disk))
		g.Expect(booted[0].RootImage).To(BeEmpty(), "a container disk boots copy-on-write")
		g.Expect(runner.Guests()).To(ContainElement(And(
			HaveField("VM", client.ObjectKeyFromObject(vm)), HaveField("Instance", vmi.UID),
			HaveField("RootImage", disk.Image()), HaveField("Exited", BeZero()))))
		deleteVM(g, c, vm)
		// Deleting the VM shuts the guest down: a power-off, not a crash.
		g.Eventually(guestRecord(runner, vmi.UID), runnerTimeout, runnerPoll).Should(And(HaveField("Exited", Not(BeZero())), HaveField("ExitError", "")))
	})

	t.Run("Tamper changes the bootstrap data before the seed is written, ConfigDrive is kept", func(t *testing.T) {
		g := NewWithT(t)
		runner.Tamper(func(vm client.ObjectKey, data []byte) []byte {
			if vm.Name != "tampered" {
				return data
			}
			return bytes.ReplaceAll(data, []byte("good"), []byte("bad"))
		})
		defer runner.Tamper(nil)
		vm := createVM(g, c, namespace, "tampered", containerDiskVolume(workerDiskRef), "#cloud-config\npin: good\n", true)
		waitForPhase(g, c, vm, kubevirtv1.Running, describe)
		booted := guests.booted("tampered")
		g.Expect(booted).To(HaveLen(1))
		g.Expect(string(booted[0].UserData)).To(Equal("#cloud-config\npin: bad\n"))
		g.Expect(booted[0].Seed).To(Equal(ConfigDrive))
		deleteVM(g, c, vm)
	})

	t.Run("an unmapped container disk cannot be pulled and boots nothing", func(t *testing.T) {
		g := NewWithT(t)
		vm := createVM(g, c, namespace, "unmapped", containerDiskVolume("quay.io/cozystack/unknown:v1"), "#cloud-config\n", false)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.PrintableStatus).To(BeElementOf(kubevirtv1.VirtualMachineStatusErrImagePull, kubevirtv1.VirtualMachineStatusImagePullBackOff))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		g.Expect(guests.booted("unmapped")).To(BeEmpty())
		deleteVM(g, c, vm)
	})

	t.Run("a killed guest fails its instance and virt-controller starts another under run strategy Always", func(t *testing.T) {
		g := NewWithT(t)
		vm := createVM(g, c, namespace, "crash", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		first := waitForPhase(g, c, vm, kubevirtv1.Running, describe)
		g.Expect(runner.Kill(client.ObjectKeyFromObject(vm))).To(Succeed())
		g.Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vmi)).To(Succeed())
			g.Expect(vmi.UID).NotTo(Equal(first.UID), "KubeVirt replaced the failed instance")
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		g.Eventually(guestRecord(runner, first.UID), runnerTimeout, runnerPoll).Should(And(HaveField("Exited", Not(BeZero())), HaveField("ExitError", ContainSubstring("killed"))))
		g.Expect(guests.booted("crash")).To(HaveLen(2))
		deleteVM(g, c, vm)
		g.Expect(runner.Kill(client.ObjectKeyFromObject(vm))).To(MatchError(ContainSubstring("no running guest")))
	})

	t.Run("launcher Pods beyond MaxGuests stay unschedulable while imports still run, and start as guests stop", func(t *testing.T) {
		g := NewWithT(t)
		a := createVM(g, c, namespace, "slot-a", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		waitForPhase(g, c, a, kubevirtv1.Running, describe)
		b := createVM(g, c, namespace, "slot-b", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		waitForPhase(g, c, b, kubevirtv1.Running, describe)
		third := createVM(g, c, namespace, "slot-c", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(third), third)).To(Succeed())
			g.Expect(third.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusUnschedulable))
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(third), vmi)).To(Succeed())
			g.Expect(vmi.Status.Conditions).To(ContainElement(And(
				HaveField("Type", kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)),
				HaveField("Reason", corev1.PodReasonUnschedulable), HaveField("Message", ContainSubstring("Too many pods")))))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		// CDI's importer Pods go to the storage node: a full guest node
		// does not hold an import up.
		dv := createDataVolume(g, c, namespace, "while-full", runner.ImageURL(), "16Mi")
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dv), dv)).To(Succeed())
			g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		g.Expect(runner.Running()).To(Equal(2))
		g.Expect(guests.booted("slot-c")).To(BeEmpty())
		deleteVM(g, c, a)
		waitForPhase(g, c, third, kubevirtv1.Running, describe)
		g.Expect(runner.Running()).To(Equal(2))
		deleteVM(g, c, b)
		deleteVM(g, c, third)
		g.Expect(c.Delete(ctx, dv)).To(Succeed())
		g.Eventually(runner.Running, runnerTimeout, runnerPoll).Should(BeZero())
	})

	t.Run("a DataVolume template is imported for real from ImageURL and the guest boots its volume", func(t *testing.T) {
		g := NewWithT(t)
		vm := newVMWithDataVolumeTemplate(namespace, "imported", runner.ImageURL(), "16Mi")
		secret := vmfixture.UserData(namespace, vm.Name, []byte("#cloud-config\n"))
		g.Expect(c.Create(ctx, secret)).To(Succeed())
		g.Expect(c.Create(ctx, vm)).To(Succeed())
		dv := &cdiv1.DataVolume{}
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "imported-root"}, dv)).To(Succeed())
			g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
			g.Expect(dv.Status.Progress).To(Equal(cdiv1.DataVolumeProgress("100.0%")))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		waitForPhase(g, c, vm, kubevirtv1.Running, describe)
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dv), pvc)).To(Succeed())
		pv := &corev1.PersistentVolume{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
		booted := guests.booted("imported")
		g.Expect(booted).To(HaveLen(1))
		g.Expect(booted[0].RootImage).To(Equal(cdisim.DiskImage(pv)), "the guest boots its claim's volume")
		g.Expect(booted[0].RootImage).To(HavePrefix(runner.volumeDir() + "/"))
		want, err := os.ReadFile(disk.Image())
		g.Expect(err).NotTo(HaveOccurred())
		got, err := os.ReadFile(booted[0].RootImage)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bytes.Equal(got, want)).To(BeTrue(), "the volume is the served image")
		deleteVM(g, c, vm)
		g.Eventually(func() string { return booted[0].RootImage }, runnerTimeout, runnerPoll).
			ShouldNot(BeAnExistingFile(), "the volume of a deleted VM's DataVolume is removed")
	})

	t.Run("a DataVolume whose source answers 404 keeps restarting its importer with CDI's error and the VM never boots", func(t *testing.T) {
		g := NewWithT(t)
		dv := createDataVolume(g, c, namespace, "missing-root", runner.ImageURL()+".absent", "16Mi")
		vm := createVM(g, c, namespace, "missing", kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: dv.Name}}, "#cloud-config\n", false)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dv), dv)).To(Succeed())
			g.Expect(dv.Status.Phase).To(Equal(cdiv1.ImportInProgress))
			g.Expect(dv.Status.RestartCount).To(BeNumerically(">=", 2))
			g.Expect(dv.Status.Conditions).To(ContainElement(And(
				HaveField("Type", cdiv1.DataVolumeRunning), HaveField("Reason", "Error"),
				HaveField("Message", "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"))))
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusDataVolumeError))
		}, runnerTimeout, runnerPoll).Should(Succeed(), describe)
		g.Expect(guests.booted("missing")).To(BeEmpty())
		deleteVM(g, c, vm)
		g.Expect(c.Delete(ctx, dv)).To(Succeed())
	})
}

// guestRecord polls the runner's record of an instance's guest (its exit
// is recorded just after QEMU exits).
func guestRecord(r *Runner, instance types.UID) func() Guest {
	return func() Guest {
		for _, g := range r.Guests() {
			if g.Instance == instance {
				return g
			}
		}
		return Guest{}
	}
}

// createVM creates a VM shaped as the infrastructure provider renders one,
// with its user data Secret.
func createVM(g Gomega, c client.Client, namespace, name string, root kubevirtv1.VolumeSource, userData string, configDrive bool) *kubevirtv1.VirtualMachine {
	secret, vm := vmfixture.UserData(namespace, name, []byte(userData)), newVM(namespace, name, root)
	if configDrive {
		vmfixture.ConfigDrive(vm)
	}
	g.Expect(c.Create(context.Background(), secret)).To(Succeed())
	g.Expect(c.Create(context.Background(), vm)).To(Succeed())
	return vm
}

// newVM is vmfixture's VM, not yet created, asking for the memory the
// runner gives every guest, so that it fits the guest node's places.
func newVM(namespace, name string, root kubevirtv1.VolumeSource) *kubevirtv1.VirtualMachine {
	vm := vmfixture.New(namespace, name, root)
	vm.Spec.Template.Spec.Domain.Memory.Guest = ptr.To(resource.MustParse("1536Mi"))
	return vm
}

// newVMWithDataVolumeTemplate is a VM whose root disk is a DataVolume
// template (<name>-root) imported over HTTP, as the infrastructure provider
// renders an httpImport image.
func newVMWithDataVolumeTemplate(namespace, name, url, size string) *kubevirtv1.VirtualMachine {
	dv := dataVolume(namespace, name+"-root", url, size)
	vm := newVM(namespace, name, kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: dv.Name}})
	vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: dv.Name}, Spec: dv.Spec}}
	return vm
}

func dataVolume(namespace, name, url, size string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
		},
	}
}

func createDataVolume(g Gomega, c client.Client, namespace, name, url, size string) *cdiv1.DataVolume {
	dv := dataVolume(namespace, name, url, size)
	g.Expect(c.Create(context.Background(), dv)).To(Succeed())
	return dv
}

func waitForPhase(g Gomega, c client.Client, vm *kubevirtv1.VirtualMachine, phase kubevirtv1.VirtualMachineInstancePhase, describe func() string) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(vm), vmi)).To(Succeed())
		g.Expect(vmi.Status.Phase).To(Equal(phase))
	}, runnerTimeout, runnerPoll).Should(Succeed(), func() string {
		return fmt.Sprintf("VirtualMachineInstance %s reaches %s\n%s", vm.Name, phase, describe())
	})
	return vmi
}

// deleteVM deletes a VM and waits until KubeVirt's finalizers let it go:
// its instance deleted and its guest stopped.
func deleteVM(g Gomega, c client.Client, vm *kubevirtv1.VirtualMachine) {
	ctx := context.Background()
	g.Expect(c.Delete(ctx, vm)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{}))).To(BeTrue())
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachineInstance{}))).To(BeTrue())
	}, runnerTimeout, runnerPoll).Should(Succeed(), "VirtualMachine %s and its instance are deleted", vm.Name)
}
