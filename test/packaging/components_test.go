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

package packaging

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	hostnameKey = corev1.LabelHostname
	zoneKey     = corev1.LabelTopologyZone
)

// TestDefaultAvailabilityIsPod: a release rendered without AVAILABILITY is
// the pod level, two replicas and a disruption budget, so a rollout or the
// loss of one manager Pod never stops admission of pools and machines
// (docs/packaging.md, "Availability levels").
func TestDefaultAvailabilityIsPod(t *testing.T) {
	g := NewWithT(t)
	byDefault, pod := release(t, ""), release(t, "pod")
	for _, p := range providers {
		want, err := os.ReadFile(filepath.Join(pod, p.components)) //nolint:gosec // A file of a release the test built.
		g.Expect(err).NotTo(HaveOccurred())
		got, err := os.ReadFile(filepath.Join(byDefault, p.components)) //nolint:gosec // A file of a release the test built.
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal(string(want)), "%s without AVAILABILITY", p.components)
	}
}

// TestAvailabilityLevels renders both providers at every availability level
// (seed 004: leader-elected managers run 1 replica at none and 2 above; more
// than one replica gets a PodDisruptionBudget; node spreads over hostnames,
// zone over zones) and checks each rendering against the rules every level
// shares.
func TestAvailabilityLevels(t *testing.T) {
	levels := []struct {
		level    string
		replicas int32
		// required are topology keys the replicas must spread over
		// (DoNotSchedule); preferred are keys they should spread over.
		required, preferred []string
	}{
		{level: "none", replicas: 1},
		{level: "pod", replicas: 2},
		{level: "node", replicas: 2, required: []string{hostnameKey}},
		{level: "zone", replicas: 2, required: []string{zoneKey}, preferred: []string{hostnameKey}},
	}
	for _, l := range levels {
		dir := release(t, l.level)
		for _, p := range providers {
			t.Run(l.level+"/"+p.name, func(t *testing.T) {
				g := NewWithT(t)
				objs := readObjects(t, filepath.Join(dir, p.components))
				checkComponents(t, p, objs)

				dep := deployment(t, objs)
				g.Expect(dep.Spec.Replicas).To(HaveValue(Equal(l.replicas)), "replicas at level %s", l.level)
				pdbs := byKind(objs, "PodDisruptionBudget")
				if l.replicas == 1 {
					g.Expect(pdbs).To(BeEmpty(), "a single replica gets no disruption budget: it would block every drain")
				} else {
					g.Expect(pdbs).To(HaveLen(1), "more than one replica gets a disruption budget")
					pdb := &policyv1.PodDisruptionBudget{}
					convert(t, pdbs[0], pdb)
					g.Expect(pdb.Namespace).To(Equal(dep.Namespace))
					g.Expect(pdb.Spec.MinAvailable).To(HaveValue(Equal(intstr.FromInt32(1))))
					g.Expect(selects(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels)).To(BeTrue(),
						"the budget selects the manager's pods")
					g.Expect(selectsOnly(pdb.Spec.Selector.MatchLabels, p)).To(BeTrue())
					g.Expect(dep.Spec.Strategy.RollingUpdate).NotTo(BeNil())
					g.Expect(dep.Spec.Strategy.RollingUpdate.MaxUnavailable).To(HaveValue(Equal(intstr.FromInt32(0))),
						"a rolling update starts the new replica before it stops an old one")
				}

				var required, preferred []string
				for _, c := range dep.Spec.Template.Spec.TopologySpreadConstraints {
					g.Expect(c.MaxSkew).To(Equal(int32(1)))
					g.Expect(c.LabelSelector).NotTo(BeNil())
					g.Expect(selects(c.LabelSelector.MatchLabels, dep.Spec.Template.Labels)).To(BeTrue(),
						"the %s spread counts the manager's own pods", c.TopologyKey)
					g.Expect(c.MatchLabelKeys).To(ContainElement(appsv1.DefaultDeploymentUniqueLabelKey),
						"only pods of the same revision count, so a rolling update can schedule")
					switch c.WhenUnsatisfiable {
					case corev1.DoNotSchedule:
						required = append(required, c.TopologyKey)
					case corev1.ScheduleAnyway:
						preferred = append(preferred, c.TopologyKey)
					}
				}
				g.Expect(required).To(ConsistOf(l.required), "required spread at level %s", l.level)
				g.Expect(preferred).To(ConsistOf(l.preferred), "preferred spread at level %s", l.level)
			})
		}
	}
}

