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
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/process"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

// The runner's hypervisor, image pulls and nodes without QEMU or an
// apiserver: objects come from a fake client, guests are sleep processes.

// workerDiskRef is a containerDisk reference the tests map to a disk.
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
	return sleepVM(opts.Name, opts.Dir, "600")
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

// sleepVM is a VM whose process sleeps for the given time (sleep(1)'s
// argument) and exits 0, as a guest that powers itself off.
func sleepVM(name, dir, duration string) (*VM, error) {
	vm := &VM{Name: name, ConsoleLog: filepath.Join(dir, "console.log"), DebugLog: filepath.Join(dir, "journal.log"), Started: time.Now()}
	//nolint:gosec,noctx // sleep, standing in for QEMU, which runs until Kill.
	sleep, err := process.Start("sleep for "+name, filepath.Join(dir, name+"-qemu.log"), exec.Command("sleep", duration))
	if err != nil {
		return nil, err
	}
	vm.qemu = sleep
	return vm, nil
}

func TestContainerDiskMapping(t *testing.T) {
	worker, other := Disk{Dir: "/disks/worker"}, Disk{Dir: "/disks/other"}
	r := &Runner{opts: RunnerOptions{ContainerDisks: map[string]Disk{
		"quay.io/kairos/worker:v1.36.3": worker,
		"busybox":                       other,
	}}}
	for _, tc := range []struct {
		name, ref string
		want      Disk
		mapped    bool
	}{
		{"the exact reference maps", "quay.io/kairos/worker:v1.36.3", worker, true},
		{"a Docker Hub short name maps to its full form", "docker.io/library/busybox:latest", other, true},
		{"an untagged reference is the latest tag", "busybox:latest", other, true},
		{"another tag does not map", "quay.io/kairos/worker:v1.35.0", Disk{}, false},
		{"another registry does not map", "ghcr.io/kairos/worker:v1.36.3", Disk{}, false},
		{"an invalid reference does not map", "Not A Reference", Disk{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := r.containerDisk(tc.ref)
			g.Expect(ok).To(Equal(tc.mapped))
			g.Expect(got).To(Equal(tc.want))
			// The kubelet pulls exactly what is mapped.
			if tc.mapped {
				g.Expect(r.pull(tc.ref)).To(Succeed())
			} else {
				g.Expect(r.pull(tc.ref)).To(MatchError(ContainSubstring("no local disk is mapped to this reference")))
			}
		})
	}
	t.Run("nothing else can be pulled, the launcher's own images included", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(r.pull("quay.io/kubevirt/virt-launcher:v1.7.0")).To(MatchError(HavePrefix(`failed to pull and unpack image "quay.io/kubevirt/virt-launcher:v1.7.0"`)))
	})
}

func TestNewRunnerRejectsAnInvalidContainerDiskReference(t *testing.T) {
	g := NewWithT(t)
	_, err := NewRunner(t.Context(), RunnerOptions{Disk: testDisk(t), ContainerDisks: map[string]Disk{"not a reference": {}}})
	g.Expect(err).To(MatchError(ContainSubstring("RunnerOptions.ContainerDisks")))
	_, err = NewRunner(t.Context(), RunnerOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("RunnerOptions.Disk")))
}

