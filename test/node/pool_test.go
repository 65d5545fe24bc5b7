//go:build node

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

package node_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/cdi"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
	"github.com/cozystack/cluster-api-workers/test/qemu"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
)

// tenantHost is where the real node's guests reach the workload
// apiserver: an address of the node's network namespace that the node
// forwards to the host's loopback (node.Options.Forwards). Behind KubeVirt's
// masquerade binding the guest itself is 10.0.2.2, the QEMU tier's host
// address.
const tenantHost = "10.0.0.2"

// kubeVirtNode is what every stage-4 scenario runs on (startKubeVirtNode):
// the harness with the real node side, the workload cluster whose control
// plane the guests join, and the worker container disk.
type kubeVirtNode struct {
	h        *harness.Harness
	node     *node.Node
	workload *harness.WorkloadCluster
	tenant   *qemu.ControlPlane
	handler  corev1.Pod
	worker   *node.WorkerContainerDisk
	// artifacts is NODE_ARTIFACTS: where the node's and the guests' logs go.
	artifacts string
}

// pool is one pool of the example Kairos template on the real node, and
// the suite's way to apply it; test/scenarios's and test/qemu's pool
// have the same shape.
type pool struct {
	harness.Pool
	h *harness.Harness
}

// pool is the workload Cluster's MachineDeployment of that POOL_NAME.
func (k *kubeVirtNode) pool(name string) pool {
	return pool{Pool: harness.Pool{Cluster: k.workload.Key, Name: name}, h: k.h}
}

// poolDefaults are the suite's values of the example pool's variables: one
// machine of the guest size the QEMU tier boots, and a node startup
// timeout a guest under TCG never reaches, nor its infrastructure's.
func poolDefaults() map[string]string {
	return map[string]string{
		"WORKER_MACHINE_COUNT":                  "1",
		"WORKER_CPU_CORES":                      "2",
		"WORKER_MEMORY":                         "1536Mi",
		"NODE_STARTUP_TIMEOUT_SECONDS":          "1800",
		"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": "600",
	}
}

// render renders the pool with the scenario's variables over the suite's.
func (p pool) render(t *testing.T, vars map[string]string) []unstructured.Unstructured {
	t.Helper()
	return p.MustRender(t, poolDefaults(), vars)
}

// apply creates the pool's objects, each edit of its
// KubeVirtMachineTemplates applied first.
func (p pool) apply(ctx context.Context, t *testing.T, vars map[string]string, edits ...func(template *unstructured.Unstructured, machine map[string]any)) {
	t.Helper()
	objs := p.render(t, vars)
	for _, edit := range edits {
		harness.EditMachineTemplates(objs, edit)
	}
	if err := p.h.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
}

// kubeVirtNodeName is the real node's name.
const kubeVirtNodeName = "kubevirt-node"

// startKubeVirtNode starts what a Kairos pool needs to run on KubeVirt's
// real node side, and stops it all when the test ends. The harness runs
// Cluster API, both providers, virt-api and virt-controller with no
// node-side stand-in (infra.Options.RealNodes), kube-controller-manager's
// DaemonSet and node lifecycle controllers and kube-scheduler; the
// WorkerPlatform's Kairos image is the worker disk as a container disk
// built here (imported into the node's containerd, found by digest, never
// pulled); the workload cluster's control plane is the QEMU tier's,
// kubeadm-prepared on the host and reached by the guests at tenantHost;
// the real node runs virt-handler, deployed as virt-operator deploys it.
// It skips when the machine lacks a prerequisite.
func startKubeVirtNode(ctx context.Context, t *testing.T, namespace string) *kubeVirtNode {
	t.Helper()
	return startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{})
}

// nodeSetup is what a scenario adds to startKubeVirtNode's setup.
type nodeSetup struct {
	// realCDI runs CDI's real controller (infra.Options.RealCDI) with its
	// importer image on the node, in place of CDI's stand-in.
	realCDI bool
	// forwards are node.Options.Forwards besides the workload apiserver's.
	forwards map[string]string
	// kairosDisk makes the WorkerPlatform's Kairos image the Kairos disk
	// of hack/kairos-disk as a container disk (BuildKairosContainerDisk),
	// in place of the worker disk.
	kairosDisk bool
}

