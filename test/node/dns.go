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

package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
)

// DNSLabels select CoreDNS's Pod, as kubeadm labels it.
var DNSLabels = map[string]string{"k8s-app": "kube-dns"}

// corednsImage builds CoreDNS (hack/tools-bins.sh coredns, cached) and
// makes its image: the static binary alone, tagged with its version.
func corednsImage() (ociimage.Image, error) {
	dir, err := envtest.ToolsBinary("coredns")
	if err != nil {
		return ociimage.Image{}, fmt.Errorf("building CoreDNS: %w", err)
	}
	bin := filepath.Join(dir, "coredns")
	// "CoreDNS-1.13.1\nlinux/amd64, go1.26.8, module-proxy"
	out, err := exec.Command(bin, "-version").Output() //nolint:gosec,noctx // The binary just built; it ends on its own.
	if err != nil {
		return ociimage.Image{}, fmt.Errorf("%s -version: %w", bin, err)
	}
	version, _, _ := strings.Cut(string(out), "\n")
	version, ok := strings.CutPrefix(strings.TrimSpace(version), "CoreDNS-")
	if !ok || version == "" {
		return ociimage.Image{}, fmt.Errorf("%s -version printed %q", bin, out)
	}
	return ociimage.Image{Ref: "kvw.local/coredns:v" + version, Files: map[string]string{"/coredns": bin}, Entrypoint: []string{"/coredns"}}, nil
}

// corefile is kubeadm's Corefile for the cluster's names, with log (each
// query in CoreDNS's log) and without forward and loop: nothing outside
// the node is reached, and pods of dnsPolicy Default get no nameserver.
const corefile = `.:53 {
    errors
    log
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    reload
    loadbalance
}
`

// DeployDNS runs cluster DNS on a node with Services (Options.KubeProxy)
// as kubeadm deploys it: in kube-system, CoreDNS's service account and
// RBAC, its Corefile, the kube-dns Service at ClusterDNS, and CoreDNS as a
// Pod bound to this node (no Deployment: no deployment controller runs),
// reaching the apiserver in-cluster, through the kubernetes Service and
// kube-proxy. It writes kube-system's kube-root-ca.crt (ServiceCA), which
// no root CA publisher writes here. The apiserver's ServiceAccount
// admission plugin must be on (envtest turns it off): CoreDNS's client
// needs its token. It returns once the objects exist; the Pod is Ready
// when CoreDNS has read the cluster's Services.
func (n *Node) DeployDNS(ctx context.Context, c client.Client) error {
	if n.dnsImage.Ref == "" {
		return errors.New("DeployDNS: the node has no Services (Options.KubeProxy)")
	}
	const ns = metav1.NamespaceSystem
	root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, root, func() error {
		root.Data = map[string]string{"ca.crt": string(n.serviceCA)}
		return nil
	}); err != nil {
		return fmt.Errorf("writing kube-system's kube-root-ca.crt: %w", err)
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "coredns"}},
		},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}, Data: map[string]string{"Corefile": corefile}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
			Spec: corev1.ServiceSpec{
				ClusterIP: n.opts.ClusterDNS,
				Selector:  DNSLabels,
				Ports: []corev1.ServicePort{
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9153, TargetPort: intstr.FromInt32(9153)},
				},
			},
		},
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns-" + n.Name, Labels: DNSLabels},
		Spec: corev1.PodSpec{
			NodeName:           n.Name,
			ServiceAccountName: "coredns",
			// CoreDNS answers for the cluster; it does not ask itself.
			DNSPolicy: corev1.DNSDefault,
			Containers: []corev1.Container{{
				Name:            "coredns",
				Image:           n.dnsImage.Ref,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"-conf", "/etc/coredns/Corefile"},
				Ports: []corev1.ContainerPort{
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
					{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
					PeriodSeconds:    10,
					FailureThreshold: 5,
				},
				// The ready plugin answers once the kubernetes plugin has
				// listed the cluster's Services: what the Service's
				// endpoint waits for.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
					ReadOnlyRootFilesystem:   ptr.To(true),
				},
			}},
			Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
				Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
			}}}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating CoreDNS's Pod: %w", err)
	}
	// The admission plugin adds the token's projected volume.
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			return nil
		}
	}
	return errors.New("CoreDNS's Pod got no service account token: turn the apiserver's ServiceAccount admission plugin on (envtest.Options.APIServerArgs disable-admission-plugins \"\")")
}
