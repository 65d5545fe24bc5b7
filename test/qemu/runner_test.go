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
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// The runner's controllers against a real apiserver with the KubeVirt and
// CDI CRDs, booting stand-in guests (a sleep process per guest, so no QEMU
// runs): instances, slots, image pulls, imports, crashes and deletion are
// reported as KubeVirt and CDI report them.

const workerDiskRef = "quay.io/cozystack/worker-disk:v1.36.3"

// fakeGuests start a sleep process in place of QEMU and record what each
// guest would have booted.
type fakeGuests struct {
	mu   sync.Mutex
	seen []VMOptions
}

func (f *fakeGuests) start(_ context.Context, opts VMOptions) (*VM, error) {
	f.mu.Lock()
	f.seen = append(f.seen, opts)
	f.mu.Unlock()
	vm := &VM{
		Name: opts.Name, ConsoleLog: filepath.Join(opts.Dir, "console.log"), DebugLog: filepath.Join(opts.Dir, "journal.log"),
		cmd: exec.Command("sleep", "600"), done: make(chan struct{}),
	}
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	vm.Started = time.Now()
	if err := vm.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		vm.err = vm.cmd.Wait()
		close(vm.done)
	}()
	return vm, nil
}

func (f *fakeGuests) booted(name string) []VMOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []VMOptions
	for _, o := range f.seen {
		if o.Name == name {
			out = append(out, o)
		}
	}
	return out
}