// startKubeVirtNodeWith is startKubeVirtNode with what setup adds.
func startKubeVirtNodeWith(ctx context.Context, t *testing.T, namespace string, setup nodeSetup) *kubeVirtNode {
	t.Helper()
	if err := node.Prerequisites(); err != nil {
		t.Skip(err)
	}
	k := &kubeVirtNode{artifacts: os.Getenv("NODE_ARTIFACTS")}
	t.Logf("load average at the start: %s", loadAverage())
	images, err := node.BuildKubeVirtImages()
	if err != nil {
		t.Fatal(err)
	}
	if setup.kairosDisk {
		k.worker, err = node.BuildKairosContainerDisk()
	} else {
		k.worker, err = node.BuildWorkerContainerDisk()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worker container disk %s: built or reused in %s, qcow2 %d MB, archive %d MB",
		k.worker.Image.Ref, k.worker.Build.Round(time.Second), k.worker.DiskBytes/1e6, k.worker.ArchiveBytes/1e6)

	log, closeLog, err := harness.SuiteLogger(false, k.artifacts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLog)
	// By default CDI is the stand-in, whose importer writes for real, into
	// volume directories the node sees (none of the node's private
	// directories); with realCDI, CDI's own controller and importer Pods
	// fill the stand-in's volumes.
	opts := harness.Options{Logger: log, WorkerClasses: true, Infra: infra.Options{
		RealNodes: true,
		CDI:       cdisim.Options{Importer: cdisim.FileImporter{}, VolumeDir: filepath.Join(t.TempDir(), "volumes")},
	}}
	if k.artifacts != "" {
		opts.Infra.KubeVirt.LogDir = filepath.Join(k.artifacts, "kubevirt")
	}
	nodeImages := []ociimage.Image{images.Handler, images.Launcher, k.worker.Image}
	if setup.realCDI {
		t0 := time.Now()
		cdiImages, err := node.BuildCDIImages()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("CDI's images built or reused in %s", time.Since(t0).Round(time.Second))
		nodeImages = append(nodeImages, cdiImages.Importer, cdiImages.Cloner, cdiImages.UploadServer)
		opts.Infra.CDI.Importer = nil
		opts.Infra.RealCDI = &cdi.Options{}
		if k.artifacts != "" {
			opts.Infra.RealCDI.LogDir = filepath.Join(k.artifacts, "cdi")
		}
	}
	if k.h, err = harness.Start(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.h.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := k.h.Management.Client
	controllers := []string{envtest.DaemonSetController, envtest.NodeLifecycleController}
	if setup.realCDI {
		// The upload server's Service, which the cloner posts to.
		controllers = append(controllers, envtest.EndpointSliceController)
	}
	kcm, err := k.h.Management.StartControllerManager(controllers...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcm.Stop)
	scheduler, err := k.h.Management.StartScheduler()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(scheduler.Stop)

	const kubernetesVersion = "v1.36.3"
	if err := k.h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: kubernetesVersion}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: k.worker.Image.Ref}}
		p.TalosFactory.Version = "v1.13.6"
		p.TalosFactory.SchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	}); err != nil {
		t.Fatal(err)
	}
	controlPlanes := &qemu.ControlPlanes{KubernetesVersion: kubernetesVersion, GuestHost: tenantHost}
	key := client.ObjectKey{Namespace: namespace, Name: "workload"}
	if k.workload, err = k.h.CreateCluster(ctx, key, harness.ClusterOptions{ControlPlanes: controlPlanes}); err != nil {
		t.Fatal(err)
	}
	if k.tenant = controlPlanes.Get(key); k.tenant == nil {
		t.Fatalf("no control plane started for %s", key)
	}

	// No Node authorizer runs: the kubelets' group gets the system:node role.
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-kubelets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}); err != nil {
		t.Fatal(err)
	}
	// No service account controller runs: the namespace of the launcher
	// Pods gets its default service account.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "default"}}); err != nil {
		t.Fatal(err)
	}

	kubelet, err := k.h.Management.AddUser("system:node:"+kubeVirtNodeName, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	// Real CDI's host-assisted clone has the cloner Pod post to the upload
	// server's Service by name (cdi-upload-<claim>.<namespace>.svc):
	// kube-proxy and cluster DNS on the node.
	var kubeProxy *rest.Config
	if setup.realCDI {
		if kubeProxy, err = k.h.Management.AddUser("system:kube-proxy"); err != nil {
			t.Fatal(err)
		}
	}
	port := strconv.Itoa(k.tenant.Port)
	forwards := map[string]string{net.JoinHostPort(tenantHost, port): net.JoinHostPort("127.0.0.1", port)}
	maps.Copy(forwards, setup.forwards)
	t0 := time.Now()
	k.node, err = node.Start(ctx, node.Options{
		Name:         kubeVirtNodeName,
		Config:       kubelet,
		Images:       nodeImages,
		Forwards:     forwards,
		KubeProxy:    kubeProxy,
		ArtifactsDir: k.artifacts,
		StartTimeout: 15 * time.Minute,
	})
	if errors.Is(err, node.ErrPrerequisite) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.node.Stop(); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	})
	t.Logf("node started with %d images imported in %s", len(nodeImages), time.Since(t0).Round(time.Second))
	// What the root CA publisher of kube-controller-manager would write.
	for _, ns := range []string{kubevirt.Namespace, namespace} {
		if err := c.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"},
			Data:       map[string]string{"ca.crt": string(k.node.ServiceCA())},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if setup.realCDI {
		if err := k.node.DeployDNS(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	k.handler = deployHandler(ctx, t, c, k.h.KubeVirt, k.node, scheduler)
	return k
}

// guest follows one machine's guest through its launcher Pod: the Pod,
// when QEMU was first seen, the launcher Pod's peak memory, and when the
// milestones of its boot showed on its serial console.
type guest struct {
	k        *kubeVirtNode
	launcher corev1.Pod
	qemuSeen time.Time
	peak     int64
	// qemuCPU is the most CPU time QEMU was seen to have used.
	qemuCPU    time.Duration
	milestones []milestone
	lastRead   time.Time
}

type milestone struct {
	name string
	re   *regexp.Regexp
	at   time.Time
	// match is the first line that matched (its first group, if re has
	// one).
	match string
}

// rootMounted is the milestone of the guest's root file system: the
// kernel names the device it mounted, and so the bus it found it on
// (vd*: virtio, sd*: SCSI or SATA).
const rootMounted = "the root file system is mounted"

// grubBooted is the milestone of a Kairos disk's kernel starting: the
// command line grub gave it names the kernel it loaded from the loopback
// mounted active image.
const grubBooted = "grub loads the kernel from the active image"

// seedRead is the milestone of the seed runner finding its cloud-init
// disk: it names the disk's label (cidata: NoCloud, config-2:
// ConfigDrive).
const seedRead = "the seed runner reads the cloud-init disk"

// qemuNames are the names of libvirt's emulator in the launcher image:
// KubeVirt's /usr/libexec/qemu-kvm link or Debian's binary itself.
var qemuNames = []string{"qemu-kvm", "qemu-system-x86_64"}

func newGuest(k *kubeVirtNode) *guest {
	return &guest{k: k, milestones: []milestone{
		{name: "SYSLINUX loads the kernel", re: regexp.MustCompile(`SYSLINUX`)},
		{name: grubBooted, re: regexp.MustCompile(`Command line: (BOOT_IMAGE=\(loop0\)\S*)`)},
		{name: "the kernel runs /init", re: regexp.MustCompile(`Run /init as init process`)},
		{name: rootMounted, re: regexp.MustCompile(`EXT4-fs \(([a-z]+[0-9]*)\): mounted filesystem`)},
		{name: "systemd starts", re: regexp.MustCompile(`systemd\[1\]: `)},
		{name: seedRead, re: regexp.MustCompile(`running the cloud-config from (\S+) on`)},
		{name: "the guest has its DHCP address", re: regexp.MustCompile(`DHCPv4 address`)},
		{name: "kubeadm's join stage starts", re: regexp.MustCompile(regexp.QuoteMeta("Join the cluster with kubeadm"))},
	}}
}

// observe updates what is known of the guest of the newest launcher Pod
// in namespace; when a newer Pod shows up (an instance restarted or
// replaced), it follows that one from scratch.
func (g *guest) observe(ctx context.Context, namespace string) {
	var pods corev1.PodList
	if err := g.k.h.Management.Client.List(ctx, &pods, client.InNamespace(namespace), client.HasLabels{kubevirtv1.CreatedByLabel}); err == nil && len(pods.Items) > 0 {
		newest := slices.MaxFunc(pods.Items, func(a, b corev1.Pod) int {
			return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
		})
		if g.launcher.UID != "" && newest.UID != g.launcher.UID {
			fresh := newGuest(g.k)
			*g = *fresh
		}
		g.launcher = newest
	}
	n := g.k.node
	if g.qemuSeen.IsZero() && len(n.CommandLines(qemuNames...)) > 0 {
		g.qemuSeen = time.Now()
	}
	if cpu := n.CPUTime(qemuNames...); cpu > g.qemuCPU {
		g.qemuCPU = cpu
	}
	if g.launcher.UID == "" {
		return
	}
	if m := n.PodMemoryPeak(g.launcher.UID); m > g.peak {
		g.peak = m
	}
	// The console's file is read again every few seconds, not each poll.
	if time.Since(g.lastRead) < 5*time.Second {
		return
	}
	g.lastRead = time.Now()
	lines, err := n.ContainerLogLines(g.launcher.Namespace, g.launcher.Name, "guest-console-log")
	if err != nil {
		return
	}
	for i := range g.milestones {
		m := &g.milestones[i]
		if !m.at.IsZero() {
			continue
		}
		for _, l := range lines {
			if sub := m.re.FindStringSubmatch(l.Text); sub != nil {
				m.at, m.match = l.Time, sub[len(sub)-1]
				break
			}
		}
	}
}

// seen returns a milestone's time and match (zero until it is seen).
func (g *guest) seen(name string) (time.Time, string) {
	for _, m := range g.milestones {
		if m.name == name {
			return m.at, m.match
		}
	}
	return time.Time{}, ""
}

// rootDiskBus is the bus of the instance's root disk (boot order 1), as
// virt-api and virt-controller left it in the instance's spec.
func rootDiskBus(vmi *kubevirtv1.VirtualMachineInstance) kubevirtv1.DiskBus {
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.BootOrder != nil && *d.BootOrder == 1 && d.Disk != nil {
			return d.Disk.Bus
		}
	}
	return ""
}

// cpuRequest is the CPU the launcher Pod's compute container requests:
// virt-controller asks a tenth of a core per vCPU (the KubeVirt CR's
// cpuAllocationRatio, 10 by default), the weight QEMU gets on a busy node.
func (g *guest) cpuRequest() string {
	for _, c := range g.launcher.Spec.Containers {
		if c.Name == "compute" {
			return c.Resources.Requests.Cpu().String()
		}
	}
	return "none"
}

// timeline is each milestone seen, from t0.
func (g *guest) timeline(t0 time.Time) string {
	var parts []string
	if !g.qemuSeen.IsZero() {
		parts = append(parts, fmt.Sprintf("QEMU seen running %s", g.qemuSeen.Sub(t0).Round(time.Second)))
	}
	for _, m := range g.milestones {
		if !m.at.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %s", m.name, m.at.Sub(t0).Round(time.Second)))
		}
	}
	return strings.Join(parts, "; ")
}

