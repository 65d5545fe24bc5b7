//go:build kind && node

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

package kindnode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/process"
	"github.com/cozystack/cluster-api-workers/test/vmfixture"
)

// consoleMarker is what the guest's cloud-config writes to its serial
// console: the shell computes the number, so the line appears only if the
// command ran, not because a log echoed the command.
const (
	consoleCommand = `echo "kvw-cloud-config $((6 * 7))" > /dev/ttyS0`
	consoleMarker  = "kvw-cloud-config 42"
)

// vmBoots: the real node's worker container disk (pinned by digest, as a
// WorkerPlatform pins a Kairos image), loaded as hack/kind/load.sh loads
// it, boots as a VirtualMachine of the other tiers' shape
// (test/vmfixture) through virt-launcher under emulation, on the pod
// network behind KubeVirt's masquerade binding (the binding our renderer
// writes by default), and runs the cloud-config of its NoCloud seed: the
// marker reaches the serial console, which KubeVirt's guest-console-log
// container of the launcher Pod tails.
func vmBoots(t *testing.T, cluster string, config *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	disk, err := node.BuildWorkerContainerDisk()
	if err != nil {
		t.Fatalf("building the worker container disk: %v", err)
	}
	start := time.Now()
	if err := kindScript(t, "load.sh", cluster, disk.Image.Archive); err != nil {
		t.Fatalf("loading the worker container disk: %v", err)
	}
	t.Logf("worker container disk %s (archive %d MiB) loaded in %s", disk.Image.Ref, disk.ArchiveBytes>>20, time.Since(start).Round(time.Second))

	scheme := runtime.NewScheme()
	if err := kubevirtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The shape the other tiers boot (test/vmfixture), with the cloud-config
	// of this test as its user data.
	vm := vmfixture.New(metav1.NamespaceDefault, "worker-disk", kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{
		Image: disk.Image.Ref, ImagePullPolicy: corev1.PullNever,
	}})
	userData := "#cloud-config\nstages:\n  network:\n  - name: console-marker\n    commands:\n    - '" + consoleCommand + "'\n"
	start = time.Now()
	if _, err := cs.CoreV1().Secrets(vm.Namespace).Create(ctx, vmfixture.UserData(vm.Namespace, vm.Name, []byte(userData)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the user data: %v", err)
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatalf("creating the VM: %v", err)
	}

	var console string
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err = wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
			return false, nil //nolint:nilerr // Not created yet, or the API server briefly busy.
		}
		if vmi.Status.Phase == kubevirtv1.Failed {
			return false, errInstanceFailed
		}
		pods, err := cs.CoreV1().Pods(vmi.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kubevirtv1.CreatedByLabel + "=" + string(vmi.UID)})
		if err != nil || len(pods.Items) == 0 {
			return false, nil //nolint:nilerr // The launcher Pod comes after the instance.
		}
		logs, err := cs.CoreV1().Pods(vmi.Namespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "guest-console-log"}).DoRaw(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // The container has not started yet.
		}
		console = string(logs)
		return strings.Contains(console, consoleMarker), nil
	})
	if err != nil {
		t.Logf("instance phase %s, conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		events, _ := cs.CoreV1().Events(vmi.Namespace).List(context.Background(), metav1.ListOptions{})
		if events != nil {
			for _, e := range events.Items {
				t.Logf("event %s/%s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
		t.Fatalf("the guest's console never showed %q: %v; console's end:\n%s", consoleMarker, err, process.TailOf(console, 4<<10))
	}
	if vmi.Status.Phase != kubevirtv1.Running {
		t.Errorf("instance phase %s while its guest runs, want Running", vmi.Status.Phase)
	}
	t.Logf("the guest ran its cloud-config %s after the VM's creation", time.Since(start).Round(time.Second))
}

// errInstanceFailed ends the wait: a failed instance is a failed boot,
// even though the VM's run strategy would start another.
var errInstanceFailed = errors.New("the instance is Failed")
