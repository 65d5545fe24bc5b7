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

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// Names of what the suite creates.
const (
	managementKind  = "kvw-e2e-management"
	tenantKind      = "kvw-e2e-tenant"
	namespace       = "e2e"
	clusterName     = "tenant"
	releaseVersion  = "v0.1.0"
	bootstrapImage  = "kvw-e2e/kairos-bootstrap-controller:e2e"
	infraImage      = "kvw-e2e/kubevirt-workers-controller:e2e"
	bootstrapName   = "kairos-kubeadm"
	infraName       = "kubevirt-workers"
	waitForProvider = 15 * time.Minute
)

var (
	repoRoot             = envtest.RepoRoot()
	managementKubeconfig string
	tenantKubeconfig     string
	// tenantEndpoint is the tenant control plane as the guests reach it,
	// host:port on the kind network.
	tenantEndpoint   string
	clusterctlConfig string
	clusterctlBin    string
	management       client.Client
	tenant           client.Client
)

var _ = BeforeSuite(func() {
	dir, err := os.MkdirTemp("", "kvw-e2e-")
	Expect(err).NotTo(HaveOccurred())
	cfg.workDir = dir
	managementKubeconfig = filepath.Join(dir, "management.kubeconfig")
	tenantKubeconfig = filepath.Join(dir, "tenant.kubeconfig")

	By("creating the management and tenant kind clusters")
	createKindCluster(managementKind, managementKubeconfig, "")
	createKindCluster(tenantKind, tenantKubeconfig, cfg.tenantNodeImage)
	tenantEndpoint = net.JoinHostPort(kindNodeIP(tenantKind+"-control-plane"), "6443")
	publishClusterInfoOn(tenantEndpoint)

	By("installing KubeVirt and CDI")
	installKubeVirtAndCDI()

	By("building and loading the provider images")
	for image, dockerfile := range map[string]string{bootstrapImage: "bootstrap/Dockerfile", infraImage: "infrastructure/Dockerfile"} {
		run(repoRoot, nil, "docker", "build", "-t", image, "-f", dockerfile, ".")
		run(repoRoot, nil, "kind", "load", "docker-image", image, "--name", managementKind)
	}

	By("installing Cluster API and both providers with clusterctl from the release manifests")
	writeClusterctlRepository(dir)
	clusterctlBin = strings.TrimSpace(run(repoRoot, nil, "bash", "hack/tool.sh", "clusterctl"))
	clusterctl("init", "--kubeconfig", managementKubeconfig, "--config", clusterctlConfig,
		"--bootstrap", bootstrapName, "--infrastructure", infraName, "--control-plane", "-", "--wait-providers",
		"--wait-provider-timeout", fmt.Sprint(int(waitForProvider.Seconds())))

	connectClients()
	By("fronting the tenant control plane with a Cluster")
	createTenantCluster()
	configurePlatform()
})

var _ = AfterSuite(func() {
	if cfg.keep {
		fmt.Fprintf(GinkgoWriter, "E2E_SKIP_CLEANUP=1: keeping the kind clusters %s and %s; kubeconfigs in %s\n", managementKind, tenantKind, cfg.workDir)
		return
	}
	for _, name := range []string{managementKind, tenantKind} {
		_, _ = runErr(repoRoot, nil, "kind", "delete", "cluster", "--name", name)
	}
	if cfg.workDir != "" {
		_ = os.RemoveAll(cfg.workDir)
	}
})