// logs are the launcher Pod's and virt-handler's last lines and the end
// of the guest's console, for a failure message.
func (g *guest) logs() string {
	var b strings.Builder
	b.WriteString(podLogs(g.k.node, &g.launcher))
	b.WriteString(podLogs(g.k.node, &g.k.handler))
	if console, err := g.k.node.ContainerLog(g.launcher.Namespace, g.launcher.Name, "guest-console-log"); err == nil {
		fmt.Fprintf(&b, "--- guest console (last 60 lines)\n%s\n", tail(console, 60))
	}
	return b.String()
}

// keepConsole writes the guest's console to the artifacts directory, if
// there is one (the node keeps the timed original under pods/).
func (g *guest) keepConsole(file string) {
	if g.k.artifacts == "" || g.launcher.Name == "" {
		return
	}
	if console, err := g.k.node.ContainerLog(g.launcher.Namespace, g.launcher.Name, "guest-console-log"); err == nil {
		_ = os.WriteFile(filepath.Join(g.k.artifacts, file), []byte(console), 0o600)
	}
}

// TestPoolJoinsThroughVirtLauncher: one machine of a Kairos pool joins
// through KubeVirt's real node side (startKubeVirtNode). Our
// infrastructure provider renders the VM, virt-controller its launcher
// Pod, kube-scheduler binds it, the kubelet runs it, virt-handler hands the
// instance to virt-launcher and libvirt starts QEMU under TCG; the guest
// boots from the container disk, reads the NoCloud disk virt-launcher
// writes, takes its address from virt-launcher's DHCP behind the
// masquerade binding our renderer emits, and joins the workload control
// plane with real kubeadm. The Machine is Running with its Node Ready. It
// logs the figures docs/testing.md reports: Machine creation to QEMU start
// and to Node Ready, the guest's boot milestones, QEMU's CPU time, the
// launcher Pod's peak memory, the image's build time and size.
// NODE_ARTIFACTS=<dir> keeps the node's logs, the pods' logs (with each
// line's time) and the guest's console.
func TestPoolJoinsThroughVirtLauncher(t *testing.T) {
	expectPoolJoins(t, infrav1.NoCloudDatasource)
}