// checkComponents asserts what clusterctl and the issue require of a
// provider's components, whatever the availability level.
func checkComponents(t *testing.T, p provider, objs []*unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)

	// clusterctl: one Namespace, every namespaced object in it, the provider
	// label on everything.
	namespaces := byKind(objs, "Namespace")
	g.Expect(namespaces).To(HaveLen(1), "components hold exactly one Namespace")
	ns := namespaces[0]
	for _, o := range objs {
		g.Expect(o.GetLabels()).To(HaveKeyWithValue(providerLabel, p.label), "%s %s carries the provider label", o.GetKind(), o.GetName())
		switch {
		case namespacedByClusterctl[o.GetKind()]:
			// clusterctl v1.14 knows a fixed list of cluster-scoped kinds
			// and gives every other object the provider namespace; the
			// apiserver drops it from a cluster-scoped object.
			g.Expect(o.GetNamespace()).To(Or(BeEmpty(), Equal(ns.GetName())), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
		case clusterScoped[o.GetKind()]:
			g.Expect(o.GetNamespace()).To(BeEmpty(), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
		default:
			g.Expect(o.GetNamespace()).To(Equal(ns.GetName()), "%s %s lives in the provider namespace", o.GetKind(), o.GetName())
		}
	}
	for label := range ns.GetLabels() {
		g.Expect(label).NotTo(HavePrefix("pod-security.kubernetes.io/"),
			"the Namespace changes no admission: clusterctl and the operator merge it into a namespace other providers may share")
	}

	// The manager: one container named manager (clusterctl finds images by
	// it), restricted security context, requests and limits, probes, leader
	// election.
	dep := deployment(t, objs)
	pod := dep.Spec.Template.Spec
	g.Expect(pod.Containers).To(HaveLen(1))
	g.Expect(pod.InitContainers).To(BeEmpty())
	c := pod.Containers[0]
	g.Expect(c.Name).To(Equal("manager"))
	g.Expect(c.Image).To(HavePrefix(p.image+":"), "the image Tilt builds and releases replace")
	checkRestricted(t, pod)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		g.Expect(c.Resources.Requests).To(HaveKey(r), "requests %s", r)
		g.Expect(c.Resources.Limits).To(HaveKey(r), "limits %s", r)
		request, limit := c.Resources.Requests[r], c.Resources.Limits[r]
		g.Expect(request.Cmp(limit)).To(BeNumerically("<=", 0), "the %s request fits its limit", r)
	}
	// The Go runtime's soft memory limit is the container's memory limit,
	// in bytes (a divisor of 1Mi would make it 512 bytes).
	var memLimit *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "GOMEMLIMIT" {
			memLimit = &c.Env[i]
		}
	}
	g.Expect(memLimit).NotTo(BeNil(), "GOMEMLIMIT is set")
	g.Expect(memLimit.ValueFrom).NotTo(BeNil())
	g.Expect(memLimit.ValueFrom.ResourceFieldRef).NotTo(BeNil())
	g.Expect(memLimit.ValueFrom.ResourceFieldRef.Resource).To(Equal("limits.memory"))
	g.Expect(memLimit.ValueFrom.ResourceFieldRef.Divisor.Value()).To(Equal(int64(1)), "GOMEMLIMIT in bytes")
	g.Expect(c.Args).To(ContainElement("--leader-elect"), "replicas beyond one stand by instead of reconciling twice")
	g.Expect(c.ReadinessProbe).NotTo(BeNil())
	g.Expect(c.ReadinessProbe.HTTPGet).NotTo(BeNil())
	g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"), "ready only once the webhook server runs")
	g.Expect(c.LivenessProbe).NotTo(BeNil())
	g.Expect(c.LivenessProbe.HTTPGet).NotTo(BeNil())
	g.Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		g.Expect(containerPort(c, probe.HTTPGet.Port)).To(Equal(int32(9440)), "the manager's --health-addr")
	}

	// Every Service selects the manager's pods and targets a port it has.
	for _, o := range byKind(objs, "Service") {
		svc := &corev1.Service{}
		convert(t, o, svc)
		g.Expect(selects(svc.Spec.Selector, dep.Spec.Template.Labels)).To(BeTrue(), "Service %s selects the manager", svc.Name)
		g.Expect(selectsOnly(svc.Spec.Selector, p)).To(BeTrue(), "Service %s selects only this provider's pods", svc.Name)
		for _, port := range svc.Spec.Ports {
			g.Expect(containerPort(c, port.TargetPort)).NotTo(BeZero(), "Service %s port %s targets a container port", svc.Name, port.Name)
		}
	}
	g.Expect(dep.Spec.Selector.MatchLabels).To(HaveKeyWithValue(providerLabel, p.label),
		"the selector names the provider, so two providers sharing a namespace never select each other")

	checkWebhookWiring(t, objs, dep)
	checkRBAC(t, p, objs, dep)
}

