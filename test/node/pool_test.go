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
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/qemu"
)

// tenantHost is where the real node's guests reach the workload
// apiserver: an address of the node's network namespace that the node
// forwards to the host's loopback (node.Options.Forwards). Behind KubeVirt's
// masquerade binding the guest itself is 10.0.2.2, the QEMU tier's host
// address.
const tenantHost = "10.0.0.2"

// TestPoolJoinsThroughVirtLauncher: one machine of a Kairos pool joins
// through KubeVirt's real node side. The harness runs Cluster API, both
// providers, virt-api and virt-controller with no node-side stand-in
// (infra.Options.RealNodes); the pool is the example Kairos template with
// the built-in kairos class, whose platform image is the worker disk as a
// container disk built here and imported into the real node's containerd.
// Our infrastructure provider renders the VM, virt-controller its launcher
// Pod, kube-scheduler binds it, the kubelet runs it, virt-handler hands the
// instance to virt-launcher and libvirt starts QEMU under TCG; the guest
// boots from the container disk, reads the NoCloud disk virt-launcher
// writes, takes its address from virt-launcher's DHCP behind the
// masquerade binding our renderer emits, and joins the workload control
// plane (kubeadm-prepared on the host, test/qemu) with real kubeadm. The
// Machine is Running with its Node Ready. It logs the figures
// docs/testing.md reports: Machine creation to QEMU start and to Node
// Ready, the launcher Pod's peak memory, the image's build time and size.
// NODE_ARTIFACTS=<dir> keeps the node's logs and the guest's console.
func TestPoolJoinsThroughVirtLauncher(t *testing.T) {
	if err := node.Prerequisites(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	artifacts := os.Getenv("NODE_ARTIFACTS")

	images, err := node.BuildKubeVirtImages()
	if err != nil {
		t.Fatal(err)
	}
	worker, err := node.BuildWorkerContainerDisk()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worker container disk %s: built or reused in %s, qcow2 %d MB, archive %d MB",
		worker.Image.Ref, worker.Build.Round(time.Second), worker.DiskBytes/1e6, worker.ArchiveBytes/1e6)

	log, closeLog, err := harness.SuiteLogger(false, artifacts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	opts := harness.Options{Logger: log, WorkerClasses: true, Infra: infra.Options{RealNodes: true}}
	if artifacts != "" {
		opts.Infra.KubeVirt.LogDir = filepath.Join(artifacts, "kubevirt")
	}
	h, err := harness.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := h.Management.Client
	kcm, err := h.Management.StartControllerManager(envtest.DaemonSetController, envtest.NodeLifecycleController)
	if err != nil {
		t.Fatal(err)
	}
	defer kcm.Stop()
	scheduler, err := h.Management.StartScheduler()
	if err != nil {
		t.Fatal(err)
	}
	defer scheduler.Stop()

	const kubernetesVersion = "v1.36.3"
	if err := h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: kubernetesVersion}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: worker.Image.Ref}}
		p.TalosFactory.Version = "v1.13.6"
		p.TalosFactory.SchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	}); err != nil {
		t.Fatal(err)
	}
	controlPlanes := &qemu.ControlPlanes{KubernetesVersion: kubernetesVersion, GuestHost: tenantHost}
	key := client.ObjectKey{Namespace: "node-guests", Name: "workload"}
	workload, err := h.CreateCluster(ctx, key, harness.ClusterOptions{ControlPlanes: controlPlanes})
	if err != nil {
		t.Fatal(err)
	}
	tenant := controlPlanes.Get(key)
	if tenant == nil {
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
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "default"}}); err != nil {
		t.Fatal(err)
	}

	const name = "kubevirt-node"
	kubelet, err := h.Management.AddUser("system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(tenant.Port)
	t0 := time.Now()
	n, err := node.Start(ctx, node.Options{
		Name:         name,
		Config:       kubelet,
		Images:       []node.Image{images.Handler, images.Launcher, worker.Image},
		Forwards:     map[string]string{net.JoinHostPort(tenantHost, port): net.JoinHostPort("127.0.0.1", port)},
		ArtifactsDir: artifacts,
		StartTimeout: 15 * time.Minute,
	})
	if errors.Is(err, node.ErrPrerequisite) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	}()
	t.Logf("node started with the three images imported in %s", time.Since(t0).Round(time.Second))
	for _, ns := range []string{kubevirt.Namespace, key.Namespace} {
		if err := c.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"},
			Data:       map[string]string{"ca.crt": string(n.ServiceCA())},
		}); err != nil {
			t.Fatal(err)
		}
	}
	handler := deployHandler(ctx, t, c, h.KubeVirt, n, scheduler)

	pool := harness.Pool{Cluster: workload.Key, Name: "virt-launcher"}
	objs, err := pool.Render(map[string]string{
		"WORKER_MACHINE_COUNT": "1",
		"WORKER_CPU_CORES":     "2",
		"WORKER_MEMORY":        "1536Mi",
		// A guest under TCG on a loaded host: nothing here is remediated.
		"NODE_STARTUP_TIMEOUT_SECONDS":          "1800",
		"NODE_UNHEALTHY_TIMEOUT_SECONDS":        "600",
		"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": "600",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}

	var (
		machine  clusterv1.Machine
		launcher corev1.Pod
		qemuSeen time.Time
		peak     int64
	)
	guestLogs := func() string {
		var b strings.Builder
		b.WriteString(podLogs(n, &launcher))
		b.WriteString(podLogs(n, &handler))
		if console, err := n.ContainerLog(launcher.Namespace, launcher.Name, "guest-console-log"); err == nil {
			fmt.Fprintf(&b, "--- guest console (last 60 lines)\n%s\n", tail(console, 60))
		}
		return b.String()
	}
	defer func() {
		if artifacts == "" || launcher.Name == "" {
			return
		}
		if console, err := n.ContainerLog(launcher.Namespace, launcher.Name, "guest-console-log"); err == nil {
			_ = os.WriteFile(filepath.Join(artifacts, "guest-console.log"), []byte(console), 0o600) //nolint:gosec // The caller's artifacts directory.
		}
	}()
	if err := waitFor(ctx, 40*time.Minute, func() (bool, string) {
		if err := h.Err(); err != nil {
			t.Fatal(err)
		}
		ms, err := h.PoolMachines(ctx, pool)
		if err != nil || len(ms) == 0 {
			return false, fmt.Sprintf("no Machine yet (%v)", err)
		}
		machine = ms[0]
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(key.Namespace), client.HasLabels{kubevirtv1.CreatedByLabel}); err == nil && len(pods.Items) > 0 {
			launcher = pods.Items[0]
		}
		if qemuSeen.IsZero() && len(n.CommandLines("qemu-kvm", "qemu-system-x86_64")) > 0 {
			qemuSeen = time.Now()
		}
		if launcher.UID != "" {
			if m := n.PodMemoryPeak(launcher.UID); m > peak {
				peak = m
			}
		}
		if _, err := h.PoolJoined(ctx, pool, 1); err != nil {
			return false, fmt.Sprintf("Machine %s %s; launcher Pod %s %s; %v", machine.Name, machine.Status.Phase, launcher.Name, launcher.Status.Phase, err)
		}
		return true, ""
	}); err != nil {
		t.Fatalf("the pool did not join: %v\n%s\ntenant control plane:\n%s", err, guestLogs(), tenant.Logs())
	}

	var nd corev1.Node
	if err := workload.API.Client.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, &nd); err != nil {
		t.Fatal(err)
	}
	var ready time.Time
	for _, cond := range nd.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = cond.LastTransitionTime.Time
		}
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: machine.Spec.InfrastructureRef.Name}, vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.Status.NodeName != name || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("instance %s: phase %s on node %q, want Running on %s", vmi.Name, vmi.Status.Phase, vmi.Status.NodeName, name)
	}
	created := machine.CreationTimestamp.Time
	t.Logf("Machine %s joined through virt-launcher: Machine created to QEMU start %s (seen by polling), to Node %s registered %s and Ready %s (QEMU start to Ready %s); launcher Pod %s peak memory %d MiB",
		machine.Name, qemuSeen.Sub(created).Round(time.Second), nd.Name, nd.CreationTimestamp.Sub(created).Round(time.Second),
		ready.Sub(created).Round(time.Second), ready.Sub(qemuSeen).Round(time.Second), launcher.Name, peak>>20)
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