// TestConfigure: the runner hands the infrastructure cluster its
// hypervisor, pulls, importer, volume directory and nodes; the guest node
// admits MaxGuests launcher Pods besides virt-handler's, the storage node,
// first in name order, takes CDI's Pods and no launcher Pod.
func TestConfigure(t *testing.T) {
	g := NewWithT(t)
	r, err := NewRunner(t.Context(), RunnerOptions{Disk: testDisk(t), MaxGuests: 3, Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	defer r.Stop()
	opts := infra.Options{Hosts: kubevirtsim.Options{Nodes: []kubevirtsim.InfraNode{{Name: "elsewhere"}}}}
	r.Configure(&opts)
	g.Expect(opts.Hosts.Hypervisor).To(BeAssignableToTypeOf(&hypervisor{}))
	g.Expect(opts.Hosts.Pull).NotTo(BeNil())
	g.Expect(opts.CDI.Importer).To(Equal(cdisim.FileImporter{}))
	g.Expect(opts.CDI.VolumeDir).To(Equal(filepath.Join(r.Dir(), "volumes")))
	g.Expect(opts.Hosts.Nodes).To(HaveLen(2))
	storage, guests := opts.Hosts.Nodes[0], opts.Hosts.Nodes[1]
	g.Expect(storage.Name < guests.Name).To(BeTrue(), "the scheduler tries the storage node first")
	g.Expect(storage.Name).To(Equal(StorageNode))
	g.Expect(storage.Allocatable).To(HaveKeyWithValue(corev1.ResourceName("devices.kubevirt.io/tun"), resource.MustParse("0")))
	g.Expect(storage.Allocatable).NotTo(HaveKey(corev1.ResourcePods))
	g.Expect(guests.Name).To(Equal(GuestNode))
	g.Expect(guests.Allocatable).To(HaveKeyWithValue(corev1.ResourcePods, resource.MustParse("4")), "three guests and virt-handler")
}

func TestBootVolumes(t *testing.T) {
	cloudInit := kubevirtv1.Volume{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{}}}
	container := kubevirtv1.Volume{Name: "root", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "x"}}}
	data := kubevirtv1.Volume{Name: "data", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "dv"}}}
	for _, tc := range []struct {
		name               string
		disks              []kubevirtv1.Disk
		volumes            []kubevirtv1.Volume
		wantRoot, wantInit string
	}{
		{"the disk of boot order 1 is the root", []kubevirtv1.Disk{{Name: "data"}, {Name: "root", BootOrder: ptr.To[uint](1)}, {Name: "cloudinit"}},
			[]kubevirtv1.Volume{container, data, cloudInit}, "root", "cloudinit"},
		{"without a boot order the first disk is the root", []kubevirtv1.Disk{{Name: "data"}, {Name: "root"}, {Name: "cloudinit"}},
			[]kubevirtv1.Volume{container, data, cloudInit}, "data", "cloudinit"},
		{"the cloud-init disk is never the root", []kubevirtv1.Disk{{Name: "cloudinit"}, {Name: "root"}},
			[]kubevirtv1.Volume{cloudInit, container}, "root", "cloudinit"},
		{"no disks, no root", nil, []kubevirtv1.Volume{cloudInit}, "", "cloudinit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			vmi := &kubevirtv1.VirtualMachineInstance{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{Disks: tc.disks}}, Volumes: tc.volumes,
			}}
			root, init := bootVolumes(vmi)
			g.Expect(nameOf(root)).To(Equal(tc.wantRoot))
			g.Expect(nameOf(init)).To(Equal(tc.wantInit))
		})
	}
}

func nameOf(v *kubevirtv1.Volume) string {
	if v == nil {
		return ""
	}
	return v.Name
}

// instance is a VirtualMachineInstance as virt-controller creates it from
// a VM the infrastructure provider renders: a root disk of boot order 1, a
// cloud-init disk and a pod network interface.
func instance(root, cloudInit kubevirtv1.VolumeSource) *kubevirtv1.VirtualMachineInstance {
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "vmi-uid"},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{
				Disks: []kubevirtv1.Disk{
					{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{}}},
					{Name: "root", BootOrder: ptr.To[uint](1), DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
				},
				Interfaces: []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}}},
			}},
			Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
			Volumes:  []kubevirtv1.Volume{{Name: "cloudinit", VolumeSource: cloudInit}, {Name: "root", VolumeSource: root}},
		},
	}
}

// withRootBus puts the instance's root disk on bus.
func withRootBus(vmi *kubevirtv1.VirtualMachineInstance, bus kubevirtv1.DiskBus) *kubevirtv1.VirtualMachineInstance {
	for i := range vmi.Spec.Domain.Devices.Disks {
		if vmi.Spec.Domain.Devices.Disks[i].Name == "root" {
			vmi.Spec.Domain.Devices.Disks[i].Disk.Bus = bus
		}
	}
	return vmi
}

func containerDiskVolume(ref string) kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: ref}}
}

func noCloudSecret(name string) kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: name}}}
}

// boundClaim is a claim bound to a hostPath volume, the directory dir, as
// CDI's stand-in provisions them.
func boundClaim(name, dir string) []client.Object {
	return []client.Object{
		&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pvc-" + name},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
		},
		&corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + name},
			Spec:       corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}},
		},
	}
}

func fakeReader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&corev1.PersistentVolumeClaim{}).Build()
}