// run runs a command and returns its output; a failure fails the spec with
// the output.
func run(dir string, env []string, name string, args ...string) string {
	out, err := runErr(dir, env, name, args...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "%s %s:\n%s", name, strings.Join(args, " "), out)
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	fmt.Fprintf(GinkgoWriter, "$ %s %s\n", name, strings.Join(args, " "))
	//nolint:gosec,noctx // The suite's own commands (bash, docker, kind, kubectl, clusterctl); each ends on its own or with go test's timeout.
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func kubectl(kubeconfig string, args ...string) {
	run(repoRoot, nil, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

func clusterctl(args ...string) string {
	return run(repoRoot, []string{"CLUSTERCTL_DISABLE_VERSIONCHECK=true"}, clusterctlBin, args...)
}

func createKindCluster(name, kubeconfig, image string) {
	args := []string{"create", "cluster", "--name", name, "--kubeconfig", kubeconfig, "--wait", "5m"}
	if image != "" {
		args = append(args, "--image", image)
	}
	run(repoRoot, nil, "kind", args...)
}

// kindNodeIP is a kind node's address on the kind network, which the
// management cluster's pods (and the VMs in them) reach.
func kindNodeIP(container string) string {
	out := run(repoRoot, nil, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", container)
	fields := strings.Fields(out)
	Expect(fields).NotTo(BeEmpty(), "no address for %s", container)
	return fields[0]
}

// publishClusterInfoOn points the tenant's cluster-info at an address the
// guests resolve: kind publishes the control plane by its container name,
// which only Docker's DNS knows. The bootstrap signer signs it again.
func publishClusterInfoOn(endpoint string) {
	c := newClient(tenantKubeconfig)
	cm := &corev1.ConfigMap{}
	Expect(c.Get(ctx(), client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm)).To(Succeed())
	info, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	Expect(err).NotTo(HaveOccurred())
	for _, cluster := range info.Clusters {
		cluster.Server = "https://" + endpoint
	}
	data, err := clientcmd.Write(*info)
	Expect(err).NotTo(HaveOccurred())
	cm.Data = map[string]string{bootstrapapi.KubeConfigKey: string(data)}
	Expect(c.Update(ctx(), cm)).To(Succeed())
}

func installKubeVirtAndCDI() {
	kv := "https://github.com/kubevirt/kubevirt/releases/download/" + cfg.kubevirtVersion
	cdi := "https://github.com/kubevirt/containerized-data-importer/releases/download/" + cfg.cdiVersion
	kubectl(managementKubeconfig, "apply", "-f", kv+"/kubevirt-operator.yaml")
	kubectl(managementKubeconfig, "apply", "-f", kv+"/kubevirt-cr.yaml")
	// kind nodes rarely expose /dev/kvm; KubeVirt then emulates.
	if _, err := runErr(repoRoot, nil, "docker", "exec", managementKind+"-control-plane", "test", "-c", "/dev/kvm"); err != nil {
		kubectl(managementKubeconfig, "-n", "kubevirt", "patch", "kubevirt", "kubevirt", "--type", "merge",
			"-p", `{"spec":{"configuration":{"developerConfiguration":{"useEmulation":true}}}}`)
	}
	kubectl(managementKubeconfig, "apply", "-f", cdi+"/cdi-operator.yaml")
	kubectl(managementKubeconfig, "apply", "-f", cdi+"/cdi-cr.yaml")
	kubectl(managementKubeconfig, "-n", "kubevirt", "wait", "kubevirt", "kubevirt", "--for", "condition=Available", "--timeout", "20m")
	kubectl(managementKubeconfig, "wait", "cdi", "cdi", "--for", "condition=Available", "--timeout", "20m")
}

// writeClusterctlRepository builds the release and lays it out as a
// clusterctl local repository, with a clusterctl config naming it.
func writeClusterctlRepository(dir string) {
	release := filepath.Join(dir, "release")
	run(repoRoot, []string{"RELEASE_DIR=" + release, "BOOTSTRAP_IMAGE=" + bootstrapImage, "INFRASTRUCTURE_IMAGE=" + infraImage},
		"bash", "hack/release-manifests.sh")
	repo := filepath.Join(dir, "repository")
	copyInto := func(provider string, files ...string) string {
		to := filepath.Join(repo, provider, releaseVersion)
		Expect(os.MkdirAll(to, 0o750)).To(Succeed())
		for _, f := range files {
			matches, err := filepath.Glob(filepath.Join(release, f))
			Expect(err).NotTo(HaveOccurred())
			Expect(matches).NotTo(BeEmpty(), "the release has no %s", f)
			for _, m := range matches {
				data, err := os.ReadFile(m) //nolint:gosec // A file of the release the suite just built.
				Expect(err).NotTo(HaveOccurred())
				Expect(os.WriteFile(filepath.Join(to, filepath.Base(m)), data, 0o600)).To(Succeed()) //nolint:gosec // Into the suite's own repository directory.
			}
		}
		return to
	}
	bootstrapDir := copyInto("bootstrap-"+bootstrapName, "bootstrap-components.yaml", "metadata.yaml")
	infraDir := copyInto("infrastructure-"+infraName, "infrastructure-components.yaml", "metadata.yaml", "cluster-template*.yaml")
	config := map[string]any{"providers": []map[string]string{
		{"name": bootstrapName, "type": "BootstrapProvider", "url": "file://" + filepath.Join(bootstrapDir, "bootstrap-components.yaml")},
		{"name": infraName, "type": "InfrastructureProvider", "url": "file://" + filepath.Join(infraDir, "infrastructure-components.yaml")},
	}}
	data, err := sigsyaml.Marshal(config)
	Expect(err).NotTo(HaveOccurred())
	clusterctlConfig = filepath.Join(dir, "clusterctl.yaml")
	Expect(os.WriteFile(clusterctlConfig, data, 0o600)).To(Succeed())
}

func newClient(kubeconfig string) client.Client {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	scheme, err := harness.Scheme()
	Expect(err).NotTo(HaveOccurred())
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(rc, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func connectClients() {
	management = newClient(managementKubeconfig)
	tenant = newClient(tenantKubeconfig)
}

// createTenantCluster fronts the tenant kind cluster with a Cluster whose
// control plane is the harness's hosted control plane stand-in: initialized,
// externally managed, its endpoint the tenant's address on the kind network.
func createTenantCluster() {
	kubectl(managementKubeconfig, "apply", "-f", harness.CRDPath())
	// Cluster API's core manager reads control plane objects through the
	// aggregated role.
	Expect(client.IgnoreAlreadyExists(management.Create(ctx(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-hosted-control-planes", Labels: map[string]string{"cluster.x-k8s.io/aggregate-to-manager": "true"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{harness.HostedControlPlaneGVK.Group}, Resources: []string{"hostedcontrolplanes", "hostedcontrolplanes/status"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}}},
	}))).To(Succeed())
	Expect(client.IgnoreAlreadyExists(management.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))).To(Succeed())

	host, port, err := net.SplitHostPort(tenantEndpoint)
	Expect(err).NotTo(HaveOccurred())
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(harness.HostedControlPlaneGVK)
	cp.SetNamespace(namespace)
	cp.SetName(clusterName)
	cp.SetLabels(map[string]string{clusterv1.ClusterNameLabel: clusterName})
	var portNumber int64
	_, err = fmt.Sscanf(port, "%d", &portNumber)
	Expect(err).NotTo(HaveOccurred())
	cp.Object["spec"] = map[string]any{"version": cfg.kubernetesVersion, "controlPlaneEndpoint": map[string]any{"host": host, "port": portNumber}}
	Expect(management.Create(ctx(), cp)).To(Succeed())
	cp.Object["status"] = map[string]any{"version": cfg.kubernetesVersion, "externalManagedControlPlane": true, "initialization": map[string]any{"controlPlaneInitialized": true}}
	Expect(management.Status().Update(ctx(), cp)).To(Succeed())

	// The kubeconfig Cluster API and the bootstrap provider use, reaching
	// the tenant on the kind network, and the CA a join pins.
	internal := run(repoRoot, nil, "kind", "get", "kubeconfig", "--internal", "--name", tenantKind)
	kc, err := clientcmd.Load([]byte(internal))
	Expect(err).NotTo(HaveOccurred())
	var ca []byte
	for _, c := range kc.Clusters {
		c.Server = "https://" + tenantEndpoint
		ca = c.CertificateAuthorityData
	}
	data, err := clientcmd.Write(*kc)
	Expect(err).NotTo(HaveOccurred())
	owner := metav1.OwnerReference{APIVersion: harness.HostedControlPlaneGVK.GroupVersion().String(), Kind: harness.HostedControlPlaneGVK.Kind, Name: cp.GetName(), UID: cp.GetUID(), Controller: ptr.To(true)}
	labels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: secret.Name(clusterName, secret.Kubeconfig), Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
			Type: clusterv1.ClusterSecretType, Data: map[string][]byte{secret.KubeconfigDataName: data}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: secret.Name(clusterName, secret.ClusterCA), Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
			Type: clusterv1.ClusterSecretType, Data: map[string][]byte{secret.TLSCrtDataName: ca}},
	} {
		Expect(management.Create(ctx(), s)).To(Succeed())
	}
	Expect(management.Create(ctx(), &infrav1.KubeVirtCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName, Labels: labels},
	})).To(Succeed())
	Expect(management.Create(ctx(), &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: harness.HostedControlPlaneGVK.Group, Kind: harness.HostedControlPlaneGVK.Kind, Name: clusterName},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtCluster", Name: clusterName},
		},
	})).To(Succeed())
	Eventually(func(g Gomega) {
		c := &clusterv1.Cluster{}
		g.Expect(management.Get(ctx(), client.ObjectKey{Namespace: namespace, Name: clusterName}, c)).To(Succeed())
		g.Expect(ptr.Deref(c.Status.Initialization.ControlPlaneInitialized, false)).To(BeTrue())
		g.Expect(ptr.Deref(c.Status.Initialization.InfrastructureProvisioned, false)).To(BeTrue())
	}, 5*time.Minute, 5*time.Second).Should(Succeed())
}

// minor returns vMAJOR.MINOR of a version.
func minor(version string) string {
	parts := strings.SplitN(version, ".", 3)
	Expect(parts).To(HaveLen(3), "version %s is not vMAJOR.MINOR.PATCH", version)
	return parts[0] + "." + parts[1]
}

// configurePlatform is the hoster's setup: the tenant's Kubernetes patch
// and the Kairos disk for its minor.
func configurePlatform() {
	Eventually(func(g Gomega) {
		p := &workerclassv1.WorkerPlatform{}
		g.Expect(management.Get(ctx(), client.ObjectKey{Name: workerclassv1.PlatformName}, p)).To(Succeed())
		p.Spec.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: minor(cfg.kubernetesVersion), Patch: cfg.kubernetesVersion}}
		p.Spec.KairosImages = []workerclassv1.KairosImage{{Minor: minor(cfg.kubernetesVersion), Reference: cfg.kairosImage}}
		g.Expect(management.Update(ctx(), p)).To(Succeed())
	}, 5*time.Minute, 5*time.Second).Should(Succeed())
}
