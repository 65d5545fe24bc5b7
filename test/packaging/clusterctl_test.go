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
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	bootstrapadmission "github.com/cozystack/cluster-api-workers/bootstrap/webhooks/admission"
	"github.com/cozystack/cluster-api-workers/exp/workerclass"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	infrasetup "github.com/cozystack/cluster-api-workers/infrastructure/setup"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

const (
	// clusterAPIVersion is the Cluster API release go.mod pins: clusterctl
	// is built from it and its core provider is installed from it.
	clusterAPIVersion = "v1.14.2"
	clusterName       = "demo"
)

var strict = client.FieldValidation(metav1.FieldValidationStrict)

// sampleVariables fill the variables a flavor requires, as a user would.
// A flavor that requires a variable missing here fails the test by name.
var sampleVariables = map[string]string{
	"CONTROL_PLANE_HOST": "demo.k8s.example.com",
	"WORKER_CLASS":       "kairos-v1-35-6-r1",
	"KAIROS_IMAGE":       "registry.example.com/workers/kairos-worker@sha256:" + strings.Repeat("0123456789abcdef", 4),
	"KUBERNETES_VERSION": "v1.35.6",
	"KUBERNETES_MINOR":   "v1.35",
}

// TestClusterctl is the round trip a user makes, with a real clusterctl built
// at the pinned Cluster API version: make a local repository from
// hack/release-manifests.sh (plus the Cluster API core provider built from
// its module), generate both providers and every cluster flavor from it,
// dry-run every generated object with strict field validation against a
// real apiserver that has every CRD and our webhooks, then `clusterctl
// init` both providers into that management cluster.
func TestClusterctl(t *testing.T) {
	ctx := t.Context()
	cc := newClusterctl(t)

	components := map[string][]*unstructured.Unstructured{}
	t.Run("generate provider", func(t *testing.T) {
		for _, p := range providers {
			t.Run(p.name, func(t *testing.T) {
				g := NewWithT(t)
				out := cc.run(t, "generate", "provider", "--"+p.kind, p.name+":"+cc.version)
				g.Expect(out).NotTo(ContainSubstring("${"), "every variable has a default")
				objs := decode(t, []byte(out))
				checkComponents(t, p, objs)
				components[p.name] = objs
			})
		}
	})

	env := startManagementCluster(ctx, t, cc.releaseDir)
	c, warnings := warningClient(t, env)

	t.Run("components pass a strict dry run", func(t *testing.T) {
		checkPodSecurityIsEnforced(ctx, t, c)
		for _, p := range providers {
			t.Run(p.name, func(t *testing.T) {
				g := NewWithT(t)
				objs := components[p.name]
				g.Expect(objs).NotTo(BeEmpty(), "generate provider ran")
				createNamespaces(ctx, t, c, objs)
				warnings.reset()
				for _, o := range objs {
					g.Expect(dryRun(ctx, c, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
				}
				g.Expect(warnings.get()).To(BeEmpty(), "the apiserver has nothing to warn about (deprecations, pod security)")
				dep := deployment(t, objs)
				g.Expect(dryRunPod(ctx, c, dep)).To(Succeed(), "the manager's pod passes restricted pod security enforcement")
			})
		}
	})

	t.Run("generate cluster", func(t *testing.T) {
		flavors := templateFiles(t, cc.releaseDir)
		names := make([]string, 0, len(flavors))
		for flavor := range flavors {
			names = append(names, flavor)
		}
		sort.Strings(names)
		for _, flavor := range names {
			t.Run("flavor="+flavor, func(t *testing.T) {
				g := NewWithT(t)
				namespace := "tenant-default"
				if flavor != "" {
					namespace = "tenant-" + flavor
				}
				args := []string{"generate", "cluster", clusterName, "--infrastructure", "kubevirt-workers:" + cc.version, "--target-namespace", namespace}
				if flavor != "" {
					args = append(args, "--flavor", flavor)
				}
				var env []string
				for _, v := range cc.requiredVariables(t, args) {
					value, ok := sampleVariables[v]
					if !ok {
						t.Fatalf("flavor %q requires %s: add a sample value to sampleVariables", flavor, v)
					}
					env = append(env, v+"="+value)
				}
				out := cc.runEnv(t, env, args...)
				g.Expect(out).NotTo(ContainSubstring("${"), "every variable is substituted")
				objs := decode(t, []byte(out))
				g.Expect(objs).NotTo(BeEmpty())
				checkClusterObjects(t, objs, namespace)

				g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
				warnings.reset()
				for _, o := range objs {
					g.Expect(dryRun(ctx, c, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
				}
				g.Expect(warnings.get()).To(BeEmpty())
			})
		}
	})

	t.Run("init", func(t *testing.T) {
		g := NewWithT(t)
		kubeconfig := writeKubeconfig(t, env.Config)
		cc.run(t, "init", "--kubeconfig", kubeconfig,
			"--core", "cluster-api:"+clusterAPIVersion,
			"--bootstrap", "kairos-kubeadm:"+cc.version,
			"--infrastructure", "kubevirt-workers:"+cc.version,
			"--control-plane", "-")

		inventory := &unstructured.UnstructuredList{}
		inventory.SetGroupVersionKind(schema.GroupVersionKind{Group: "clusterctl.cluster.x-k8s.io", Version: "v1alpha3", Kind: "ProviderList"})
		g.Expect(c.List(ctx, inventory)).To(Succeed())
		var installed []string
		for _, item := range inventory.Items {
			typ, _, _ := unstructured.NestedString(item.Object, "type")
			name, _, _ := unstructured.NestedString(item.Object, "providerName")
			version, _, _ := unstructured.NestedString(item.Object, "version")
			installed = append(installed, fmt.Sprintf("%s/%s@%s", typ, name, version))
		}
		g.Expect(installed).To(ConsistOf(
			"CoreProvider/cluster-api@"+clusterAPIVersion,
			"BootstrapProvider/kairos-kubeadm@"+cc.version,
			"InfrastructureProvider/kubevirt-workers@"+cc.version,
		))

		for _, p := range providers {
			want := deployment(t, components[p.name])
			dep := &appsv1.Deployment{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(want), dep)).To(Succeed(), "clusterctl installed the %s manager", p.name)
			g.Expect(dep.Labels).To(HaveKeyWithValue(providerLabel, p.label))
			g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal(want.Spec.Template.Spec.Containers[0].Image))
			g.Expect(dryRunPod(ctx, c, dep)).To(Succeed(), "the installed manager's pod passes restricted pod security")

			crds := &metav1.PartialObjectMetadataList{}
			crds.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"})
			g.Expect(c.List(ctx, crds, client.MatchingLabels{providerLabel: p.label})).To(Succeed())
			var contract int
			for _, crd := range crds.Items {
				if crd.Labels["cluster.x-k8s.io/v1beta2"] == "v1alpha1" {
					contract++
				}
			}
			g.Expect(contract).To(BeNumerically(">=", 2), "the %s CRDs are installed and labelled with the contract", p.name)
		}
		// The pools' policies are cluster-scoped although clusterctl gave
		// them a namespace, and bound.
		policy := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		for _, name := range []string{"workerclass-pool-private-keys", "workerclass-pool-class-label"} {
			g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, policy)).To(Succeed())
			g.Expect(policy.Spec.PolicyName).To(Equal(name))
			g.Expect(c.Get(ctx, client.ObjectKey{Name: policy.Spec.PolicyName}, &admissionregistrationv1.ValidatingAdmissionPolicy{})).To(Succeed())
		}
		// So are the bootstrap provider's, on KairosConfig(Template) and on
		// kubeconfig Secrets.
		for _, name := range []string{"kairos-bootstrap-kairosconfig-private-keys", "kairos-bootstrap-kubeconfig-secrets"} {
			g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, policy)).To(Succeed())
			g.Expect(policy.Spec.PolicyName).To(Equal(name))
			g.Expect(c.Get(ctx, client.ObjectKey{Name: policy.Spec.PolicyName}, &admissionregistrationv1.ValidatingAdmissionPolicy{})).To(Succeed())
		}
	})

	t.Run("the cluster autoscaler reads templates through the shipped role", func(t *testing.T) {
		g := NewWithT(t)
		// The identity the autoscaler's chart gives it; the role is
		// installed by init and bound by the hoster.
		const autoscaler = "system:serviceaccount:kube-system:cluster-autoscaler"
		cfg, err := env.AddUser(autoscaler, "system:serviceaccounts", "system:authenticated")
		g.Expect(err).NotTo(HaveOccurred())
		as, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		templates := &unstructured.UnstructuredList{}
		templates.SetGroupVersionKind(schema.GroupVersionKind{Group: "infrastructure.cozystack.io", Version: "v1alpha1", Kind: "KubeVirtMachineTemplateList"})
		g.Expect(as.List(ctx, templates)).To(Satisfy(apierrors.IsForbidden), "nothing lets the autoscaler read templates before the binding")

		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-autoscaler-kubevirt-workers"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubevirt-workers-cluster-autoscaler-role"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "cluster-autoscaler"}},
		}
		g.Expect(c.Create(ctx, binding)).To(Succeed())
		g.Eventually(func() error { return as.List(ctx, templates) }).Should(Succeed(), "bound, the autoscaler lists templates cluster-wide")
		g.Expect(as.List(ctx, templates, client.InNamespace("tenant-default"))).To(Succeed())
		template := &unstructured.Unstructured{}
		template.SetGroupVersionKind(schema.GroupVersionKind{Group: "infrastructure.cozystack.io", Version: "v1alpha1", Kind: "KubeVirtMachineTemplate"})
		template.SetNamespace("tenant-default")
		template.SetName("probe")
		g.Expect(as.Create(ctx, template, client.DryRunAll)).To(Satisfy(apierrors.IsForbidden), "the role is read-only")
		machines := &unstructured.UnstructuredList{}
		machines.SetGroupVersionKind(schema.GroupVersionKind{Group: "infrastructure.cozystack.io", Version: "v1alpha1", Kind: "KubeVirtMachineList"})
		g.Expect(as.List(ctx, machines)).To(Satisfy(apierrors.IsForbidden), "the role reads templates only")
	})

	t.Run("a tenant's cluster autoscaler, bound by the tenant role, acts in its namespace only", func(t *testing.T) {
		g := NewWithT(t)
		// Cozystack runs one autoscaler per tenant namespace, its service
		// account in that namespace; the hoster applies the released
		// Role and RoleBinding there with clusterctl generate yaml.
		roleFile := filepath.Join(cc.releaseDir, "cluster-autoscaler-tenant-role.yaml")
		own, other := "autoscaler-tenant-a", "autoscaler-tenant-b"
		for _, ns := range []string{own, other} {
			g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
			out := cc.runEnv(t, []string{"NAMESPACE=" + ns}, "generate", "yaml", "--from", roleFile)
			g.Expect(out).NotTo(ContainSubstring("${"), "every variable is substituted")
			for _, o := range decode(t, []byte(out)) {
				g.Expect(o.GetNamespace()).To(Equal(ns))
				g.Expect(c.Create(ctx, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			}
		}
		cfg, err := env.AddUser("system:serviceaccount:"+own+":cluster-autoscaler", "system:serviceaccounts", "system:serviceaccounts:"+own, "system:authenticated")
		g.Expect(err).NotTo(HaveOccurred())
		as, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())

		// Every request cluster-autoscaler v1.36.1's Cluster API provider
		// makes in the management cluster (cloudprovider/clusterapi, run
		// with --node-group-auto-discovery=clusterapi:namespace=<tenant>):
		// its informers, the scale subresource it reads and merge-patches,
		// the delete-machine annotation it writes, and the template it
		// scales from zero with.
		type request struct{ group, resource, subresource, verb string }
		var needs []request
		for _, r := range []string{"machinedeployments", "machinesets", "machinepools", "machines"} {
			for _, v := range []string{"get", "list", "watch"} {
				needs = append(needs, request{"cluster.x-k8s.io", r, "", v})
			}
		}
		for _, r := range []string{"machinedeployments", "machinesets", "machinepools"} {
			needs = append(needs, request{"cluster.x-k8s.io", r, "scale", "get"}, request{"cluster.x-k8s.io", r, "scale", "patch"})
		}
		needs = append(needs, request{"cluster.x-k8s.io", "machines", "", "update"})
		for _, v := range []string{"get", "list", "watch"} {
			needs = append(needs, request{"infrastructure.cozystack.io", "kubevirtmachinetemplates", "", v})
		}
		allowed := func(namespace string, r request) bool {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Group: r.group, Resource: r.resource, Subresource: r.subresource, Verb: r.verb},
			}}
			g.Expect(as.Create(ctx, review)).To(Succeed())
			return review.Status.Allowed
		}
		g.Eventually(func() bool { return allowed(own, needs[0]) }).Should(BeTrue(), "the binding took effect")
		for _, r := range needs {
			g.Expect(allowed(own, r)).To(BeTrue(), "%s in its own namespace", r)
			g.Expect(allowed(other, r)).To(BeFalse(), "%s in another tenant's namespace", r)
			g.Expect(allowed("", r)).To(BeFalse(), "%s across namespaces", r)
		}

		// The same as requests: the templates of its own namespace are
		// listed, another tenant's are refused; a scale patch is
		// authorized (the MachineDeployment does not exist) in its own
		// namespace and refused in the other.
		templates := &unstructured.UnstructuredList{}
		templates.SetGroupVersionKind(schema.GroupVersionKind{Group: "infrastructure.cozystack.io", Version: "v1alpha1", Kind: "KubeVirtMachineTemplateList"})
		g.Expect(as.List(ctx, templates, client.InNamespace(own))).To(Succeed())
		g.Expect(as.List(ctx, templates, client.InNamespace(other))).To(Satisfy(apierrors.IsForbidden), "another tenant's templates")
		template := &unstructured.Unstructured{}
		template.SetGroupVersionKind(schema.GroupVersionKind{Group: "infrastructure.cozystack.io", Version: "v1alpha1", Kind: "KubeVirtMachineTemplate"})
		g.Expect(as.Get(ctx, client.ObjectKey{Namespace: other, Name: "workers"}, template)).To(Satisfy(apierrors.IsForbidden), "another tenant's template")
		g.Expect(as.List(ctx, templates)).To(Satisfy(apierrors.IsForbidden), "templates across namespaces")
		scale := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))
		for ns, want := range map[string]func(error) bool{own: apierrors.IsNotFound, other: apierrors.IsForbidden} {
			md := &unstructured.Unstructured{}
			md.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"})
			md.SetNamespace(ns)
			md.SetName("workers")
			g.Expect(as.SubResource("scale").Patch(ctx, md, scale)).To(Satisfy(want), "a scale patch in %s", ns)
		}
	})

	t.Run("move refuses a target without the providers", func(t *testing.T) {
		g := NewWithT(t)
		source := writeKubeconfig(t, env.Config)
		targetEnv := startManagementCluster(ctx, t, cc.releaseDir)
		target := writeKubeconfig(t, targetEnv.Config)
		// Cluster API only: a second init into an envtest apiserver would
		// find clusterctl's cert-manager probe namespace still terminating
		// (no namespace controller) and try to download cert-manager.
		cc.run(t, "init", "--kubeconfig", target, "--core", "cluster-api:"+clusterAPIVersion,
			"--bootstrap", "-", "--control-plane", "-")

		_, err := cc.try(t, "move", "--kubeconfig", source, "--to-kubeconfig", target)
		g.Expect(err).To(HaveOccurred(), "clusterctl refuses to move into a management cluster that lacks our providers")
		g.Expect(err.Error()).To(And(
			ContainSubstring("provider bootstrap-kairos-kubeadm not found in the target cluster"),
			ContainSubstring("provider infrastructure-kubevirt-workers not found in the target cluster"),
		), "the refusal names each missing provider")
	})
}