// TestConfigDrivePoolJoinsThroughVirtLauncher: as
// TestPoolJoinsThroughVirtLauncher, with the bootstrap data on the
// ConfigDrive virt-launcher writes (label config-2) instead of NoCloud.
func TestConfigDrivePoolJoinsThroughVirtLauncher(t *testing.T) {
	expectPoolJoins(t, infrav1.ConfigDriveDatasource)
}

// expectPoolJoins joins a pool of one Machine whose bootstrap data reaches
// the guest through datasource, and checks the guest read it from that
// disk and mounted its root from the virtio disk our renderer asks for.
func expectPoolJoins(t *testing.T, datasource infrav1.CloudInitDatasource) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	const namespace = "node-guests"
	k := startKubeVirtNode(ctx, t, namespace)
	c := k.h.Management.Client

	p := k.pool("virt-launcher")
	p.apply(ctx, t, map[string]string{
		// A guest under TCG on a loaded host: nothing here is remediated.
		"NODE_UNHEALTHY_TIMEOUT_SECONDS": "600",
	}, func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["cloudInitDatasource"] = string(datasource)
	})

	g := newGuest(k)
	defer g.keepConsole("guest-console-" + strings.ToLower(string(datasource)) + ".log")
	machine := k.waitJoined(ctx, t, p, namespace, g, nil)
	label := map[infrav1.CloudInitDatasource]string{infrav1.NoCloudDatasource: "cidata", infrav1.ConfigDriveDatasource: "config-2"}[datasource]
	if _, seed := g.seen(seedRead); seed != label {
		t.Errorf("the guest's seed runner read its cloud-config from %q, want the %s disk (%s)", seed, datasource, label)
	}

	var nd corev1.Node
	if err := k.workload.API.Client.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, &nd); err != nil {
		t.Fatal(err)
	}
	var ready time.Time
	for _, cond := range nd.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = cond.LastTransitionTime.Time
		}
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: machine.Spec.InfrastructureRef.Name}, vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.Status.NodeName != kubeVirtNodeName || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("instance %s: phase %s on node %q, want Running on %s", vmi.Name, vmi.Status.Phase, vmi.Status.NodeName, kubeVirtNodeName)
	}
	// The bus our renderer asks for is the one the guest found its root on.
	if _, root := g.seen(rootMounted); rootDiskBus(vmi) != kubevirtv1.DiskBusVirtio || !strings.HasPrefix(root, "vd") {
		t.Errorf("root disk on bus %q, the guest mounted its root from %q; want virtio and a vd* device", rootDiskBus(vmi), root)
	}
	created := machine.CreationTimestamp.Time
	t.Logf("Machine %s joined through virt-launcher: Machine created to QEMU start %s (seen by polling), to Node %s registered %s and Ready %s (QEMU start to Ready %s); launcher Pod %s peak memory %d MiB, CPU requested %s",
		machine.Name, g.qemuSeen.Sub(created).Round(time.Second), nd.Name, nd.CreationTimestamp.Sub(created).Round(time.Second),
		ready.Sub(created).Round(time.Second), ready.Sub(g.qemuSeen).Round(time.Second), g.launcher.Name, g.peak>>20, g.cpuRequest())
	t.Logf("timeline from the Machine's creation: %s; QEMU used %s of CPU in %s; the node's components: %s; load average at the end %s",
		g.timeline(created), g.qemuCPU.Round(time.Second), time.Since(g.qemuSeen).Round(time.Second), nodeCPU(k.node), loadAverage())
}

