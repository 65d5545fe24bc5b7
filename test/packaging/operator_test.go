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
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/process"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
)

// operatorBlocks are the blocks of docs/packaging.md that
// TestClusterAPIOperator runs (sh) and applies (yaml) as written, by name.
var operatorBlocks = map[string]string{"operator-configmaps": "sh", "operator-providers": "yaml"}

// operatorProviders are the providers the docs' blocks install, as the
// operator's objects name them, with the namespace each goes into.
var operatorProviders = []operatorProviderWant{
	{"CoreProvider", "cluster-api", "capi-system", clusterAPIVersion},
	{"BootstrapProvider", "kairos-kubeadm", "kairos-bootstrap-system", "v0.1.0"},
	{"InfrastructureProvider", "kubevirt-workers", "kubevirt-workers-system", "v0.1.0"},
}

// The pool's Kairos disk and the Kubernetes minor the platform maps to it.
const (
	operatorKairosImage = "registry.example.com/cozystack/kairos-worker@sha256:0e1d2c3b4a5968778695a4b3c2d1e0f0e1d2c3b4a5968778695a4b3c2d1e0f00"
	operatorMinor       = "v1.36"
)

// TestClusterAPIOperator installs Cluster API's core provider and both of
// ours with the Cluster API operator (sigs.k8s.io/cluster-api-operator,
// built at its pinned version in a module of its own by hack/tool.sh) as
// an offline hoster does: the docs' shell block makes the ConfigMaps from
// the release (`make release-manifests`) and Cluster API's core
// components, the docs' YAML block is the provider objects. The operator
// runs as its own process with its CRDs and webhooks against the harness's
// management apiserver; it installs the core provider, waits for it to be
// Ready, then installs ours from the ConfigMaps. The harness runs every
// manager in-process, so no Pod runs the Deployments the operator applied:
// the test reports each applied Deployment Available, as the kubelet and
// the deployment controller would for the running managers, and the
// operator turns that into each provider's Ready. Then the ServiceAccounts
// the operator's components bind are checked to hold every grant of the
// roles the harness runs our providers with, the operator is stopped (it
// re-applies its cache on every reconcile, and the release's webhook
// configurations name Services no Pod backs here, so the harness's own are
// put back, as TestDocsRecipes does after clusterctl init), and a Kairos
// pool joins with the CRDs and admission policies the operator installed.
func TestClusterAPIOperator(t *testing.T) {
	start := time.Now()
	ctx := t.Context()
	g := NewWithT(t)

	blocks := map[string]docBlock{}
	for _, b := range markedBlocks(t, "docs/packaging.md") {
		blocks[b.name] = b
	}
	for name, lang := range operatorBlocks {
		g.Expect(blocks).To(HaveKey(name), "docs/packaging.md has the block marked <!-- docs-test: %s -->", name)
		g.Expect(blocks[name].lang).To(Equal(lang), name)
	}
	operator := tool(t, "cluster-api-operator")
	kubectl := tool(t, "kubectl")
	releaseDir := release(t, "pod")
	g.Expect(releaseVersion(t, filepath.Join(releaseDir, "metadata.yaml"))).To(Equal("v0.1.0"), "the docs' blocks install the release v0.1.0")

	h, err := harness.Start(ctx, harness.Options{
		WorkerClasses: true,
		Images:        map[string]nodesim.Image{operatorKairosImage: {KubernetesVersion: harness.ControlPlaneKubernetesVersion, OSImage: "Kairos v3.5.3 (Ubuntu 24.04, simulated)"}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = h.Stop() })
	cfg := h.Config()

	c, _ := warningClient(t, h.Management)
	restoreWebhooks := keepWebhookConfigurations(ctx, t, c)
	op := installOperator(t, operator, cfg)

	t.Run("the docs' ConfigMaps and provider objects", func(t *testing.T) {
		g := NewWithT(t)
		work := t.TempDir()
		g.Expect(os.MkdirAll(filepath.Join(work, "out"), 0o750)).To(Succeed())
		g.Expect(os.Symlink(releaseDir, filepath.Join(work, "out", "v0.1.0"))).To(Succeed())
		capi, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
		g.Expect(err).NotTo(HaveOccurred())
		coreDir := filepath.Join(work, "cluster-api", clusterAPIVersion)
		g.Expect(os.MkdirAll(coreDir, 0o750)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(coreDir, "core-components.yaml"), []byte(coreComponents(t, capi)), 0o600)).To(Succeed())
		metadata, err := os.ReadFile(filepath.Join(capi, "metadata.yaml")) //nolint:gosec // Cluster API's module.
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(coreDir, "metadata.yaml"), metadata, 0o600)).To(Succeed()) //nolint:gosec // Into the test's own directory.

		bin := t.TempDir()
		g.Expect(os.Symlink(kubectl, filepath.Join(bin, "kubectl"))).To(Succeed())
		script := filepath.Join(t.TempDir(), "configmaps.sh")
		g.Expect(os.WriteFile(script, []byte("set -euo pipefail\n"+blocks["operator-configmaps"].script+"\n"), 0o600)).To(Succeed())
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		out, err := commandIn(runCtx, []string{
			"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
			"HOME=" + t.TempDir(),
			"KUBECONFIG=" + writeKubeconfig(t, cfg),
		}, work, "bash", script)
		g.Expect(err).NotTo(HaveOccurred(), "the docs' operator-configmaps block, as written:\n%s\noutput:\n%s", blocks["operator-configmaps"].script, out)

		objs := decode(t, []byte(blocks["operator-providers"].script))
		g.Expect(objs).To(HaveLen(len(operatorProviders)))
		for i, o := range objs {
			want := operatorProviders[i]
			g.Expect([]string{o.GetKind(), o.GetName(), o.GetNamespace()}).To(Equal([]string{want.kind, want.name, want.namespace}))
			g.Expect(c.Create(ctx, o, strict)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
		}
	})
	if t.Failed() {
		return
	}

	t.Run("the operator installs the providers", func(t *testing.T) {
		g := NewWithT(t)
		// The managers run in the harness: report what the kubelet and
		// the deployment controller would of their Deployments.
		waitProvidersInstalled(ctx, g, c, op, operatorProviders)

		for _, p := range providers {
			dep := deployment(t, readObjects(t, filepath.Join(releaseDir, p.components)))
			installed := &appsv1.Deployment{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(dep), installed)).To(Succeed(), "the operator applied the %s manager", p.name)
			g.Expect(installed.Labels).To(HaveKeyWithValue(providerLabel, p.label))
			g.Expect(installed.Spec.Template.Spec.Containers[0].Image).To(Equal(dep.Spec.Template.Spec.Containers[0].Image))
			var args []string
			for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
				args = append(args, variableDefault.ReplaceAllString(a, "$1"))
			}
			g.Expect(installed.Spec.Template.Spec.Containers[0].Args).To(Equal(args), "the release's flags, each variable at its default")

			g.Expect(contractCRDs(ctx, g, c, p.label)).To(BeNumerically(">=", 2), "the %s CRDs are installed and labelled with the contract", p.name)

			// The harness runs our providers as users bound to the roles
			// of config/; the operator's bindings grant the installed
			// manager's ServiceAccount every one of those grants.
			sa := "system:serviceaccount:" + installed.Namespace + ":" + installed.Spec.Template.Spec.ServiceAccountName
			for _, role := range operatorHarnessRoles[p.name] {
				for _, r := range readRole(t, filepath.Join(repoRoot, role)).Rules {
					for _, group := range r.APIGroups {
						for _, resource := range r.Resources {
							for _, verb := range r.Verbs {
								resource, subresource, _ := strings.Cut(resource, "/")
								review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
									User:   sa,
									Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + installed.Namespace, "system:authenticated"},
									ResourceAttributes: &authorizationv1.ResourceAttributes{
										Group: group, Resource: resource, Subresource: subresource, Verb: verb,
									},
								}}
								g.Expect(c.Create(ctx, review)).To(Succeed())
								g.Expect(review.Status.Allowed).To(BeTrue(), "%s may %s %s/%s in group %q (%s)", sa, verb, resource, subresource, group, role)
							}
						}
					}
				}
			}
		}
		// The admission policies of both providers, which the harness does
		// not install itself.
		for _, name := range []string{"workerclass-pool-private-keys", "workerclass-pool-class-label", "kairos-bootstrap-kairosconfig-private-keys", "kairos-bootstrap-kubeconfig-secrets"} {
			policy := &unstructured.Unstructured{}
			policy.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"})
			g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, policy)).To(Succeed(), "the operator applied %s", name)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a pool joins", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(op.Stop(time.Minute)).To(Succeed())
		restoreWebhooks()
		g.Expect(h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
			p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: operatorMinor, Patch: harness.ControlPlaneKubernetesVersion}}
			p.KairosImages = []workerclassv1.KairosImage{{Minor: operatorMinor, Reference: operatorKairosImage}}
		})).To(Succeed())
		key := client.ObjectKey{Namespace: "tenant-operator", Name: "tenant"}
		_, err := h.CreateCluster(ctx, key, harness.ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		pool := harness.Pool{Cluster: key}
		objs, err := pool.Render(map[string]string{
			"WORKER_MACHINE_COUNT": "1",
			"KUBERNETES_VERSION":   harness.ControlPlaneKubernetesVersion,
			"KUBERNETES_MINOR":     operatorMinor,
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h.Apply(ctx, objs)).To(Succeed())
		var ms []clusterv1.Machine
		g.Eventually(func() (err error) {
			ms, err = h.PoolJoined(ctx, pool, 1)
			return err
		}, 10*time.Minute, time.Second).Should(Succeed(), func() string { return h.Describe(ctx, key) })
		g.Expect(ms).To(HaveLen(1))
	})
	t.Logf("installed with the Cluster API operator and joined a pool in %s", time.Since(start).Round(time.Second))
}