// TestPlanBoot: what an instance boots is resolved through the cluster's
// objects as virt-launcher finds them: a container disk through the
// mapping, a DataVolume or claim through its PersistentVolume's file, the
// user data from the cloud-init Secret's userdata or userData key, or
// inline.
func TestPlanBoot(t *testing.T) {
	worker := testDisk(t)
	volumeDir := t.TempDir()
	volume := filepath.Join(volumeDir, "disk.img")
	if err := os.WriteFile(volume, []byte("imported"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Runner{opts: RunnerOptions{Disk: Disk{Dir: "/disks/default"}, ContainerDisks: map[string]Disk{workerDiskRef: worker}}}
	secret := func(key string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm-userdata"}, Data: map[string][]byte{key: []byte("#cloud-config\n")}}
	}
	objects := append(boundClaim("vm-root", volumeDir), secret("userdata"))
	for _, tc := range []struct {
		name      string
		vmi       *kubevirtv1.VirtualMachineInstance
		objects   []client.Object
		want      bootPlan
		wantError string
	}{
		{
			name:    "a mapped container disk boots its disk copy-on-write with the Secret as a NoCloud seed",
			vmi:     instance(containerDiskVolume(workerDiskRef), noCloudSecret("vm-userdata")),
			objects: objects,
			want:    bootPlan{disk: worker, rootBus: "virtio", seed: NoCloud, userData: []byte("#cloud-config\n")},
		},
		{
			name:    "a DataVolume boots the disk.img of its claim's volume",
			vmi:     instance(kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "vm-root"}}, noCloudSecret("vm-userdata")),
			objects: objects,
			want:    bootPlan{disk: r.opts.Disk, rootImage: volume, rootBus: "virtio", seed: NoCloud, userData: []byte("#cloud-config\n")},
		},
		{
			name: "a claim boots its volume's disk.img, with a ConfigDrive seed from the Secret's userData key",
			vmi: instance(kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "vm-root"},
			}}, kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: "vm-userdata"}}}),
			objects: append(boundClaim("vm-root", volumeDir), secret("userData")),
			want:    bootPlan{disk: r.opts.Disk, rootImage: volume, rootBus: "virtio", seed: ConfigDrive, userData: []byte("#cloud-config\n")},
		},
		{
			name: "inline user data is used as it is",
			vmi:  instance(containerDiskVolume(workerDiskRef), kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: "#cloud-config\ninline: true\n"}}),
			want: bootPlan{disk: worker, rootBus: "virtio", seed: NoCloud, userData: []byte("#cloud-config\ninline: true\n")},
		},
		{
			name:    "a SATA root disk boots on the AHCI controller",
			vmi:     withRootBus(instance(containerDiskVolume(workerDiskRef), noCloudSecret("vm-userdata")), kubevirtv1.DiskBusSATA),
			objects: objects,
			want:    bootPlan{disk: worker, rootBus: "sata", seed: NoCloud, userData: []byte("#cloud-config\n")},
		},
		{
			name:      "a root disk on a bus QEMU guests here do not boot cannot boot",
			vmi:       withRootBus(instance(containerDiskVolume(workerDiskRef), noCloudSecret("vm-userdata")), kubevirtv1.DiskBusUSB),
			objects:   objects,
			wantError: `disk root: bus "usb": QEMU guests here boot virtio, sata and scsi disks`,
		},
		{
			name:      "a DataVolume whose claim does not exist cannot boot",
			vmi:       instance(kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "absent"}}, noCloudSecret("vm-userdata")),
			objects:   objects,
			wantError: "volume root: reading claim absent",
		},
		{
			name: "an unbound claim cannot boot",
			vmi:  instance(kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "vm-root"}}, noCloudSecret("vm-userdata")),
			objects: []client.Object{secret("userdata"), &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm-root"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
			}},
			wantError: "claim vm-root is not bound",
		},
		{
			name:      "a volume whose disk.img was never written cannot boot",
			vmi:       instance(kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "vm-root"}}, noCloudSecret("vm-userdata")),
			objects:   append(boundClaim("vm-root", t.TempDir()), secret("userdata")),
			wantError: "volume pvc-vm-root of claim vm-root has no data",
		},
		{
			name:      "an unmapped container disk cannot boot",
			vmi:       instance(containerDiskVolume("quay.io/cozystack/unknown:v1"), noCloudSecret("vm-userdata")),
			objects:   objects,
			wantError: `no local disk is mapped to container disk "quay.io/cozystack/unknown:v1"`,
		},
		{
			name:      "another root volume kind cannot boot",
			vmi:       instance(kubevirtv1.VolumeSource{EmptyDisk: &kubevirtv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}, noCloudSecret("vm-userdata")),
			objects:   objects,
			wantError: "boots containerDisk, dataVolume and persistentVolumeClaim root disks only",
		},
		{
			name:      "a missing cloud-init Secret cannot boot",
			vmi:       instance(containerDiskVolume(workerDiskRef), noCloudSecret("absent")),
			wantError: "reading Secret absent of cloud-init volume cloudinit",
		},
		{
			name:      "a Secret without user data cannot boot",
			vmi:       instance(containerDiskVolume(workerDiskRef), noCloudSecret("vm-userdata")),
			objects:   []client.Object{secret("other")},
			wantError: "cloud-init volume cloudinit has no user data",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			plan, err := r.planBoot(context.Background(), fakeReader(t, tc.objects...), tc.vmi)
			if tc.wantError != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantError)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(plan).To(Equal(tc.want))
		})
	}
}