func checkRestricted(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(pod.HostNetwork || pod.HostPID || pod.HostIPC).To(BeFalse(), "no host namespaces")
	g.Expect(pod.SecurityContext).NotTo(BeNil())
	g.Expect(pod.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
	g.Expect(pod.SecurityContext.SeccompProfile).NotTo(BeNil())
	g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	for _, v := range pod.Volumes {
		g.Expect(v.HostPath).To(BeNil(), "volume %s is not a host path", v.Name)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		g.Expect(sc).NotTo(BeNil(), "container %s has a security context", c.Name)
		g.Expect(sc.Privileged).NotTo(HaveValue(BeTrue()))
		g.Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
		g.Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
		g.Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))
		g.Expect(sc.RunAsUser).To(HaveValue(BeNumerically(">", 0)))
		g.Expect(sc.Capabilities).NotTo(BeNil())
		g.Expect(sc.Capabilities.Drop).To(ContainElement(corev1.Capability("ALL")))
		g.Expect(sc.Capabilities.Add).To(BeEmpty())
		g.Expect(sc.SeccompProfile).NotTo(BeNil())
		g.Expect(sc.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		for _, p := range c.Ports {
			g.Expect(p.HostPort).To(BeZero())
		}
	}
}

// checkWebhookWiring follows the webhooks to the Service, the serving
// certificate and the mounted Secret.
func checkWebhookWiring(t *testing.T, objs []*unstructured.Unstructured, dep *appsv1.Deployment) {
	t.Helper()
	g := NewWithT(t)
	certs := byKind(objs, "Certificate")
	g.Expect(certs).To(HaveLen(1), "one serving certificate")
	cert := certs[0]
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	g.Expect(byName(byKind(objs, "Issuer"), issuer)).NotTo(BeNil(), "the certificate's issuer %s is installed", issuer)

	var certVolume string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secretName {
			certVolume = v.Name
		}
	}
	g.Expect(certVolume).NotTo(BeEmpty(), "the manager mounts the certificate's Secret %s", secretName)
	g.Expect(dep.Spec.Template.Spec.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{
		Name: certVolume, MountPath: "/tmp/k8s-webhook-server/serving-certs", ReadOnly: true,
	}), "where the manager's --webhook-cert-dir looks")

	webhookServices := map[string]bool{}
	check := func(o *unstructured.Unstructured, configs []admissionregistrationv1.WebhookClientConfig) {
		g.Expect(o.GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", cert.GetNamespace()+"/"+cert.GetName()),
			"cert-manager injects the serving CA into %s", o.GetName())
		for _, cc := range configs {
			g.Expect(cc.Service).NotTo(BeNil(), "%s calls a Service", o.GetName())
			g.Expect(cc.Service.Namespace).To(Equal(dep.Namespace), "%s calls the provider's Service", o.GetName())
			webhookServices[cc.Service.Name] = true
		}
	}
	for _, o := range byKind(objs, "ValidatingWebhookConfiguration") {
		w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		convert(t, o, w)
		var cc []admissionregistrationv1.WebhookClientConfig
		for _, h := range w.Webhooks {
			g.Expect(h.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)), "%s fails closed", h.Name)
			g.Expect(h.TimeoutSeconds).To(HaveValue(BeNumerically("<=", 10)), "%s bounds how long a write waits for it", h.Name)
			cc = append(cc, h.ClientConfig)
		}
		check(o, cc)
	}
	for _, o := range byKind(objs, "MutatingWebhookConfiguration") {
		w := &admissionregistrationv1.MutatingWebhookConfiguration{}
		convert(t, o, w)
		var cc []admissionregistrationv1.WebhookClientConfig
		for _, h := range w.Webhooks {
			g.Expect(h.TimeoutSeconds).To(HaveValue(BeNumerically("<=", 10)), "%s bounds how long a write waits for it", h.Name)
			cc = append(cc, h.ClientConfig)
		}
		check(o, cc)
	}
	g.Expect(webhookServices).To(HaveLen(1), "all webhooks call one Service")
	for name := range webhookServices {
		svc := byName(byKind(objs, "Service"), name)
		g.Expect(svc).NotTo(BeNil(), "the webhook Service %s is installed", name)
		dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		g.Expect(dnsNames).To(ConsistOf(
			fmt.Sprintf("%s.%s.svc", name, dep.Namespace),
			fmt.Sprintf("%s.%s.svc.cluster.local", name, dep.Namespace),
		), "the certificate names the webhook Service")
	}
}