// variableDefault is a clusterctl variable with its default, ${NAME:=default}.
var variableDefault = regexp.MustCompile(`\$\{[A-Z0-9_]+:=([^}]*)\}`)

// operatorHarnessRoles are the roles the harness binds our providers' users
// to with the WorkerClass gate on (test/harness/rbac.go), by provider.
var operatorHarnessRoles = map[string][]string{
	"kairos-kubeadm":   {"config/bootstrap/rbac/role.yaml"},
	"kubevirt-workers": {"config/infrastructure/rbac/role.yaml", "config/workerclass/rbac/role.yaml"},
}

func readRole(t *testing.T, path string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // A role of the repository.
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return role
}

// installOperator installs what a hoster has before the operator installs
// providers: cert-manager's CRDs (the components' Issuers and
// Certificates), the operator's CRDs and its webhooks; then starts the
// operator (bin, from tool(t, "cluster-api-operator")) against cfg.
func installOperator(t *testing.T, bin string, cfg *rest.Config) *process.Process {
	t.Helper()
	g := NewWithT(t)
	operatorConfig := filepath.Join(filepath.Dir(bin), "config")
	_, err := crenvtest.InstallCRDs(cfg, crenvtest.CRDInstallOptions{
		Paths:   append(crdFiles(t, externalCRDs[0]), filepath.Join(operatorConfig, "crd", "bases")),
		MaxTime: 2 * time.Minute,
	})
	g.Expect(err).NotTo(HaveOccurred())
	webhooks := &crenvtest.WebhookInstallOptions{Paths: []string{filepath.Join(operatorConfig, "webhook", "manifests.yaml")}}
	g.Expect(webhooks.Install(cfg)).To(Succeed())
	t.Cleanup(func() { _ = webhooks.Cleanup() })
	return startOperator(t, bin, cfg, webhooks)
}