// TestHypervisorStartsAndStopsGuests: Start boots what the instance names
// (through the Tamper hook), reports QEMU user networking's address on the
// first interface and no guest agent, and records the guest; a guest that
// powers itself off or is shut down exits cleanly, a killed one with the
// reason.
func TestHypervisorStartsAndStopsGuests(t *testing.T) {
	g := NewWithT(t)
	disk := testDisk(t)
	r, err := NewRunner(t.Context(), RunnerOptions{Disk: disk, ContainerDisks: map[string]Disk{workerDiskRef: disk}, Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	defer r.Stop()
	guests := &fakeGuests{}
	r.startGuest = guests.start
	r.Tamper(func(vm client.ObjectKey, data []byte) []byte {
		g.Expect(vm).To(Equal(client.ObjectKey{Namespace: "ns", Name: "vm"}))
		return bytes.ReplaceAll(data, []byte("good"), []byte("bad"))
	})
	reader := fakeReader(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm-userdata"}, Data: map[string][]byte{"userdata": []byte("#cloud-config\npin: good\n")}})
	vmi := instance(containerDiskVolume(workerDiskRef), noCloudSecret("vm-userdata"))
	hv := &hypervisor{runner: r}
	// Not the process's logger: in the real-guest suite it is the harness's.
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	start := func() kubevirtsim.Guest {
		guest, err := hv.Start(ctx, kubevirtsim.StartRequest{Instance: vmi, Node: GuestNode, Reader: reader})
		g.Expect(err).NotTo(HaveOccurred())
		return guest
	}

	guest := start()
	g.Expect(guest.Interfaces()).To(ConsistOf(kubevirtv1.VirtualMachineInstanceNetworkInterface{
		Name: "default", InterfaceName: "eth0", IP: GuestAddress, IPs: []string{GuestAddress}, MAC: guestMAC, InfoSource: "domain", QueueCount: 1,
	}))
	g.Expect(guest.OSInfo()).To(BeNil())
	booted := guests.booted("vm")
	g.Expect(booted).To(HaveLen(1))
	g.Expect(string(booted[0].UserData)).To(Equal("#cloud-config\npin: bad\n"))
	g.Expect(booted[0].MemoryMiB).To(Equal(1536))
	g.Expect(booted[0].CPUs).To(Equal(2))
	g.Expect(r.Running()).To(Equal(1))
	g.Expect(r.Guests()).To(ConsistOf(And(HaveField("VM", client.ObjectKeyFromObject(vmi)), HaveField("Instance", vmi.UID),
		HaveField("Seed", NoCloud), HaveField("RootImage", disk.Image()), HaveField("Exited", BeZero()))))

	g.Expect(r.Kill(client.ObjectKeyFromObject(vmi))).To(Succeed())
	g.Eventually(guest.Done()).Should(BeClosed())
	g.Expect(guest.Err()).To(MatchError("the QEMU process of the guest was killed"))
	guest.Shutdown()
	g.Expect(guest.Err()).To(MatchError("the QEMU process of the guest was killed"), "a guest that stopped stays stopped the way it did")
	g.Eventually(func() []Guest { return r.Guests() }).Should(ConsistOf(HaveField("ExitError", "the QEMU process of the guest was killed")))
	g.Expect(r.Kill(client.ObjectKeyFromObject(vmi))).To(MatchError(ContainSubstring("has no running guest")))

	guest = start()
	guest.Shutdown()
	g.Eventually(guest.Done()).Should(BeClosed())
	g.Expect(guest.Err()).NotTo(HaveOccurred(), "a shutdown is a power-off")
	guest.Kill("too late")
	g.Expect(guest.Err()).NotTo(HaveOccurred())

	// A guest that powers itself off: QEMU exits 0.
	r.startGuest = func(_ context.Context, opts VMOptions) (*VM, error) { return sleepVM(opts.Name, opts.Dir, "0") }
	guest = start()
	g.Eventually(guest.Done()).Should(BeClosed())
	g.Expect(guest.Err()).NotTo(HaveOccurred())
	// A QEMU that fails is a crash.
	r.startGuest = func(_ context.Context, opts VMOptions) (*VM, error) {
		return sleepVM(opts.Name, opts.Dir, "not-a-duration")
	}
	guest = start()
	g.Eventually(guest.Done()).Should(BeClosed())
	g.Expect(guest.Err()).To(MatchError(HavePrefix("QEMU exited: exit status")))
	g.Eventually(r.Running).Should(BeZero())

	r.Stop()
	_, err = hv.Start(ctx, kubevirtsim.StartRequest{Instance: vmi, Node: GuestNode, Reader: reader})
	g.Expect(err).To(MatchError("the QEMU runner stopped"))
}

// testDisk makes a worker disk directory whose image is a small file: the
// runner's tests read paths, never the image's content.
func testDisk(tb testing.TB) Disk {
	tb.Helper()
	d := Disk{Dir: tb.TempDir()}
	if err := os.WriteFile(d.Image(), []byte("rootfs"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return d
}