// nodeCPU is the CPU time each of the node's long-running components has
// used so far: what, beside the guest's QEMU, took the node's share.
func nodeCPU(n *node.Node) string {
	var parts []string
	for _, name := range []string{"kubelet", "containerd", "virt-handler", "virt-launcher", "virtqemud", "virtlogd"} {
		parts = append(parts, fmt.Sprintf("%s %s", name, n.CPUTime(name).Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

// waitJoined waits until the pool has one Machine, Running with its Node
// Ready (and none of skip, a Machine that must go), following its guest
// with g and logging the guest's progress every two minutes; it fails the
// test with the guest's and the tenant control plane's logs after 40
// minutes.
func (k *kubeVirtNode) waitJoined(ctx context.Context, t *testing.T, p pool, namespace string, g *guest, skip *clusterv1.Machine) clusterv1.Machine {
	t.Helper()
	var machine clusterv1.Machine
	progress := time.Now()
	if err := waitFor(ctx, 40*time.Minute, func() (bool, string) {
		if err := k.h.Err(); err != nil {
			t.Fatal(err)
		}
		ms, err := k.h.PoolMachines(ctx, p.Pool)
		if err != nil || len(ms) == 0 {
			return false, fmt.Sprintf("no Machine yet (%v)", err)
		}
		machine = slices.MaxFunc(ms, func(a, b clusterv1.Machine) int {
			return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
		})
		g.observe(ctx, namespace)
		if time.Since(progress) > 2*time.Minute {
			progress = time.Now()
			t.Logf("Machine %s %s; timeline %s; QEMU used %s of CPU; load average %s", machine.Name, machine.Status.Phase,
				g.timeline(machine.CreationTimestamp.Time), g.qemuCPU.Round(time.Second), loadAverage())
		}
		if skip != nil && slices.ContainsFunc(ms, func(m clusterv1.Machine) bool { return m.UID == skip.UID }) {
			return false, fmt.Sprintf("Machine %s still there", skip.Name)
		}
		if _, err := k.h.PoolJoined(ctx, p.Pool, 1); err != nil {
			return false, fmt.Sprintf("Machine %s %s; launcher Pod %s %s; %v", machine.Name, machine.Status.Phase, g.launcher.Name, g.launcher.Status.Phase, err)
		}
		return true, ""
	}); err != nil {
		t.Fatalf("the pool did not join: %v\ntimeline from the Machine's creation: %s; QEMU used %s of CPU; the node's components: %s; load average %s\n%s\ntenant control plane:\n%s",
			err, g.timeline(machine.CreationTimestamp.Time), g.qemuCPU.Round(time.Second), nodeCPU(k.node), loadAverage(), g.logs(), k.tenant.Logs())
	}
	return machine
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}

// deployHandler deploys virt-handler as virt-operator does and waits until
// its Pod is Ready and the node schedulable for instances; a failure shows
// the Pod's and kube-scheduler's last lines.
func deployHandler(ctx context.Context, t *testing.T, c client.Client, cp *kubevirt.ControlPlane, n *node.Node, scheduler *envtest.ControllerManager) corev1.Pod {
	t.Helper()
	t1 := time.Now()
	if err := cp.DeployHandler(ctx); err != nil {
		t.Fatal(err)
	}
	var handler corev1.Pod
	if err := waitFor(ctx, 10*time.Minute, func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(kubevirt.Namespace), client.MatchingLabels{"kubevirt.io": "virt-handler"}); err != nil {
			return false, err.Error()
		}
		if len(pods.Items) == 0 {
			return false, "no virt-handler Pod"
		}
		handler = pods.Items[0]
		for _, cs := range append(handler.Status.InitContainerStatuses, handler.Status.ContainerStatuses...) {
			if cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0 || cs.RestartCount > 0 {
				t.Fatalf("virt-handler's Pod: container %s failed (%+v, restarts %d)\n%s", cs.Name, cs.State, cs.RestartCount, podLogs(n, &handler))
			}
		}
		for _, cond := range handler.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("phase %s, node %q, conditions %+v", handler.Status.Phase, handler.Spec.NodeName, handler.Status.Conditions)
	}); err != nil {
		t.Fatalf("virt-handler not Ready: %v\n%s\nkube-scheduler:\n%s", err, podLogs(n, &handler), tail(scheduler.Log(), 20))
	}
	t.Logf("virt-handler Ready %s after its DaemonSet was created", time.Since(t1).Round(time.Second))
	if err := waitFor(ctx, 3*time.Minute, func() (bool, string) {
		var nd corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, &nd); err != nil {
			return false, err.Error()
		}
		tun := nd.Status.Allocatable["devices.kubevirt.io/tun"]
		return nd.Labels[kubevirtv1.NodeSchedulable] == "true" && !tun.IsZero(),
			fmt.Sprintf("labels %v, allocatable %v", nd.Labels, nd.Status.Allocatable)
	}); err != nil {
		t.Fatalf("virt-handler did not make the node schedulable: %v\n%s", err, podLogs(n, &handler))
	}
	return handler
}

// TestRootDiskBusThroughVirtLauncher: the root disk bus a pool's VM asks
// for is the one its guest sees under KubeVirt's real virt-launcher. The
// pool names a cluster preference whose preferred disk bus is SCSI, so our
// renderer leaves the disks' bus to it (it renders virtio otherwise, as
// TestPoolJoinsThroughVirtLauncher checks); virt-controller applies the
// preference to the instance, virt-launcher gives libvirt a virtio-scsi
// controller, and the guest's kernel mounts its root file system from a
// SCSI disk (sd*). The QEMU tier's TestRootDiskBus attaches the bus the
// runner chose; here KubeVirt chooses. The guest need not join: the test
// ends once the root file system is mounted.
func TestRootDiskBusThroughVirtLauncher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	const namespace = "node-disk-bus"
	k := startKubeVirtNode(ctx, t, namespace)
	c := k.h.Management.Client

	preference := &instancetypev1beta1.VirtualMachineClusterPreference{
		ObjectMeta: metav1.ObjectMeta{Name: "scsi-disks"},
		Spec: instancetypev1beta1.VirtualMachinePreferenceSpec{
			Devices: &instancetypev1beta1.DevicePreferences{PreferredDiskBus: kubevirtv1.DiskBusSCSI},
		},
	}
	if err := c.Create(ctx, preference); err != nil {
		t.Fatal(err)
	}
	// The guest does not join: nothing here is remediated.
	p := k.pool("scsi")
	p.apply(ctx, t, nil, func(_ *unstructured.Unstructured, machine map[string]any) {
		machine["preference"] = map[string]any{"name": preference.Name}
	})

	var machine clusterv1.Machine
	g := newGuest(k)
	defer g.keepConsole("guest-console-scsi.log")
	if err := waitFor(ctx, 30*time.Minute, func() (bool, string) {
		if err := k.h.Err(); err != nil {
			t.Fatal(err)
		}
		ms, err := k.h.PoolMachines(ctx, p.Pool)
		if err != nil || len(ms) == 0 {
			return false, fmt.Sprintf("no Machine yet (%v)", err)
		}
		machine = ms[0]
		g.observe(ctx, namespace)
		at, _ := g.seen(rootMounted)
		return !at.IsZero(), fmt.Sprintf("Machine %s %s; launcher Pod %s %s; timeline %s", machine.Name, machine.Status.Phase, g.launcher.Name, g.launcher.Status.Phase, g.timeline(machine.CreationTimestamp.Time))
	}); err != nil {
		t.Fatalf("the guest did not mount its root file system: %v\nload average %s\n%s", err, loadAverage(), g.logs())
	}

	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: machine.Spec.InfrastructureRef.Name}, vmi); err != nil {
		t.Fatal(err)
	}
	if bus := rootDiskBus(vmi); bus != kubevirtv1.DiskBusSCSI {
		t.Errorf("the instance's root disk is on bus %q, want the preference's %q", bus, kubevirtv1.DiskBusSCSI)
	}
	qemuLine := strings.Join(k.node.CommandLines(qemuNames...), "\n")
	if !strings.Contains(qemuLine, "virtio-scsi-pci") || !strings.Contains(qemuLine, "scsi-hd") {
		t.Errorf("QEMU has no virtio-scsi controller with a SCSI disk: %.600s", qemuLine)
	}
	at, root := g.seen(rootMounted)
	if !regexp.MustCompile(`^sd[a-z][0-9]+$`).MatchString(root) {
		t.Errorf("the guest mounted its root file system from %q, want a SCSI disk's partition (sd*)\n%s", root, g.logs())
	}
	created := machine.CreationTimestamp.Time
	t.Logf("the VM asked for SCSI and the guest mounted its root from %s %s after the Machine's creation (%s after QEMU was seen); timeline: %s; load average %s",
		root, at.Sub(created).Round(time.Second), at.Sub(g.qemuSeen).Round(time.Second), g.timeline(created), loadAverage())
}