// operatorProviderWant is one of the operator's provider objects and the
// version it must install.
type operatorProviderWant struct {
	kind, name, namespace, version string
}

// waitProvidersInstalled waits until the operator reports every provider
// installed at its version and Ready, reporting the Deployments it applied
// Available (no Pod runs them here) meanwhile, as the kubelet and the
// deployment controller would.
func waitProvidersInstalled(ctx context.Context, g Gomega, c client.Client, op *process.Process, want []operatorProviderWant) {
	g.Eventually(func(g Gomega) {
		g.Expect(op.Exited()).To(BeFalse(), "the operator stopped: %v\n%s", op.Err(), op.Tail(4000))
		for _, p := range want {
			reportAvailable(ctx, g, c, p.namespace)
			provider := operatorProvider(ctx, g, c, p.kind, p.namespace, p.name)
			installed, _, _ := unstructured.NestedString(provider.Object, "status", "installedVersion")
			g.Expect(installed).To(Equal(p.version), "%s %s: %s", p.kind, p.name, conditionsOf(provider))
			g.Expect(conditionStatus(provider, "ProviderInstalled")).To(Equal("True"), "%s %s: %s", p.kind, p.name, conditionsOf(provider))
			g.Expect(conditionStatus(provider, "Ready")).To(Equal("True"), "%s %s: %s", p.kind, p.name, conditionsOf(provider))
		}
	}, 10*time.Minute, time.Second).Should(Succeed(), func() string { return op.Tail(4000) })
}

