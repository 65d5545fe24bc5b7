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
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// TestKubeVirtNodeSide runs KubeVirt's node side on a real node: the
// images of virt-handler and virt-launcher built here and imported into
// the node's containerd; virt-api and virt-controller as in every tier,
// kube-controller-manager's DaemonSet controller and kube-scheduler; and
// virt-handler deployed as virt-operator deploys it. It checks that the
// DaemonSet's Pod runs its node-labeller init container (virtqemud and
// virsh from the launcher image) and that virt-handler becomes Ready and
// makes the node schedulable for instances. NODE_ARTIFACTS=<dir> keeps the
// node's logs, KUBEVIRT_LOG_DIR=<dir> virt-api's and virt-controller's.
func TestKubeVirtNodeSide(t *testing.T) {
	if err := node.Prerequisites(); err != nil {
		t.Skip(err)
	}
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()

	images, err := node.BuildKubeVirtImages()
	if err != nil {
		t.Fatal(err)
	}
	mb := func(n int64) string { return fmt.Sprintf("%d MB", n/1e6) }
	t.Logf("images: parts built or reused in %s, archives written in %s; Debian root %s on disk, archives virt-handler %s and virt-launcher %s (one shared root layer)",
		images.Stats.Parts.Round(time.Second), images.Stats.Archives.Round(time.Second), mb(images.Stats.RootfsBytes), mb(images.Stats.HandlerBytes), mb(images.Stats.LauncherBytes))

	scheme := envtest.DefaultScheme()
	if err := kubevirtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env, err := envtest.Start(ctx, envtest.Options{
		Scheme:   scheme,
		CRDPaths: envtest.ExternalCRDPaths(),
		// envtest turns the ServiceAccount admission plugin off; without it
		// no Pod gets its service account token (virt-handler's client is
		// an in-cluster one).
		APIServerArgs: map[string]string{"disable-admission-plugins": ""},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := env.Client
	kcm, err := env.StartControllerManager(envtest.DaemonSetController, envtest.NodeLifecycleController, envtest.GarbageCollectorController)
	if err != nil {
		t.Fatal(err)
	}
	defer kcm.Stop()
	scheduler, err := env.StartScheduler()
	if err != nil {
		t.Fatal(err)
	}
	defer scheduler.Stop()
	cp, err := kubevirt.Start(ctx, env, kubevirt.Options{LogDir: os.Getenv("KUBEVIRT_LOG_DIR")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()
	// No Node authorizer runs: the kubelets' group gets the system:node role.
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-kubelets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}); err != nil {
		t.Fatal(err)
	}

	// No service account controller runs: the namespace of the instances
	// gets its default service account, which the admission plugin looks up
	// for every Pod.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}); err != nil {
		t.Fatal(err)
	}

	const name = "kubevirt-node"
	kubelet, err := env.AddUser("system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	n, err := node.Start(ctx, node.Options{
		Name:         name,
		Config:       kubelet,
		Images:       []ociimage.Image{images.Handler, images.Launcher},
		ArtifactsDir: os.Getenv("NODE_ARTIFACTS"),
		StartTimeout: 10 * time.Minute,
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
	t.Logf("node started with both images imported in %s", time.Since(t0).Round(time.Second))

	// What the root CA publisher of kube-controller-manager would write: the
	// CA pods verify the apiserver with, here the node's kubernetes Service.
	for _, ns := range []string{kubevirt.Namespace, "default"} {
		if err := c.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"},
			Data:       map[string]string{"ca.crt": string(n.ServiceCA())},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// virt-handler labels its node schedulable for instances and offers the
	// devices launcher Pods ask for under emulation.
	handler := deployHandler(ctx, t, c, cp, n, scheduler)
	t.Logf("node %s labelled %s=true with devices.kubevirt.io/tun allocatable", name, kubevirtv1.NodeSchedulable)

	// An instance with no network and an empty scratch disk: virt-controller
	// creates its launcher Pod, kube-scheduler binds it, the kubelet runs
	// it, virt-handler hands the instance to virt-launcher, and libvirt starts
	// QEMU with software emulation.
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tcg"},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Domain: kubevirtv1.DomainSpec{
				Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
				Devices: kubevirtv1.Devices{
					AutoattachPodInterface: ptr.To(false),
					Disks:                  []kubevirtv1.Disk{{Name: "scratch", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}},
				},
			},
			Volumes: []kubevirtv1.Volume{{Name: "scratch", VolumeSource: kubevirtv1.VolumeSource{EmptyDisk: &kubevirtv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}}},
		},
	}
	t2 := time.Now()
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	var launcher corev1.Pod
	if err := waitFor(ctx, 10*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return false, err.Error()
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err == nil && len(pods.Items) > 0 {
			launcher = pods.Items[0]
		}
		if vmi.Status.Phase == kubevirtv1.Failed {
			t.Fatalf("instance failed: %+v\n%s\n%s", vmi.Status, podLogs(n, &launcher), podLogs(n, &handler))
		}
		return vmi.Status.Phase == kubevirtv1.Running, fmt.Sprintf("instance %s %+v; launcher Pod %s %s", vmi.Status.Phase, vmi.Status.Conditions, launcher.Name, launcher.Status.Phase)
	}); err != nil {
		t.Fatalf("instance not Running: %v\n%s\n%s", err, podLogs(n, &launcher), podLogs(n, &handler))
	}
	t.Logf("instance Running %s after it was created", time.Since(t2).Round(time.Second))
	// libvirt runs the emulator its capabilities found: KubeVirt's
	// /usr/libexec/qemu-kvm link or Debian's binary itself.
	qemu := n.CommandLines("qemu-kvm", "qemu-system-x86_64")
	if len(qemu) != 1 || !strings.Contains(qemu[0], "accel=tcg") && !strings.Contains(qemu[0], "-accel tcg") {
		t.Fatalf("want one QEMU process with software emulation in the node, found %q\n%s", qemu, podLogs(n, &launcher))
	}
	t.Logf("QEMU runs in the launcher Pod under TCG: %.200s...", qemu[0])
}

// podLogs is what each container of a pod on the node wrote (the last 40
// lines each).
func podLogs(n *node.Node, pod *corev1.Pod) string {
	if pod.Name == "" {
		return ""
	}
	var b strings.Builder
	for _, cs := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		logs, err := n.ContainerLog(pod.Namespace, pod.Name, cs.Name)
		if err != nil {
			fmt.Fprintf(&b, "--- %s/%s %s: %v\n", pod.Namespace, pod.Name, cs.Name, err)
			continue
		}
		fmt.Fprintf(&b, "--- %s/%s %s (last 40 lines)\n%s\n", pod.Namespace, pod.Name, cs.Name, tail(logs, 40))
	}
	return b.String()
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