// TestKilledQEMUIsRemediated: the QEMU process of a joined machine's guest
// is killed on the real node. virt-launcher reports the domain crashed and
// the instance Failed (virt-controller, under run strategy Always, starts
// another, which boots the container disk blank); the workload control
// plane's node lifecycle controller marks the Node's Ready Unknown once
// the kubelet's heartbeats stop; the MachineHealthCheck finds the node
// unhealthy and remediates the Machine, and the MachineSet's replacement
// joins through a new launcher Pod (expectKillRemediated). The QEMU tier's
// TestKilledGuestIsReplaced does this with virt-handler's stand-in
// reporting the instance.
func TestKilledQEMUIsRemediated(t *testing.T) {
	expectKillRemediated(t, "QEMU", qemuNames)
}

// TestKilledLauncherPodIsRemediated: the launcher Pod's compute container
// is killed on the real node (SIGKILL to virt-launcher-monitor, its first
// process, takes the container's PID namespace and so virt-launcher,
// virtqemud and QEMU with it); the kubelet sees the container end, the
// instance fails, and the MachineHealthCheck remediates the Machine as in
// TestKilledQEMUIsRemediated.
func TestKilledLauncherPodIsRemediated(t *testing.T) {
	expectKillRemediated(t, "virt-launcher-monitor", []string{"virt-launcher-monitor"})
}