// checkRBAC checks that bindings resolve, that the manager can run its
// secured metrics endpoint and leader election, and that Cluster API core
// can manage every contract kind through the aggregated role.
func checkRBAC(t *testing.T, p provider, objs []*unstructured.Unstructured, dep *appsv1.Deployment) {
	t.Helper()
	g := NewWithT(t)
	sa := dep.Spec.Template.Spec.ServiceAccountName
	g.Expect(byName(byKind(objs, "ServiceAccount"), sa)).NotTo(BeNil(), "the manager's ServiceAccount %s is installed", sa)

	clusterRoles := map[string]*rbacv1.ClusterRole{}
	for _, o := range byKind(objs, "ClusterRole") {
		r := &rbacv1.ClusterRole{}
		convert(t, o, r)
		clusterRoles[r.Name] = r
	}
	roles := map[string]*rbacv1.Role{}
	for _, o := range byKind(objs, "Role") {
		r := &rbacv1.Role{}
		convert(t, o, r)
		roles[r.Name] = r
	}
	// managerRules are the rules bound to the manager's ServiceAccount,
	// cluster-wide and in its namespace.
	var clusterRules, namespaceRules []rbacv1.PolicyRule
	bindsManager := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == dep.Namespace
		})
	}
	for _, o := range byKind(objs, "ClusterRoleBinding") {
		b := &rbacv1.ClusterRoleBinding{}
		convert(t, o, b)
		g.Expect(b.RoleRef.Kind).To(Equal("ClusterRole"))
		g.Expect(clusterRoles).To(HaveKey(b.RoleRef.Name), "ClusterRoleBinding %s names an installed role", b.Name)
		g.Expect(bindsManager(b.Subjects)).To(BeTrue(), "ClusterRoleBinding %s binds the manager", b.Name)
		clusterRules = append(clusterRules, clusterRoles[b.RoleRef.Name].Rules...)
	}
	for _, o := range byKind(objs, "RoleBinding") {
		b := &rbacv1.RoleBinding{}
		convert(t, o, b)
		g.Expect(bindsManager(b.Subjects)).To(BeTrue(), "RoleBinding %s binds the manager", b.Name)
		switch b.RoleRef.Kind {
		case "Role":
			g.Expect(roles).To(HaveKey(b.RoleRef.Name), "RoleBinding %s names an installed role", b.Name)
			namespaceRules = append(namespaceRules, roles[b.RoleRef.Name].Rules...)
		default:
			g.Expect(clusterRoles).To(HaveKey(b.RoleRef.Name), "RoleBinding %s names an installed role", b.Name)
			namespaceRules = append(namespaceRules, clusterRoles[b.RoleRef.Name].Rules...)
		}
	}
	g.Expect(allows(clusterRules, "authentication.k8s.io", "tokenreviews", "create")).To(BeTrue(), "the secured metrics endpoint reviews tokens")
	g.Expect(allows(clusterRules, "authorization.k8s.io", "subjectaccessreviews", "create")).To(BeTrue(), "the secured metrics endpoint reviews access")
	for _, verb := range []string{"get", "create", "update"} {
		g.Expect(allows(append(namespaceRules, clusterRules...), "coordination.k8s.io", "leases", verb)).To(BeTrue(), "leader election may %s leases", verb)
	}
	// The controllers' Events (the manager's events.k8s.io recorder) in
	// every namespace; the broadcaster patches a repeat into a series.
	for _, verb := range []string{"create", "patch"} {
		g.Expect(allows(clusterRules, "events.k8s.io", "events", verb)).To(BeTrue(), "the manager's recorder may %s Events", verb)
	}

	// The aggregated role gives Cluster API core every verb it uses on every
	// kind that implements the contract.
	var aggregated []rbacv1.PolicyRule
	for _, r := range clusterRoles {
		if r.Labels["cluster.x-k8s.io/aggregate-to-manager"] == "true" {
			aggregated = append(aggregated, r.Rules...)
		}
	}
	g.Expect(aggregated).NotTo(BeEmpty(), "an aggregated ClusterRole lets Cluster API core read %s kinds", p.name)
	contractKinds := 0
	for _, o := range byKind(objs, "CustomResourceDefinition") {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		convert(t, o, crd)
		if _, ok := crd.Labels["cluster.x-k8s.io/v1beta2"]; !ok {
			continue
		}
		contractKinds++
		for _, verb := range []string{"create", "delete", "get", "list", "patch", "update", "watch"} {
			g.Expect(allows(aggregated, crd.Spec.Group, crd.Spec.Names.Plural, verb)).To(BeTrue(),
				"Cluster API core may %s %s", verb, crd.Name)
		}
	}
	g.Expect(contractKinds).To(BeNumerically(">=", 2), "the provider's CRDs carry the contract label cluster.x-k8s.io/v1beta2")
}

func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return match(r.APIGroups, group) && match(r.Resources, resource) && match(r.Verbs, verb)
	})
}

func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	deps := byKind(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("want one Deployment, the manager, got %d", len(deps))
	}
	dep := &appsv1.Deployment{}
	convert(t, deps[0], dep)
	return dep
}

func convert(tb testing.TB, u *unstructured.Unstructured, into any) {
	tb.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		tb.Fatalf("%s %s does not match its type: %v", u.GetKind(), u.GetName(), err)
	}
}

func byName(objs []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetName() == name {
			return o
		}
	}
	return nil
}

// selects reports whether a non-empty selector matches the labels.
func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

// selectsOnly reports whether a selector names the provider, so it cannot
// match the other provider's pods in a shared namespace.
func selectsOnly(selector map[string]string, p provider) bool {
	return selector[providerLabel] == p.label
}

// containerPort resolves a probe or Service target port to the container's
// port number; 0 when the container has no such port.
func containerPort(c corev1.Container, port intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

// imageName strips the tag or digest from an image reference.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}