// clusterctl runs the pinned clusterctl against a local repository.
type clusterctl struct {
	bin        string
	config     string
	releaseDir string
	// version is the providers' release version in the repository.
	version string
	env     []string
}

// newClusterctl lays out a clusterctl local repository
// ({base}/<type>-<name>/<version>/...) from a release rendered by
// hack/release-manifests.sh at availability level pod, adds the Cluster API
// core provider built from its module, and writes a clusterctl
// configuration that points every provider at it with file:// URLs.
func newClusterctl(t *testing.T) *clusterctl {
	t.Helper()
	g := NewWithT(t)
	releaseDir := release(t, "pod")
	version := releaseVersion(t, filepath.Join(releaseDir, "metadata.yaml"))
	repo := t.TempDir()

	copyInto := func(dst string, files ...string) {
		g.Expect(os.MkdirAll(dst, 0o750)).To(Succeed())
		for _, f := range files {
			data, err := os.ReadFile(f) //nolint:gosec // A file of the release or of Cluster API's module.
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(os.WriteFile(filepath.Join(dst, filepath.Base(f)), data, 0o600)).To(Succeed()) //nolint:gosec // Into the test's own repository directory.
		}
	}
	bootstrapDir := filepath.Join(repo, "bootstrap-kairos-kubeadm", version)
	copyInto(bootstrapDir, filepath.Join(releaseDir, "bootstrap-components.yaml"), filepath.Join(releaseDir, "metadata.yaml"))
	infraDir := filepath.Join(repo, "infrastructure-kubevirt-workers", version)
	templates, err := filepath.Glob(filepath.Join(releaseDir, "cluster-template*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	// clusterctl adds clusterclass-<name>.yaml to a topology flavor's output.
	classes, err := filepath.Glob(filepath.Join(releaseDir, "clusterclass-*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	templates = append(templates, classes...)
	copyInto(infraDir, append([]string{filepath.Join(releaseDir, "infrastructure-components.yaml"), filepath.Join(releaseDir, "metadata.yaml")}, templates...)...)

	coreDir := filepath.Join(repo, "cluster-api", clusterAPIVersion)
	capi, err := envtest.ModuleDir("sigs.k8s.io/cluster-api")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.MkdirAll(coreDir, 0o750)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(coreDir, "core-components.yaml"), []byte(coreComponents(t, capi)), 0o600)).To(Succeed())
	copyInto(coreDir, filepath.Join(capi, "metadata.yaml"))

	config := map[string]any{
		"providers": []map[string]string{
			{"name": "cluster-api", "type": "CoreProvider", "url": fileURL(filepath.Join(coreDir, "core-components.yaml"))},
			{"name": "kairos-kubeadm", "type": "BootstrapProvider", "url": fileURL(filepath.Join(bootstrapDir, "bootstrap-components.yaml"))},
			{"name": "kubevirt-workers", "type": "InfrastructureProvider", "url": fileURL(filepath.Join(infraDir, "infrastructure-components.yaml"))},
		},
	}
	data, err := yaml.Marshal(config)
	g.Expect(err).NotTo(HaveOccurred())
	home := t.TempDir()
	configFile := filepath.Join(home, "clusterctl.yaml")
	g.Expect(os.WriteFile(configFile, data, 0o600)).To(Succeed())
	return &clusterctl{
		bin:        tool(t, "clusterctl"),
		config:     configFile,
		releaseDir: releaseDir,
		version:    version,
		// Offline and isolated from the user's clusterctl and kubectl
		// configuration.
		env: []string{
			"CLUSTERCTL_DISABLE_VERSIONCHECK=true",
			"HOME=" + home,
			"XDG_CONFIG_HOME=" + home,
			"KUBECONFIG=" + filepath.Join(home, "no-kubeconfig"),
		},
	}
}

func (cc *clusterctl) run(t *testing.T, args ...string) string {
	t.Helper()
	return cc.runEnv(t, nil, args...)
}

func (cc *clusterctl) runEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, err := cc.tryEnv(t, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// try runs clusterctl and returns its output and error, for the commands
// a test expects to fail.
func (cc *clusterctl) try(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return cc.tryEnv(t, nil, args...)
}

func (cc *clusterctl) tryEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	return commandContext(ctx, append(cc.env, env...), cc.bin, append(args, "--config", cc.config)...)
}

// requiredVariables lists the variables clusterctl reports as required for
// a generate cluster command.
func (cc *clusterctl) requiredVariables(t *testing.T, args []string) []string {
	t.Helper()
	out := cc.run(t, append(args, "--list-variables")...)
	var required []string
	section := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasSuffix(line, "Variables:"):
			section = line
		case strings.HasPrefix(section, "Required") && strings.HasPrefix(strings.TrimSpace(line), "- "):
			required = append(required, strings.TrimPrefix(strings.TrimSpace(line), "- "))
		}
	}
	return required
}