// expectKillRemediated joins a pool of one Machine on the real node, kills
// the node's one process named one of names, and expects the instance to
// fail, the Node to go NotReady, the MachineHealthCheck to remediate the
// Machine and its replacement to join.
func expectKillRemediated(t *testing.T, what string, names []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	const namespace = "node-remediation"
	k := startKubeVirtNode(ctx, t, namespace)
	c := k.h.Management.Client
	r := k.joinRemediable(ctx, t, namespace, "remediated")
	defer r.guest.keepConsole("guest-console-remediated.log")
	vmiKey := client.ObjectKey{Namespace: namespace, Name: r.victim.Spec.InfrastructureRef.Name}
	killedVMI := &kubevirtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, vmiKey, killedVMI); err != nil {
		t.Fatal(err)
	}

	pids := k.node.Kill(names...)
	if len(pids) != 1 {
		t.Fatalf("killed %s processes %v, want the one guest's", what, pids)
	}
	killed := time.Now()
	// The killed instance fails, or is already replaced by another instance
	// of the VM (run strategy Always).
	if err := waitFor(ctx, 5*time.Minute, func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := c.Get(ctx, vmiKey, vmi); err != nil {
			return false, err.Error()
		}
		return vmi.UID != killedVMI.UID || vmi.Status.Phase == kubevirtv1.Failed, fmt.Sprintf("instance %s %s", vmi.UID, vmi.Status.Phase)
	}); err != nil {
		t.Fatalf("the killed guest's instance did not fail: %v\n%s", err, r.guest.logs())
	}
	t.Logf("the killed guest's instance failed %s after the kill", time.Since(killed).Round(time.Second))
	k.expectRemediated(ctx, t, namespace, r, "the kill", killed)
}

