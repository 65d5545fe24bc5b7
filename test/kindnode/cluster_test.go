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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// kubernetesVersion is the release hack/kind/node-image.sh builds by
// default.
const kubernetesVersion = "v1.36.3"

// kindScript runs one of hack/kind's scripts, its log on the test's output.
func kindScript(t *testing.T, script string, args ...string) error {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(envtest.RepoRoot(), "hack", "kind", script)}, args...)...) //nolint:gosec,noctx // Our own script; it ends on its own.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// TestKindClusterOnPodman: a kind cluster of the node image built here
// comes up with kind's podman provider; a Pod on it resolves the API
// server's Service through CoreDNS and reaches it through its ClusterIP
// (kube-proxy) over the node's bridge network; cert-manager, installed
// as its Helm chart installs it from images built here, issues
// certificates and injects CA bundles; and KubeVirt installed as
// its release installs it (virt-operator, then a KubeVirt CR), from
// images built here, becomes Available: what test/e2e needs before our
// providers go in.
func TestKindClusterOnPodman(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("kind's podman provider runs rootful here: run as root")
	}
	name := fmt.Sprintf("kvw-kindnode-%d", time.Now().Unix()%100000)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	start := time.Now()
	if err := kindScript(t, "cluster.sh", "create", name, kubeconfig); err != nil {
		t.Fatalf("creating the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := kindScript(t, "cluster.sh", "delete", name); err != nil {
			t.Errorf("deleting the cluster: %v", err)
		}
	})
	t.Logf("cluster %s created in %s", name, time.Since(start).Round(time.Second))

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("pods reach the API server's Service by name", func(t *testing.T) { podsReachServices(t, cs) })
	t.Run("cert-manager issues certificates and injects CA bundles", func(t *testing.T) {
		certManagerIssues(t, name, kubeconfig, config, cs)
	})
	if !t.Run("KubeVirt becomes Available", func(t *testing.T) {
		start := time.Now()
		// The script waits for the KubeVirt CR's Available condition.
		if err := kindScript(t, "kubevirt.sh", name, kubeconfig); err != nil {
			t.Fatalf("installing KubeVirt: %v", err)
		}
		t.Logf("KubeVirt installed and Available in %s", time.Since(start).Round(time.Second))
		ds, err := cs.AppsV1().DaemonSets("kubevirt").Get(context.Background(), "virt-handler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ds.Status.NumberReady != 1 {
			t.Errorf("virt-handler Pods ready: %d, want the node's", ds.Status.NumberReady)
		}
	}) {
		return
	}
	t.Run("a VM boots from the worker container disk", func(t *testing.T) { vmBoots(t, name, config, cs) })
}

// podsReachServices runs a Pod that resolves the API server's Service
// through CoreDNS and reaches /livez through its ClusterIP.
func podsReachServices(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// CoreDNS (kubeadm's Deployment, our image) is ready some seconds
	// after the node: kind waits for the node alone.
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // Not created yet, or the API server briefly busy.
		}
		return d.Status.ReadyReplicas > 0, nil
	})
	if err != nil {
		t.Fatalf("CoreDNS is not ready: %v", err)
	}

	// kube-proxy's image is the node's Debian root with kube-proxy: it has
	// a shell, getent and curl. /livez is open to anonymous clients.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "service-probe"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           Repository + "/kube-proxy:" + kubernetesVersion,
				ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", `set -e
getent hosts kubernetes.default.svc.cluster.local
curl --silent --show-error --insecure --max-time 10 --retry 10 --retry-all-errors https://kubernetes.default.svc.cluster.local/livez
echo`},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(probe.Namespace).Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // The API server may be briefly busy; poll again.
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, _ := cs.CoreV1().Pods(probe.Namespace).GetLogs(probe.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	t.Logf("probe log:\n%s", logs)
	if err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("the probe Pod ended %q (%v)", phase, err)
	}
	lines := strings.Split(strings.TrimSpace(string(logs)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "10.96.0.1 ") || lines[1] != "ok" {
		t.Errorf("want the Service's ClusterIP resolved and /livez answering ok, got %q", lines)
	}
}