func TestRunnerFulfilsVirtualMachines(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme, err := harness.Scheme()
	g.Expect(err).NotTo(HaveOccurred())
	disk := testDisk(t)
	runner, err := NewRunner(RunnerOptions{
		Disk: disk, ContainerDisks: map[string]Disk{workerDiskRef: disk}, Dir: t.TempDir(),
		RestartDelay: 100 * time.Millisecond, ImporterRestartInterval: 200 * time.Millisecond,
	})
	g.Expect(err).NotTo(HaveOccurred())
	guests := &fakeGuests{}
	runner.startGuest = guests.start
	env, err := envtest.Start(ctx, envtest.Options{
		Scheme:           scheme,
		CRDPaths:         envtest.ExternalCRDPaths(),
		SetupControllers: func(ctx context.Context, mgr ctrl.Manager) error { return runner.SetupWithManager(ctx, mgr) },
	})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(env.Stop()).To(Succeed()) }()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "runner-"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	namespace := ns.Name

	t.Run("a VM with a mapped container disk boots a guest with its Secret as the seed", func(t *testing.T) {
		g := NewWithT(t)
		vm := createVM(g, c, namespace, "boot", containerDiskVolume(workerDiskRef), "#cloud-config\nboot: 1\n", false)
		vmi := waitForPhase(g, c, vm, kubevirtv1.Running)
		g.Expect(vmi.Status.Interfaces).To(ConsistOf(HaveField("IP", GuestAddress)))
		g.Expect(vmi.Status.NodeName).NotTo(BeEmpty())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.Ready).To(BeTrue())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusRunning))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		booted := guests.booted("boot")
		g.Expect(booted).To(HaveLen(1))
		g.Expect(booted[0].UserData).To(Equal([]byte("#cloud-config\nboot: 1\n")), "the user data is attached unchanged")
		g.Expect(booted[0].Seed).To(Equal(NoCloud))
		g.Expect(booted[0].Disk).To(Equal(disk))
		g.Expect(booted[0].RootImage).To(BeEmpty(), "a container disk boots copy-on-write")
		g.Expect(runner.Guests()).To(ContainElement(And(HaveField("VM", client.ObjectKeyFromObject(vm)), HaveField("Instance", vmi.UID), HaveField("Exited", BeZero()))))
		deleteVM(g, c, vm)
	})

	t.Run("a VM created before its cloud-init Secret starts once the Secret exists", func(t *testing.T) {
		g := NewWithT(t)
		secret, vm := newVM(namespace, "late-secret", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		g.Expect(c.Create(ctx, vm)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusStopped))
			g.Expect(vm.Status.Conditions[0].Message).To(ContainSubstring("late-secret-userdata"))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Expect(guests.booted("late-secret")).To(BeEmpty())
		g.Expect(c.Create(ctx, secret)).To(Succeed())
		waitForPhase(g, c, vm, kubevirtv1.Running)
		deleteVM(g, c, vm)
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
		waitForPhase(g, c, vm, kubevirtv1.Running)
		booted := guests.booted("tampered")
		g.Expect(booted).To(HaveLen(1))
		g.Expect(string(booted[0].UserData)).To(Equal("#cloud-config\npin: bad\n"))
		g.Expect(booted[0].Seed).To(Equal(ConfigDrive))
		deleteVM(g, c, vm)
	})

	t.Run("an unmapped container disk is an image pull failure and boots nothing", func(t *testing.T) {
		g := NewWithT(t)
		vm := createVM(g, c, namespace, "unmapped", containerDiskVolume("quay.io/cozystack/unknown:v1"), "#cloud-config\n", false)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusErrImagePull))
			g.Expect(vm.Status.Conditions).To(ContainElement(And(
				HaveField("Type", kubevirtv1.VirtualMachineFailure),
				HaveField("Message", ContainSubstring("quay.io/cozystack/unknown:v1")))))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Expect(guests.booted("unmapped")).To(BeEmpty())
		deleteVM(g, c, vm)
	})

	t.Run("a killed guest is a Failed instance that run strategy Always replaces", func(t *testing.T) {
		g := NewWithT(t)
		vm := createVM(g, c, namespace, "crash", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		first := waitForPhase(g, c, vm, kubevirtv1.Running)
		g.Expect(runner.Kill(client.ObjectKeyFromObject(vm))).To(Succeed())
		g.Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vmi)).To(Succeed())
			g.Expect(vmi.UID).NotTo(Equal(first.UID), "KubeVirt replaced the failed instance")
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		var exited Guest
		for _, gu := range runner.Guests() {
			if gu.Instance == first.UID {
				exited = gu
			}
		}
		g.Expect(exited.Exited).NotTo(BeZero())
		g.Expect(exited.ExitError).To(ContainSubstring("killed"))
		g.Expect(guests.booted("crash")).To(HaveLen(2))
		deleteVM(g, c, vm)
		g.Expect(runner.Kill(client.ObjectKeyFromObject(vm))).To(MatchError(ContainSubstring("no running guest")))
	})

	t.Run("instances beyond MaxGuests wait unschedulable and start in order as guests stop", func(t *testing.T) {
		g := NewWithT(t)
		a := createVM(g, c, namespace, "slot-a", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		waitForPhase(g, c, a, kubevirtv1.Running)
		b := createVM(g, c, namespace, "slot-b", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		waitForPhase(g, c, b, kubevirtv1.Running)
		third := createVM(g, c, namespace, "slot-c", containerDiskVolume(workerDiskRef), "#cloud-config\n", false)
		waitForPhase(g, c, third, kubevirtv1.Scheduling)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(third), third)).To(Succeed())
			g.Expect(third.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusUnschedulable))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Consistently(func() int { return runner.Running() }, time.Second, 100*time.Millisecond).Should(Equal(2))
		deleteVM(g, c, a)
		waitForPhase(g, c, third, kubevirtv1.Running)
		g.Expect(runner.Running()).To(Equal(2))
		deleteVM(g, c, b)
		deleteVM(g, c, third)
		g.Expect(runner.Running()).To(Equal(0))
	})

	t.Run("a DataVolume is imported for real from ImageURL and the guest boots the volume", func(t *testing.T) {
		g := NewWithT(t)
		dv := createDataVolume(g, c, namespace, "imported-root", runner.ImageURL(), "16Mi")
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dv), dv)).To(Succeed())
			g.Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
			g.Expect(dv.Status.Progress).To(Equal(cdiv1.DataVolumeProgress("100.0%")))
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dv), pvc)).To(Succeed())
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
		g.Expect(metav1.IsControlledBy(pvc, dv)).To(BeTrue())

		vm := createVM(g, c, namespace, "imported", dataVolumeVolume(dv.Name), "#cloud-config\n", false)
		waitForPhase(g, c, vm, kubevirtv1.Running)
		booted := guests.booted("imported")
		g.Expect(booted).To(HaveLen(1))
		g.Expect(booted[0].RootImage).To(HaveSuffix(".img"))
		want, err := os.ReadFile(disk.Image())
		g.Expect(err).NotTo(HaveOccurred())
		got, err := os.ReadFile(booted[0].RootImage)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bytes.Equal(got, want)).To(BeTrue(), "the volume is the served image")
		deleteVM(g, c, vm)
		g.Expect(c.Delete(ctx, dv)).To(Succeed())
		g.Eventually(func() string { return booted[0].RootImage }).ShouldNot(BeAnExistingFile(), "a deleted DataVolume's volume is removed")
	})

	t.Run("a DataVolume whose source answers 404 keeps restarting its importer and the VM shows DataVolumeError", func(t *testing.T) {
		g := NewWithT(t)
		dv := createDataVolume(g, c, namespace, "missing-root", runner.ImageURL()+".absent", "16Mi")
		vm := createVM(g, c, namespace, "missing", dataVolumeVolume(dv.Name), "#cloud-config\n", false)
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dv), dv)).To(Succeed())
			g.Expect(dv.Status.Phase).To(Equal(cdiv1.ImportInProgress))
			g.Expect(dv.Status.RestartCount).To(BeNumerically(">=", 2))
			g.Expect(dv.Status.Conditions).To(ContainElement(And(
				HaveField("Type", cdiv1.DataVolumeRunning), HaveField("Reason", importErrorReason),
				HaveField("Message", "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"))))
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusDataVolumeError))
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Expect(guests.booted("missing")).To(BeEmpty())
		deleteVM(g, c, vm)
		g.Expect(c.Delete(ctx, dv)).To(Succeed())
	})
}