// remediable is a joined pool of one Machine whose MachineHealthCheck
// remediates it once its Node is unhealthy for a minute, with the history
// of the health check's verdicts on its Machines.
type remediable struct {
	p       pool
	victim  clusterv1.Machine
	guest   *guest
	history *harness.ConditionHistory
}

// joinRemediable applies a remediable pool (each edit of its templates
// applied first) and waits until its Machine joined.
func (k *kubeVirtNode) joinRemediable(ctx context.Context, t *testing.T, namespace, name string, edits ...func(template *unstructured.Unstructured, machine map[string]any)) remediable {
	t.Helper()
	r := remediable{p: k.pool(name)}
	vars := map[string]string{
		// Once joined, a node unhealthy for a minute is remediated.
		"NODE_UNHEALTHY_TIMEOUT_SECONDS": "60",
		// The one Machine is the whole pool: with the template's 50% the
		// MachineHealthCheck would find it unhealthy and not remediate.
		"MAX_UNHEALTHY": "100%",
	}
	watcher, err := client.NewWithWatch(k.h.Config(), client.Options{Scheme: k.h.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	r.history = harness.WatchConditions(t, watcher, &clusterv1.MachineList{}, clusterv1.MachineHealthCheckSucceededCondition,
		client.InNamespace(namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: r.p.Deployment().Name})
	r.p.apply(ctx, t, vars, edits...)
	r.guest = newGuest(k)
	r.victim = k.waitJoined(ctx, t, r.p, namespace, r.guest, nil)
	t.Logf("Machine %s joined %s after its creation", r.victim.Name, time.Since(r.victim.CreationTimestamp.Time).Round(time.Second))
	return r
}

// expectRemediated expects the remediable Machine's Node to go NotReady
// after what happened at since (a kill, a drain), the MachineHealthCheck
// to remediate the Machine, its Node to be deleted and its replacement to
// join.
func (k *kubeVirtNode) expectRemediated(ctx context.Context, t *testing.T, namespace string, r remediable, what string, since time.Time) {
	t.Helper()
	var notReady time.Duration
	if err := waitFor(ctx, 10*time.Minute, func() (bool, string) {
		var nd corev1.Node
		if err := k.workload.API.Client.Get(ctx, client.ObjectKey{Name: r.victim.Status.NodeRef.Name}, &nd); err != nil {
			return false, err.Error()
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionUnknown {
				notReady = time.Since(since)
				return true, ""
			}
		}
		return false, fmt.Sprintf("Node %s conditions %+v", nd.Name, nd.Status.Conditions)
	}); err != nil {
		t.Fatalf("the Node of Machine %s did not go NotReady after %s: %v", r.victim.Name, what, err)
	}
	t.Logf("the Node of Machine %s went NotReady (Ready Unknown) %s after %s", r.victim.Name, notReady.Round(time.Second), what)

	replacementGuest := newGuest(k)
	defer replacementGuest.keepConsole("guest-console-replacement.log")
	replacement := k.waitJoined(ctx, t, r.p, namespace, replacementGuest, &r.victim)
	if reasons := r.history.Reasons(r.victim.UID, metav1.ConditionFalse); !slices.Contains(reasons, clusterv1.MachineHealthCheckUnhealthyNodeReason) {
		t.Errorf("the MachineHealthCheck's verdicts on %s were %v, want %s", r.victim.Name, reasons, clusterv1.MachineHealthCheckUnhealthyNodeReason)
	}
	var gone corev1.Node
	if err := k.workload.API.Client.Get(ctx, client.ObjectKey{Name: r.victim.Status.NodeRef.Name}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("the remediated Machine's Node %s: %v, want it deleted", r.victim.Status.NodeRef.Name, err)
	}
	created := replacement.CreationTimestamp.Time
	t.Logf("Machine %s was replaced by %s, created %s after %s and Running with its Node Ready %s after %s; its guest's timeline from its creation: %s; load average %s",
		r.victim.Name, replacement.Name, created.Sub(since).Round(time.Second), what, time.Since(since).Round(time.Second), what,
		replacementGuest.timeline(created), loadAverage())
}