// releaseVersion is the first release of the newest series in metadata.yaml.
func releaseVersion(t *testing.T, metadata string) string {
	t.Helper()
	data, err := os.ReadFile(metadata) //nolint:gosec // The release's metadata.yaml.
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion    string `json:"apiVersion"`
		Kind          string `json:"kind"`
		ReleaseSeries []struct {
			Major, Minor int
			Contract     string
		} `json:"releaseSeries"`
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	g := NewWithT(t)
	g.Expect(m.APIVersion).To(Equal("clusterctl.cluster.x-k8s.io/v1alpha3"))
	g.Expect(m.Kind).To(Equal("Metadata"))
	g.Expect(m.ReleaseSeries).NotTo(BeEmpty())
	newest := m.ReleaseSeries[0]
	for _, s := range m.ReleaseSeries {
		g.Expect(s.Contract).To(Equal("v1beta2"), "every series implements the v1beta2 contract")
		if s.Major > newest.Major || (s.Major == newest.Major && s.Minor > newest.Minor) {
			newest = s
		}
	}
	return fmt.Sprintf("v%d.%d.0", newest.Major, newest.Minor)
}

// coreComponents renders the Cluster API core provider from its module's
// config/default, with the released controller image.
func coreComponents(t *testing.T, capiModule string) string {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(capiModule, "core", "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: gcr.io/k8s-staging-cluster-api/cluster-api-controller
  newName: registry.k8s.io/cluster-api/cluster-api-controller
  newTag: %s
`, rel, clusterAPIVersion)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := buildKustomization(t, dir)
	return out
}

func fileURL(path string) string {
	return (&url.URL{Scheme: "file", Path: path}).String()
}

// startManagementCluster starts an apiserver with every CRD the generated
// objects need (ours, Cluster API's, KubeVirt and CDI, cert-manager, the
// Kamaji control plane and the Talos bootstrap provider) and serves our
// webhooks in-process behind the webhook configurations of the release.
func startManagementCluster(ctx context.Context, t *testing.T, releaseDir string) *envtest.Environment {
	t.Helper()
	g := NewWithT(t)
	scheme := envtest.DefaultScheme()
	g.Expect(infrasetup.AddToScheme(scheme)).To(Succeed())
	g.Expect(bootstrapv1.AddToScheme(scheme)).To(Succeed())

	webhooks := t.TempDir()
	var configs []string
	for _, p := range providers {
		for _, o := range readObjects(t, filepath.Join(releaseDir, p.components)) {
			if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
				data, err := yaml.Marshal(o.Object)
				g.Expect(err).NotTo(HaveOccurred())
				configs = append(configs, string(data))
			}
		}
	}
	g.Expect(os.WriteFile(filepath.Join(webhooks, "webhooks.yaml"), []byte(strings.Join(configs, "---\n")), 0o600)).To(Succeed())

	env, err := envtest.Start(ctx, envtest.Options{
		Scheme:       scheme,
		CRDPaths:     append(envtest.ExternalCRDPaths(), externalCRDFiles(t)...),
		WebhookPaths: []string{webhooks},
		SetupWebhooks: func(mgr ctrl.Manager) error {
			if err := bootstrapadmission.SetupWebhooksWithManager(mgr); err != nil {
				return err
			}
			if err := infrasetup.Webhooks(mgr, nil, placement.DefaultPolicy()); err != nil {
				return err
			}
			return workerclass.SetupWebhooksWithManager(mgr, workerclass.DefaultWebhookOptions())
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	// Every webhook the release configures is served by the managers'
	// handlers; an unserved path would fail closed for its kind.
	mux := env.Manager.GetWebhookServer().WebhookMux()
	for _, c := range configs {
		for _, path := range webhookPaths(t, c) {
			_, pattern := mux.Handler(&http.Request{Method: http.MethodPost, URL: &url.URL{Path: path}})
			g.Expect(pattern).To(Equal(path), "a manager serves the webhook path %s", path)
		}
	}
	return env
}

func webhookPaths(t *testing.T, config string) []string {
	t.Helper()
	var w struct {
		Webhooks []admissionregistrationv1.ValidatingWebhook `json:"webhooks"`
	}
	if err := yaml.Unmarshal([]byte(config), &w); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, h := range w.Webhooks {
		if h.ClientConfig.Service != nil && h.ClientConfig.Service.Path != nil {
			paths = append(paths, *h.ClientConfig.Service.Path)
		}
	}
	return paths
}

// warningCollector records the apiserver's warnings.
type warningCollector struct {
	mu   sync.Mutex
	list []string
}

func (w *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningCollector) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = nil
}

func (w *warningCollector) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

func warningClient(t *testing.T, env *envtest.Environment) (client.Client, *warningCollector) {
	t.Helper()
	warnings := &warningCollector{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warnings
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, warnings
}

// dryRun asks the apiserver to create the object, or to update it when it
// exists (envtest installs our CRDs), without persisting it and refusing
// unknown or duplicate fields.
func dryRun(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	err := c.Create(ctx, o.DeepCopy(), client.DryRunAll, strict)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(o.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), existing); err != nil {
		return err
	}
	update := o.DeepCopy()
	update.SetResourceVersion(existing.GetResourceVersion())
	return c.Update(ctx, update, client.DryRunAll, strict)
}

// createNamespaces creates the Namespaces among the objects for real, so
// the namespaced objects can be dry-run into them.
func createNamespaces(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, ns := range byKind(objs, "Namespace") {
		if err := c.Create(ctx, ns.DeepCopy(), strict); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", ns.GetName(), err)
		}
	}
}

// restrictedNamespace enforces the restricted Pod Security profile, as a
// hoster labels a provider's namespace (checkPodSecurityIsEnforced makes
// it).
const restrictedNamespace = "pod-security-control"

// dryRunPod asks the apiserver to admit a Pod with the Deployment's pod
// template in restrictedNamespace (the release's own Namespace enforces
// nothing, see config/base/namespace.yaml).
func dryRunPod(ctx context.Context, c client.Client, dep *appsv1.Deployment) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-pod-security", Namespace: restrictedNamespace, Labels: dep.Spec.Template.Labels},
		Spec:       *dep.Spec.Template.Spec.DeepCopy(),
	}
	return c.Create(ctx, pod, client.DryRunAll, strict)
}

// checkPodSecurityIsEnforced proves that envtest's apiserver enforces pod
// security, so dryRunPod succeeding means something: a privileged pod in a
// restricted namespace is refused.
func checkPodSecurityIsEnforced(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	g := NewWithT(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restrictedNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: ns.Name}}
	dep.Spec.Template.Spec.Containers = []corev1.Container{{
		Name: "manager", Image: "registry.example.com/manager:v1",
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
	}}
	err := dryRunPod(ctx, c, dep)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a privileged pod is refused, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("PodSecurity"))
}

// checkClusterObjects checks a generated cluster or pool: every namespaced
// object in the target namespace and labelled with the cluster (clusterctl
// move and Cluster API find them so), references that resolve within the
// output, and health checks that select the pool's machines.
func checkClusterObjects(t *testing.T, objs []*unstructured.Unstructured, namespace string) {
	t.Helper()
	g := NewWithT(t)
	type key struct{ group, kind, name string }
	present := map[key]bool{}
	classObjects := map[key]bool{}
	for _, class := range byKind(objs, "ClusterClass") {
		classObjects[key{"cluster.x-k8s.io", "ClusterClass", class.GetName()}] = true
		for _, ref := range classTemplateRefs(t, class) {
			classObjects[key(ref)] = true
		}
	}
	for _, o := range objs {
		present[key{o.GroupVersionKind().Group, o.GetKind(), o.GetName()}] = true
		if clusterScoped[o.GetKind()] {
			continue
		}
		g.Expect(o.GetNamespace()).To(Equal(namespace), "%s %s is in the target namespace", o.GetKind(), o.GetName())
		// A ClusterClass and its templates serve every Cluster of the
		// namespace; topology labels the copies it makes.
		if o.GetKind() != "Cluster" && !classObjects[key{o.GroupVersionKind().Group, o.GetKind(), o.GetName()}] {
			g.Expect(o.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/cluster-name", clusterName), "%s %s names its cluster", o.GetKind(), o.GetName())
		}
	}
	refersTo := func(owner *unstructured.Unstructured, path ...string) {
		ref, found, _ := unstructured.NestedStringMap(owner.Object, path...)
		if !found {
			return
		}
		g.Expect(present).To(HaveKey(key{ref["apiGroup"], ref["kind"], ref["name"]}),
			"%s %s: %s refers to an object of the output", owner.GetKind(), owner.GetName(), strings.Join(path, "."))
	}
	var machineLabels []map[string]string
	for _, o := range objs {
		switch o.GetKind() {
		case "Cluster":
			refersTo(o, "spec", "controlPlaneRef")
			refersTo(o, "spec", "infrastructureRef")
		case "MachineDeployment":
			refersTo(o, "spec", "template", "spec", "bootstrap", "configRef")
			refersTo(o, "spec", "template", "spec", "infrastructureRef")
			l, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			g.Expect(labels.SelectorFromSet(sel).Matches(labels.Set(l))).To(BeTrue(), "MachineDeployment %s selects its machines", o.GetName())
			machineLabels = append(machineLabels, l)
		case "KubeVirtMachineTemplate":
			class, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "workerClass", "name")
			if class != "" {
				g.Expect(o.GetLabels()).To(HaveKeyWithValue("cozystack.io/worker-class", class), "the class controller finds users by this label")
				workerClass := key{"cozystack.io", "WorkerClass", class}
				// Even a custom class is the hoster's, published apart
				// from a tenant's template (TestHosterWorkerClassOfTheFixedImageFlavor).
				g.Expect(present).NotTo(HaveKey(workerClass), "the class is cluster-scoped and shared: it does not ship with a tenant's pool")
			}
		}
	}
	for _, o := range byKind(objs, "MachineHealthCheck") {
		sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
		matched := false
		for _, l := range machineLabels {
			matched = matched || labels.SelectorFromSet(sel).Matches(labels.Set(l))
		}
		g.Expect(matched).To(BeTrue(), "MachineHealthCheck %s selects the pool's machines", o.GetName())
	}
}

// writeKubeconfig writes a kubeconfig for the envtest apiserver, for
// clusterctl init.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := envtest.WriteKubeconfig(path, "envtest", cfg); err != nil {
		t.Fatal(err)
	}
	return path
}