// contractCRDs counts the CRDs of a provider (label, the value of
// cluster.x-k8s.io/provider) labelled with their version for Cluster API's
// v1beta2 contract.
func contractCRDs(ctx context.Context, g Gomega, c client.Client, label string) int {
	crds := &metav1.PartialObjectMetadataList{}
	crds.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"})
	g.Expect(c.List(ctx, crds, client.MatchingLabels{providerLabel: label})).To(Succeed())
	contract := 0
	for _, crd := range crds.Items {
		if crd.Labels["cluster.x-k8s.io/v1beta2"] == "v1alpha1" {
			contract++
		}
	}
	return contract
}

// startOperator runs the operator's manager against the apiserver as its
// own process, serving its webhooks where webhooks installed them, with a
// home of its own (it reads no clusterctl configuration), and stops it with
// the test.
func startOperator(t *testing.T, bin string, cfg *rest.Config, webhooks *crenvtest.WebhookInstallOptions) *process.Process {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "management", cfg); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, //nolint:gosec,noctx // The pinned operator; stopped with the test.
		"--webhook-port", strconv.Itoa(webhooks.LocalServingPort),
		"--webhook-cert-dir", webhooks.LocalServingCertDir,
		"--health-addr", "0",
		"--diagnostics-address", "0",
		"--profiler-address", "",
	)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+dir, "XDG_CONFIG_HOME="+dir)
	p, err := process.Start("the Cluster API operator", filepath.Join(dir, "operator.log"), cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(time.Minute); err != nil {
			t.Error(err)
		}
	})
	return p
}

// reportAvailable reports every provider Deployment of the namespace
// Available with all its replicas, as the deployment controller would once
// the manager's pods were ready.
func reportAvailable(ctx context.Context, g Gomega, c client.Client, namespace string) {
	list := &appsv1.DeploymentList{}
	g.Expect(c.List(ctx, list, client.InNamespace(namespace), client.HasLabels{providerLabel})).To(Succeed())
	for i := range list.Items {
		dep := &list.Items[i]
		if deploymentAvailable(dep) {
			continue
		}
		replicas := int32(1)
		if dep.Spec.Replicas != nil {
			replicas = *dep.Spec.Replicas
		}
		now := metav1.Now()
		dep.Status = appsv1.DeploymentStatus{
			ObservedGeneration: dep.Generation,
			Replicas:           replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
			Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
				Message: "Deployment has minimum availability.", LastUpdateTime: now, LastTransitionTime: now,
			}},
		}
		g.Expect(c.Status().Update(ctx, dep)).To(Succeed())
	}
}

func deploymentAvailable(dep *appsv1.Deployment) bool {
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// operatorProvider reads one of the operator's provider objects.
func operatorProvider(ctx context.Context, g Gomega, c client.Client, kind, namespace, name string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(schema.GroupVersionKind{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Kind: kind})
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, o)).To(Succeed())
	return o
}

// conditionStatus is the status of a condition in status.conditions, or
// "" without it.
func conditionStatus(o *unstructured.Unstructured, condition string) string {
	list, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range list {
		m, _ := c.(map[string]any)
		if m["type"] == condition {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// conditionsOf says every condition of an object, for failure messages.
func conditionsOf(o *unstructured.Unstructured) string {
	list, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	var out []string
	for _, c := range list {
		m, _ := c.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v (%v: %v)", m["type"], m["status"], m["reason"], m["message"]))
	}
	return strings.Join(out, "; ")
}