func containerDiskVolume(ref string) kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: ref}}
}

func dataVolumeVolume(name string) kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: name}}
}

// createVM creates a VM shaped as the infrastructure provider renders one,
// with its user data Secret.
func createVM(g Gomega, c client.Client, namespace, name string, root kubevirtv1.VolumeSource, userData string, configDrive bool) *kubevirtv1.VirtualMachine {
	secret, vm := newVM(namespace, name, root, userData, configDrive)
	g.Expect(c.Create(context.Background(), secret)).To(Succeed())
	g.Expect(c.Create(context.Background(), vm)).To(Succeed())
	return vm
}

// newVM returns a VM and its user data Secret, not yet created.
func newVM(namespace, name string, root kubevirtv1.VolumeSource, userData string, configDrive bool) (*corev1.Secret, *kubevirtv1.VirtualMachine) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-userdata"}, Data: map[string][]byte{"userdata": []byte(userData)}}
	cloudInit := kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: secret.Name}}}
	if configDrive {
		cloudInit = kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: secret.Name}}}
	}
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{
					Disks: []kubevirtv1.Disk{
						{Name: "root", BootOrder: ptr.To[uint](1), DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{}}},
						{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{}}},
					},
					Interfaces: []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}}},
				}},
				Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
				Volumes:  []kubevirtv1.Volume{{Name: "root", VolumeSource: root}, {Name: "cloudinit", VolumeSource: cloudInit}},
			}},
		},
	}
	return secret, vm
}

func createDataVolume(g Gomega, c client.Client, namespace, name, url, size string) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
		},
	}
	g.Expect(c.Create(context.Background(), dv)).To(Succeed())
	return dv
}

func waitForPhase(g Gomega, c client.Client, vm *kubevirtv1.VirtualMachine, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(vm), vmi)).To(Succeed())
		g.Expect(vmi.Status.Phase).To(Equal(phase))
	}, 20*time.Second, 50*time.Millisecond).Should(Succeed(), fmt.Sprintf("VirtualMachineInstance %s reaches %s", vm.Name, phase))
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
	}, 20*time.Second, 50*time.Millisecond).Should(Succeed(), "VirtualMachine %s and its instance are deleted", vm.Name)
}
