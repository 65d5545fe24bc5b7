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
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// TestNodeRunsAPod starts an apiserver and a real node registered with it,
// runs a Pod from an image built here to completion, reads its log line
// from the kubelet's log file, and stops the node, which must leave nothing
// behind. NODE_ARTIFACTS=<dir> keeps the node's logs.
func TestNodeRunsAPod(t *testing.T) {
	if err := node.Prerequisites(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	env, err := envtest.Start(ctx, envtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := env.Client
	// No controller-manager runs: the kubelets' group gets the system:node
	// role (there is no Node authorizer), the default namespace its service
	// account.
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-kubelets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}); err != nil {
		t.Fatal(err)
	}

	const name = "node-a"
	kubelet, err := env.AddUser("system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(t.TempDir(), "hello")
	t0 := time.Now()
	if err := node.GoBuild("./test/node/cmd/hello", hello); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the hello binary in %s", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	n, err := node.Start(ctx, node.Options{
		Name:         name,
		Config:       kubelet,
		Images:       []ociimage.Image{{Ref: "kvw.local/hello:v1", Files: map[string]string{"/hello": hello}, Entrypoint: []string{"/hello"}}},
		ArtifactsDir: os.Getenv("NODE_ARTIFACTS"),
	})
	if errors.Is(err, node.ErrPrerequisite) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			if err := n.Stop(); err != nil {
				t.Error(err)
			}
		}
	}()
	t.Logf("node started (kubelet running) in %s, state in %s", time.Since(t0).Round(time.Millisecond), n.Dir)
	// What Stop must remove is there while the node runs.
	if len(n.Processes()) < 3 || len(n.Cgroups()) == 0 {
		t.Fatalf("a running node shows processes %v and cgroups %v", n.Processes(), n.Cgroups())
	}

	if err := waitFor(ctx, 5*time.Minute, func() (bool, string) {
		var nd corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &nd); err != nil {
			return false, err.Error()
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		return false, "no Ready condition"
	}); err != nil {
		t.Fatalf("node %s not Ready: %v\n%s", name, err, n.LogTails())
	}
	t.Logf("node Ready %s after Start was called", time.Since(t0).Round(time.Millisecond))

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		Spec: corev1.PodSpec{
			NodeName:                     name,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           "kvw.local/hello:v1",
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"built", "here"},
			}},
		},
	}
	t1 := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 3*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		if pod.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod failed: %+v\n%s", pod.Status, n.LogTails())
		}
		return pod.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("phase %s, %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	}); err != nil {
		t.Fatalf("pod not Succeeded: %v\n%s", err, n.LogTails())
	}
	t.Logf("pod Succeeded %s after it was created", time.Since(t1).Round(time.Millisecond))
	logs, err := n.ContainerLog("default", "hello", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from a pod on the test node: built here\n"; logs != want {
		t.Fatalf("container log %q, want %q", logs, want)
	}
	t.Logf("container log: %q", logs)

	// What virt-handler will need (stage 3): a privileged container with
	// the node's PID namespace and a bidirectional host path mount.
	if err := os.MkdirAll(filepath.Join(n.Dir, "hostpath"), 0o750); err != nil {
		t.Fatal(err)
	}
	privileged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "privileged"},
		Spec: corev1.PodSpec{
			NodeName:                     name,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			HostPID:                      true,
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           "kvw.local/hello:v1",
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"privileged"},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeMounts: []corev1.VolumeMount{{
					Name: "host", MountPath: "/host", MountPropagation: ptr.To(corev1.MountPropagationBidirectional),
				}},
			}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(n.Dir, "hostpath"), Type: ptr.To(corev1.HostPathDirectory),
			}}}},
		},
	}
	t1 = time.Now()
	if err := c.Create(ctx, privileged); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 3*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(privileged), privileged); err != nil {
			return false, err.Error()
		}
		if privileged.Status.Phase == corev1.PodFailed {
			t.Fatalf("privileged pod failed: %+v\n%s", privileged.Status, n.LogTails())
		}
		return privileged.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("phase %s, %+v", privileged.Status.Phase, privileged.Status.ContainerStatuses)
	}); err != nil {
		t.Fatalf("privileged pod not Succeeded: %v\n%s", err, n.LogTails())
	}
	t.Logf("privileged pod (hostPID, bidirectional host path) Succeeded %s after it was created", time.Since(t1).Round(time.Millisecond))

	// A pod still running when the node stops: Stop must end its
	// container and sandbox and leave none of their mounts, network
	// namespace or cgroups.
	sleeper := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sleeper"},
		Spec: corev1.PodSpec{
			NodeName:                     name,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "pause",
				Image:           node.PauseImage,
				ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	t1 = time.Now()
	if err := c.Create(ctx, sleeper); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 3*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(sleeper), sleeper); err != nil {
			return false, err.Error()
		}
		return sleeper.Status.Phase == corev1.PodRunning && sleeper.Status.PodIP != "", fmt.Sprintf("phase %s, IP %q", sleeper.Status.Phase, sleeper.Status.PodIP)
	}); err != nil {
		t.Fatalf("pod not Running: %v\n%s", err, n.LogTails())
	}
	if !strings.HasPrefix(sleeper.Status.PodIP, "10.254.64.") {
		t.Fatalf("pod IP %s is not from the node's pod range 10.254.64.0/24", sleeper.Status.PodIP)
	}
	t.Logf("second pod Running with IP %s %s after it was created", sleeper.Status.PodIP, time.Since(t1).Round(time.Millisecond))
	mounts := n.Mounts()
	if len(mounts) == 0 {
		t.Fatal("the node shows no mounts under its directory while a pod runs")
	}

	running := len(n.Processes())
	cgroups := len(n.Cgroups())
	t2 := time.Now()
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatalf("stopping the node: %v", err)
	}
	t.Logf("node stopped in %s: none of its %d processes, %d cgroups and %d mounts left; host iptables, links, sysctls and default paths as before", time.Since(t2).Round(time.Millisecond), running, cgroups, len(mounts))
	if left := n.Processes(); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
	if left := n.Cgroups(); len(left) > 0 {
		t.Fatalf("cgroups left: %v", left)
	}
	if _, err := os.Stat(n.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("node directory %s still there: %v", n.Dir, err)
	}
}

func waitFor(ctx context.Context, timeout time.Duration, check func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := check()
		if ok {
			return nil
		}
		if state != last {
			last = state
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", timeout, strings.TrimSpace(last))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
