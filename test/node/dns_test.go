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
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/node"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// probeImage runs cmd/svcprobe: an HTTP server, or a client that resolves
// and fetches URLs.
const probeImage = "kvw.local/svcprobe:v1"

// TestServiceNameResolvesOnTheNode: a real node with kube-proxy
// (node.Options.KubeProxy) and CoreDNS (DeployDNS) gives Pods cluster
// Services by name, as CDI's host-assisted clones need
// (https://cdi-upload-<pvc>.<ns>.svc). A Pod serves HTTP behind a
// Service; another Pod resolves the Service's name through CoreDNS, in
// the forms <svc>.<ns>.svc, <svc>.<ns>.svc.cluster.local and <svc> (its
// search path), to the ClusterIP, and reaches the server through it. Each
// half is shown to be needed: before CoreDNS runs the name does not
// resolve (the ClusterIP answers, through kube-proxy alone), and a twin
// Service that kube-proxy leaves alone (service.kubernetes.io/service-proxy-name)
// resolves but does not answer. CoreDNS itself reaches the apiserver
// through the kubernetes Service, which only kube-proxy serves on such a
// node. NODE_ARTIFACTS=<dir> keeps the node's logs.
func TestServiceNameResolvesOnTheNode(t *testing.T) {
	if err := node.Prerequisites(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	env, err := envtest.Start(ctx, envtest.Options{
		// envtest turns the ServiceAccount admission plugin off; CoreDNS's
		// client is an in-cluster one and needs its token.
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
	kcm, err := env.StartControllerManager(envtest.EndpointSliceController)
	if err != nil {
		t.Fatal(err)
	}
	defer kcm.Stop()
	// No Node authorizer runs: the kubelets' group gets the system:node role.
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-kubelets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}); err != nil {
		t.Fatal(err)
	}
	const namespace = "services"
	// No service account controller runs: the namespace gets its default
	// service account, which the admission plugin looks up for every Pod.
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "default"}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	const name = "node-svc"
	kubelet, err := env.AddUser("system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	// The user the apiserver's system:node-proxier binding names.
	kubeProxy, err := env.AddUser("system:kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(t.TempDir(), "svcprobe")
	if err := node.GoBuild("./test/node/cmd/svcprobe", probe); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	n, err := node.Start(ctx, node.Options{
		Name:         name,
		Config:       kubelet,
		KubeProxy:    kubeProxy,
		Images:       []ociimage.Image{{Ref: probeImage, Files: map[string]string{"/svcprobe": probe}, Entrypoint: []string{"/svcprobe"}}},
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
	t.Logf("node started (kube-proxy and kubelet running, CoreDNS's image imported) in %s", time.Since(t0).Round(time.Millisecond))
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

	// The server, and two Services in front of it: one kube-proxy serves,
	// one it leaves alone, as it leaves every Service another proxy claims.
	web := map[string]string{"app": "web"}
	server := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web", Labels: web},
		Spec: corev1.PodSpec{
			NodeName:                     name,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "web",
				Image:           probeImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"serve", ":8080"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	service := func(svcName string, labels map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: svcName, Labels: labels},
			Spec: corev1.ServiceSpec{
				Selector: web,
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
	}
	proxied := service("web", nil)
	unproxied := service("web-unproxied", map[string]string{"service.kubernetes.io/service-proxy-name": "none"})
	t1 := time.Now()
	for _, obj := range []client.Object{server, proxied, unproxied} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitEndpoint(ctx, t, c, n, server, proxied.Name)
	t.Logf("server Ready behind Service %s (ClusterIP %s) %s after it was created; Service %s (kube-proxy leaves it) at %s",
		proxied.Name, proxied.Spec.ClusterIP, time.Since(t1).Round(time.Millisecond), unproxied.Name, unproxied.Spec.ClusterIP)

	// Before cluster DNS: the ClusterIP answers, the name does not resolve.
	byName := "http://" + proxied.Name + "." + namespace + ".svc/"
	byIP := "http://" + proxied.Spec.ClusterIP + "/"
	logs := runProbe(ctx, t, c, n, "probe-before-dns", "ok:"+byIP, "fail:"+byName)
	wantLog(t, logs, byIP+": resolved -; answered: served by web")
	wantLog(t, logs, byName+": resolved []; error: ")

	t1 = time.Now()
	if err := n.DeployDNS(ctx, c); err != nil {
		t.Fatal(err)
	}
	var dns corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "coredns-" + name}, &dns); err != nil {
		t.Fatal(err)
	}
	waitEndpoint(ctx, t, c, n, &dns, "kube-dns")
	t.Logf("CoreDNS Ready behind kube-dns %s after DeployDNS was called", time.Since(t1).Round(time.Millisecond))

	full := "http://" + proxied.Name + "." + namespace + ".svc.cluster.local/"
	short := "http://" + proxied.Name + "/"
	byNameUnproxied := "http://" + unproxied.Name + "." + namespace + ".svc/"
	logs = runProbe(ctx, t, c, n, "probe", "ok:"+byName, "ok:"+full, "ok:"+short, "fail:"+byNameUnproxied)
	wantLog(t, logs, "resolv.conf: nameserver 10.0.0.10")
	wantLog(t, logs, "resolv.conf: search "+namespace+".svc.cluster.local svc.cluster.local cluster.local")
	for _, u := range []string{byName, full, short} {
		wantLog(t, logs, u+": resolved ["+proxied.Spec.ClusterIP+"]; answered: served by web")
	}
	wantLog(t, logs, byNameUnproxied+": resolved ["+unproxied.Spec.ClusterIP+"]; error: ")
	// CoreDNS logged the queries it answered (its log plugin).
	dnsLog, err := n.ContainerLog(metav1.NamespaceSystem, dns.Name, "coredns")
	if err != nil {
		t.Fatal(err)
	}
	wantLog(t, dnsLog, `"A IN `+proxied.Name+"."+namespace+".svc.cluster.local. udp")

	t2 := time.Now()
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatalf("stopping the node: %v", err)
	}
	t.Logf("node stopped in %s, nothing left", time.Since(t2).Round(time.Millisecond))
}

// waitEndpoint waits until a Pod is Ready and a Service's EndpointSlice
// lists it as ready: kube-proxy has then what it needs to send the
// Service's connections to it.
func waitEndpoint(ctx context.Context, t *testing.T, c client.Client, n *node.Node, pod *corev1.Pod, service string) {
	t.Helper()
	if err := waitFor(ctx, 3*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		if pod.Status.PodIP == "" {
			return false, fmt.Sprintf("phase %s, no IP", pod.Status.Phase)
		}
		var list discoveryv1.EndpointSliceList
		if err := c.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
			return false, err.Error()
		}
		for _, slice := range list.Items {
			for _, ep := range slice.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, false) && len(ep.Addresses) > 0 && ep.Addresses[0] == pod.Status.PodIP {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("phase %s, conditions %+v; %d EndpointSlices of %s", pod.Status.Phase, pod.Status.Conditions, len(list.Items), service)
	}); err != nil {
		t.Fatalf("%s/%s is not a ready endpoint of Service %s: %v\n%s\n%s", pod.Namespace, pod.Name, service, err, podLogs(n, pod), n.LogTails())
	}
}

// runProbe runs svcprobe get with the URLs in a Pod and returns its log
// once it Succeeded (every URL did what it was expected to).
func runProbe(ctx context.Context, t *testing.T, c client.Client, n *node.Node, podName string, urls ...string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "services", Name: podName},
		Spec: corev1.PodSpec{
			NodeName:                     n.Name,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           probeImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            append([]string{"get"}, urls...),
			}},
		},
	}
	t0 := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 3*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		if pod.Status.Phase == corev1.PodFailed {
			t.Fatalf("%s failed: %+v\n%s", podName, pod.Status.ContainerStatuses, podLogs(n, pod))
		}
		return pod.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("phase %s, %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	}); err != nil {
		t.Fatalf("%s not Succeeded: %v\n%s\n%s", podName, err, podLogs(n, pod), n.LogTails())
	}
	logs, err := n.ContainerLog(pod.Namespace, pod.Name, "probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s Succeeded %s after it was created:\n%s", podName, time.Since(t0).Round(time.Millisecond), strings.TrimRight(logs, "\n"))
	return logs
}

// wantLog fails the test unless logs hold want.
func wantLog(t *testing.T, logs, want string) {
	t.Helper()
	if !strings.Contains(logs, want) {
		t.Fatalf("no %q in:\n%s", want, logs)
	}
}
