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

package guest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"go.yaml.in/yaml/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/vmfixture"
)

const (
	timeout       = 30 * time.Second
	poll          = 50 * time.Millisecond
	image         = "registry.example.com/kairos-worker@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	tooNewImage   = "registry.example.com/kairos-worker@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	importedImage = "https://images.example.com/kairos-worker-v1.36.2.raw"
	// cloudInitImage is a CAPK-style Ubuntu disk that boots with cloud-init.
	cloudInitImage = "quay.io/capk/ubuntu-2404-container-disk:v1.36.3"
	joinTimeout    = 3 * time.Second
)

var (
	mgmt     *envtest.Environment
	workload *envtest.Workload
	vms      *infra.Infra
	nodes    *Simulator
)

func TestMain(m *testing.M) {
	flag.Parse()
	if fuzzing() {
		// Fuzz targets are pure; every fuzz worker runs TestMain, and
		// apiservers per worker would swamp the machine.
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

// fuzzing reports whether the test binary runs a fuzz target.
func fuzzing() bool {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return true
	}
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }

	scheme := envtest.DefaultScheme()
	if err := infra.AddToScheme(scheme); err != nil {
		return fail(err)
	}
	var err error
	if mgmt, err = envtest.Start(ctx, envtest.Options{Scheme: scheme, CRDPaths: envtest.ExternalCRDPaths()}); err != nil {
		return fail(err)
	}
	defer func() { _ = mgmt.Stop() }()
	if workload, err = envtest.StartWorkload(); err != nil {
		return fail(err)
	}
	defer func() { _ = workload.Stop() }()
	if err := workload.SeedKubeadmObjects(ctx, envtest.KubeadmSeed{KubernetesVersion: "v1.36.3", ClusterName: "sim"}); err != nil {
		return fail(err)
	}
	signer, err := workload.StartControllerManager(envtest.WorkloadControllers...)
	if err != nil {
		return fail(err)
	}
	defer signer.Stop()
	gc, err := mgmt.StartControllerManager(envtest.ManagementControllers...)
	if err != nil {
		return fail(err)
	}
	defer gc.Stop()
	kubeadm, err := envtest.KubeadmBinary()
	if err != nil {
		return fail(err)
	}

	mgr, err := ctrl.NewManager(mgmt.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return fail(err)
	}
	if vms, err = infra.Start(ctx, mgmt, mgr, infra.Options{}); err != nil {
		return fail(err)
	}
	defer func() { _ = vms.Stop() }()
	nodes = New(Options{
		Images: map[string]Image{
			image:          {KubernetesVersion: "v1.36.3", OSImage: "Kairos v3.5.3 (Ubuntu 24.04)"},
			tooNewImage:    {KubernetesVersion: "v1.37.0", OSImage: "Kairos v3.6.0"},
			importedImage:  {KubernetesVersion: "v1.36.2", OSImage: "Kairos v3.5.2"},
			cloudInitImage: {KubernetesVersion: "v1.36.3", OSImage: "Ubuntu 24.04.3 LTS", CloudInit: true},
		},
		HeartbeatInterval:      500 * time.Millisecond,
		NodeMonitorGracePeriod: 500 * time.Millisecond,
		JoinTimeout:            joinTimeout,
		RetryInterval:          200 * time.Millisecond,
		KubeadmBinary:          kubeadm,
	})
	if err := nodes.AddCluster(workload.Endpoint, workload.Config); err != nil {
		return fail(err)
	}
	if err := nodes.SetupWithManager(ctx, mgr); err != nil {
		return fail(err)
	}
	mgrCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = mgr.Start(mgrCtx) }()
	defer func() { stop(); <-stopped }()
	return m.Run()
}

// caPin is the kubeadm pin of the workload CA.
func caPin(t *testing.T) string {
	t.Helper()
	block, _ := pem.Decode(workload.CACert)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return pin(cert)
}

// newToken creates a bootstrap token in the workload cluster, as the
// bootstrap provider does, and returns it.
func newToken(t *testing.T, ttl time.Duration) string {
	t.Helper()
	value, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	id, secret, _ := strings.Cut(value, ".")
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			bootstrapapi.BootstrapTokenIDKey:               []byte(id),
			bootstrapapi.BootstrapTokenSecretKey:           []byte(secret),
			bootstrapapi.BootstrapTokenExpirationKey:       []byte(time.Now().Add(ttl).UTC().Format(time.RFC3339)),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
			bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
			bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(envtest.NodeBootstrapTokenGroup),
		},
	}
	if err := workload.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return value
}

func revoke(t *testing.T, token string) {
	t.Helper()
	id, _, _ := strings.Cut(token, ".")
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)}}
	if err := workload.Client.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// joinConfiguration is a worker JoinConfiguration as the Kairos bootstrap
// provider renders it.
func joinConfiguration(name, token, pin string) *kubeadmv1beta4.JoinConfiguration {
	return &kubeadmv1beta4.JoinConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeadmv1beta4.GroupVersion.String(), Kind: "JoinConfiguration"},
		NodeRegistration: kubeadmv1beta4.NodeRegistrationOptions{
			Name:   name,
			Taints: []corev1.Taint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}},
			KubeletExtraArgs: []kubeadmv1beta4.Arg{
				{Name: "provider-id", Value: "kubevirt://" + name},
				{Name: "node-labels", Value: "pool=workers,node.kubernetes.io/exclude-from-external-load-balancers=true"},
			},
		},
		Discovery: kubeadmv1beta4.Discovery{BootstrapToken: &kubeadmv1beta4.BootstrapTokenDiscovery{
			Token: token, APIServerEndpoint: workload.Endpoint, CACertHashes: []string{pin},
		}},
	}
}

// stagesConfig renders the Stages join mode: IPv4 forwarding turned on,
// the JoinConfiguration written by one stage, `kubeadm join --config` run
// by the next, the sentinel last.
func stagesConfig(t *testing.T, hostname string, join *kubeadmv1beta4.JoinConfiguration) []byte {
	t.Helper()
	return stagesConfigWithKernel(t, hostname, map[string]string{ipForwardSysctl: "1"}, join)
}

// stagesConfigWithKernel is stagesConfig with the given sysctls set
// before the join.
func stagesConfigWithKernel(t *testing.T, hostname string, sysctls map[string]string, join *kubeadmv1beta4.JoinConfiguration) []byte {
	t.Helper()
	data, err := sigsyaml.Marshal(join)
	if err != nil {
		t.Fatal(err)
	}
	const joinPath = "/run/kubeadm/kubeadm-join-config.yaml"
	notJoined := "[ ! -f " + KubeletKubeconfigPath + " ]"
	return document(t, cloudConfig{Stages: map[string][]stage{
		"initramfs": {{Name: "hostname", Hostname: hostname}},
		"network": {
			{Name: "kernel", Sysctl: sysctls},
			{Name: "write", If: notJoined, Files: []file{{Path: joinPath, Permissions: 0o600, Content: string(data)}}},
			{Name: "join", If: notJoined, Commands: []string{"kubeadm join --config " + joinPath, "rm -f " + joinPath}},
			successStage(),
		},
	}})
}

// providerConfig renders the ClusterProvider join mode.
func providerConfig(t *testing.T, hostname, role string, join *kubeadmv1beta4.JoinConfiguration) []byte {
	t.Helper()
	return providerConfigOfVersion(t, hostname, role, "v1.35.6", join)
}

// providerConfigOfVersion renders the ClusterProvider join mode with the
// given clusterConfiguration.kubernetesVersion, none when empty.
func providerConfigOfVersion(t *testing.T, hostname, role, kubernetesVersion string, join *kubeadmv1beta4.JoinConfiguration) []byte {
	t.Helper()
	join.TypeMeta = metav1.TypeMeta{}
	options := map[string]any{"joinConfiguration": join}
	if kubernetesVersion != "" {
		options["clusterConfiguration"] = map[string]any{"kubernetesVersion": kubernetesVersion}
	}
	data, err := sigsyaml.Marshal(options)
	if err != nil {
		t.Fatal(err)
	}
	return document(t, cloudConfig{
		Cluster: &clusterBlock{ClusterToken: "correlation-0123456789", ControlPlaneHost: workload.Endpoint, Role: role, Config: string(data)},
		Stages: map[string][]stage{
			"initramfs":     {{Name: "hostname", Hostname: hostname}},
			"network.after": {successStage()},
		},
	})
}

func successStage() stage {
	return stage{
		Name: "success", If: "[ -f " + KubeletKubeconfigPath + " ]",
		Systemctl: &systemctl{Enable: []string{"kubelet"}, Start: []string{"kubelet"}},
		Commands:  []string{"mkdir -p /run/cluster-api && touch " + SentinelPath},
	}
}

func document(t *testing.T, c cloudConfig) []byte {
	t.Helper()
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(cloudConfigHeader+"\n"), data...)
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-sim-"}}
	if err := mgmt.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// machine creates a VM booting root with the user data, like the
// infrastructure provider renders one, and returns its key.
func machine(t *testing.T, ns, name string, root kubevirtv1.VolumeSource, userData []byte, extra ...client.Object) client.ObjectKey {
	t.Helper()
	return machineWith(t, ns, name, root, userData, nil, extra...)
}

// machineWith is machine with the VM changed by mutate before it is
// created.
func machineWith(t *testing.T, ns, name string, root kubevirtv1.VolumeSource, userData []byte, mutate func(*kubevirtv1.VirtualMachine), extra ...client.Object) client.ObjectKey {
	t.Helper()
	secret, vm := vmfixture.UserData(ns, name, userData), vmfixture.New(ns, name, root)
	if mutate != nil {
		mutate(vm)
	}
	for _, o := range append(append([]client.Object{secret}, extra...), vm) {
		if err := mgmt.Client.Create(context.Background(), o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	return client.ObjectKeyFromObject(vm)
}

func containerDisk(ref string) kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: ref}}
}

func boot(g Gomega, vm client.ObjectKey) BootRecord {
	r, ok := nodes.Boot(vm)
	g.Expect(ok).To(BeTrue(), "%s has not booted", vm)
	return r
}

func getNode(g Gomega, name string) *corev1.Node {
	n := &corev1.Node{}
	g.Expect(workload.Client.Get(context.Background(), client.ObjectKey{Name: name}, n)).To(Succeed())
	return n
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func TestStagesJoinRegistersTheNodeAsKubeadmWouldLeaveIt(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	token := newToken(t, time.Hour)
	vm := machine(t, ns, "stages-0", containerDisk(image), stagesConfig(t, "stages-0", joinConfiguration("stages-0", token, caPin(t))))

	g.Eventually(func(g Gomega) {
		r := boot(g, vm)
		g.Expect(r.Phase).To(Equal(PhaseJoined), "boot: %+v", r)
		g.Expect(r.SentinelWritten).To(BeTrue())
		g.Expect(r.Warnings).To(BeEmpty())
		g.Expect(r.Endpoint).To(Equal(workload.Endpoint))
	}, timeout, poll).Should(Succeed())

	n := getNode(g, "stages-0")
	g.Expect(n.Spec.ProviderID).To(Equal("kubevirt://stages-0"))
	g.Expect(n.Spec.Taints).To(ConsistOf(HaveField("Key", "node.cluster.x-k8s.io/uninitialized")))
	g.Expect(n.Labels).To(HaveKeyWithValue("pool", "workers"))
	g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelHostname, "stages-0"))
	g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
	g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
	g.Expect(n.Status.Capacity.Cpu().Value()).To(BeEquivalentTo(2))
	g.Expect(n.Status.Capacity.Memory().String()).To(Equal("4Gi"))
	g.Expect(n.Status.Addresses).To(ContainElement(HaveField("Type", corev1.NodeInternalIP)))
	lease := &coordinationv1.Lease{}
	g.Expect(workload.Client.Get(context.Background(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: "stages-0"}, lease)).To(Succeed())
	// The CertificateSigningRequest the token created is not left behind.
	csrs := &certificatesv1.CertificateSigningRequestList{}
	g.Expect(workload.Client.List(context.Background(), csrs)).To(Succeed())
	g.Expect(csrs.Items).To(BeEmpty())
}

func TestClusterProviderJoinDialsControlPlaneHost(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	token := newToken(t, time.Hour)
	join := joinConfiguration("provider-0", token, caPin(t))
	// The provider dials control_plane_host and ignores apiServerEndpoint.
	join.Discovery.BootstrapToken.APIServerEndpoint = "192.0.2.1:6443"
	vm := machine(t, ns, "provider-0", containerDisk(image), providerConfig(t, "provider-0", "worker", join))
	g.Eventually(func(g Gomega) {
		r := boot(g, vm)
		g.Expect(r.Phase).To(Equal(PhaseJoined), "boot: %+v", r)
		g.Expect(r.SentinelWritten).To(BeTrue())
	}, timeout, poll).Should(Succeed())
	g.Expect(getNode(g, "provider-0").Spec.ProviderID).To(Equal("kubevirt://provider-0"))
}

// TestRefusesWhatARealNodeRefuses boots data a real node would not join
// with; each is refused with the reason the node would give, and no Node
// appears.
func TestRefusesWhatARealNodeRefuses(t *testing.T) {
	ns := namespace(t)
	valid := func(name string) *kubeadmv1beta4.JoinConfiguration {
		return joinConfiguration(name, newToken(t, time.Hour), caPin(t))
	}
	cases := []struct {
		name   string
		root   string
		data   func(name string) []byte
		reason string
	}{
		{
			name: "ca-not-pinned", root: image,
			data: func(n string) []byte {
				return stagesConfig(t, n, joinConfiguration(n, newToken(t, time.Hour), "sha256:"+strings.Repeat("ab", 32)))
			},
			reason: "none of the public keys",
		},
		{
			name: "no-ca-hash", root: image,
			data: func(n string) []byte {
				j := valid(n)
				j.Discovery.BootstrapToken.CACertHashes = nil
				return stagesConfig(t, n, j)
			},
			reason: "without caCertHashes",
		},
		{
			name: "expired-token", root: image,
			data: func(n string) []byte {
				return stagesConfig(t, n, joinConfiguration(n, newToken(t, -time.Minute), caPin(t)))
			},
			reason: "no JWS signed token",
		},
		{
			name: "unknown-token", root: image,
			data: func(n string) []byte {
				return stagesConfig(t, n, joinConfiguration(n, "abcdef.0123456789abcdef", caPin(t)))
			},
			reason: "no JWS signed token",
		},
		{
			name: "kubelet-newer-than-control-plane", root: tooNewImage,
			data:   func(n string) []byte { return stagesConfig(t, n, valid(n)) },
			reason: "higher than the control plane",
		},
		{
			name: "restricted-node-label", root: image,
			data: func(n string) []byte {
				j := valid(n)
				j.NodeRegistration.KubeletExtraArgs = append(j.NodeRegistration.KubeletExtraArgs, kubeadmv1beta4.Arg{Name: "node-labels", Value: "node-role.kubernetes.io/worker="})
				return stagesConfig(t, n, j)
			},
			reason: "unknown 'kubernetes.io' or 'k8s.io' labels",
		},
		{
			name: "invalid-node-name", root: image,
			data: func(n string) []byte {
				j := valid(n)
				j.NodeRegistration.Name = "Not_A_Name"
				return stagesConfig(t, n, j)
			},
			reason: "node name",
		},
		{
			name: "unknown-endpoint", root: image,
			data: func(n string) []byte {
				j := valid(n)
				j.Discovery.BootstrapToken.APIServerEndpoint = "127.0.0.1:1"
				return stagesConfig(t, n, j)
			},
			reason: "no API server answers",
		},
		{
			name: "provider-role-init", root: image,
			data:   func(n string) []byte { return providerConfig(t, n, "init", valid(n)) },
			reason: `cluster.role is "init"`,
		},
		{
			name: "ip-forwarding-off", root: image,
			data:   func(n string) []byte { return stagesConfigWithKernel(t, n, nil, valid(n)) },
			reason: "[ERROR FileContent--proc-sys-net-ipv4-ip_forward]",
		},
		{
			name: "provider-without-version", root: image,
			data:   func(n string) []byte { return providerConfigOfVersion(t, n, "worker", "", valid(n)) },
			reason: "failed to check if kubeadm version is greater than 131",
		},
		{
			name: "unknown-image", root: "registry.example.com/other@sha256:" + strings.Repeat("3", 64),
			data:   func(n string) []byte { return stagesConfig(t, n, valid(n)) },
			reason: "does not know what the root disk",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			vm := machine(t, ns, c.name, containerDisk(c.root), c.data(c.name))
			g.Eventually(func(g Gomega) {
				r := boot(g, vm)
				g.Expect(r.Phase).To(Equal(PhaseRefused), "boot: %+v", r)
				g.Expect(r.Error).To(ContainSubstring(c.reason))
			}, timeout+joinTimeout, poll).Should(Succeed())
			g.Expect(apierrors.IsNotFound(workload.Client.Get(context.Background(), client.ObjectKey{Name: c.name}, &corev1.Node{}))).To(BeTrue())
		})
	}
}

func TestUserDataThatIsNotACloudConfigIsIgnored(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	vm := machine(t, ns, "talos-0", containerDisk(image), []byte("version: v1alpha1\nmachine:\n  type: worker\n"))
	g.Eventually(func(g Gomega) {
		g.Expect(boot(g, vm).Phase).To(Equal(PhaseIgnored))
	}, timeout, poll).Should(Succeed())
}

// TestCrashedContainerDiskNodeGoesUnknownAndCannotRejoin: the replacement
// instance of a container-disk VM boots a blank disk; with the token
// revoked after the first join, the node never comes back.
func TestCrashedContainerDiskNodeGoesUnknownAndCannotRejoin(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	token := newToken(t, time.Hour)
	vm := machine(t, ns, "crash-0", containerDisk(image), stagesConfig(t, "crash-0", joinConfiguration("crash-0", token, caPin(t))))
	g.Eventually(func(g Gomega) { g.Expect(boot(g, vm).Phase).To(Equal(PhaseJoined)) }, timeout, poll).Should(Succeed())
	first := boot(g, vm).Instance
	revoke(t, token)

	g.Expect(vms.Hosts.Crash(vm, "")).To(Succeed())
	g.Eventually(func(g Gomega) {
		n := getNode(g, "crash-0")
		g.Expect(readyStatus(n)).To(Equal(corev1.ConditionUnknown))
		g.Expect(n.Spec.Taints).To(ContainElement(HaveField("Key", corev1.TaintNodeUnreachable)))
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		r := boot(g, vm)
		g.Expect(r.Instance).NotTo(Equal(first))
		g.Expect(r.Phase).To(Equal(PhaseRefused), "boot: %+v", r)
	}, timeout+joinTimeout, poll).Should(Succeed())
	g.Expect(readyStatus(getNode(g, "crash-0"))).To(Equal(corev1.ConditionUnknown))
}

// TestPersistentDiskNodeRejoinsWithItsCredentials: a DataVolume root keeps
// the kubelet's kubeconfig, so a new instance skips the join and the same
// Node is Ready again, without the (revoked) token.
func TestPersistentDiskNodeRejoinsWithItsCredentials(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	token := newToken(t, time.Hour)
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "persistent-0-root"},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: importedImage}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("30Gi")}}},
		},
	}
	vm := machine(t, ns, "persistent-0", kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: dv.Name}},
		stagesConfig(t, "persistent-0", joinConfiguration("persistent-0", token, caPin(t))), dv)
	g.Eventually(func(g Gomega) { g.Expect(boot(g, vm).Phase).To(Equal(PhaseJoined)) }, timeout, poll).Should(Succeed())
	g.Expect(getNode(g, "persistent-0").Status.Capacity.StorageEphemeral().String()).To(Equal("30Gi"))
	g.Expect(getNode(g, "persistent-0").Status.NodeInfo.KubeletVersion).To(Equal("v1.36.2"))
	first := boot(g, vm).Instance
	revoke(t, token)

	// KubeVirt starts the next instance at once, so the Node may be back
	// before anyone sees it Unknown: what counts is that it rejoined as the
	// same Node without the revoked token.
	g.Expect(vms.Hosts.Crash(vm, "")).To(Succeed())
	g.Eventually(func(g Gomega) {
		r := boot(g, vm)
		g.Expect(r.Instance).NotTo(Equal(first))
		g.Expect(r.Phase).To(Equal(PhaseJoined), "boot: %+v", r)
		n := getNode(g, "persistent-0")
		g.Expect(readyStatus(n)).To(Equal(corev1.ConditionTrue))
		g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", corev1.TaintNodeUnreachable)))
	}, timeout, poll).Should(Succeed())
}

// TestKubeletThatCannotReportRetriesWithItsCredentials: the join is done
// and the Node registered, but its status cannot be written (here an
// admission policy refuses it, as an apiserver going down would fail it).
// The kubelet retries with its own credentials, as a real one does: the
// token revoked meanwhile does not matter.
func TestKubeletThatCannotReportRetriesWithItsCredentials(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-node-status-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes/status"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "!object.metadata.name.startsWith('stuck-')", Message: "refused by the test"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	g.Expect(workload.Client.Create(ctx, policy)).To(Succeed())
	g.Expect(workload.Client.Create(ctx, binding)).To(Succeed())
	// The apiserver enforces a new policy a moment after it is created:
	// wait until a probe Node's status is refused before anything boots.
	probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stuck-probe"}}
	g.Expect(workload.Client.Create(ctx, probe)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(ctx, probe) })
	g.Eventually(func() error {
		probe.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		return workload.Client.Status().Update(ctx, probe)
	}, timeout, poll).Should(MatchError(ContainSubstring("refused by the test")))
	g.Expect(workload.Client.Delete(ctx, probe)).To(Succeed())
	lifted := false
	lift := func() {
		if !lifted {
			lifted = true
			g.Expect(workload.Client.Delete(ctx, binding)).To(Succeed())
			g.Expect(workload.Client.Delete(ctx, policy)).To(Succeed())
		}
	}
	t.Cleanup(lift)

	t.Cleanup(func() { _ = workload.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stuck-0"}}) })
	token := newToken(t, time.Hour)
	vm := machine(t, ns, "stuck-0", containerDisk(image), stagesConfig(t, "stuck-0", joinConfiguration("stuck-0", token, caPin(t))))
	g.Eventually(func(g Gomega) {
		r := boot(g, vm)
		g.Expect(r.Phase).To(Equal(PhaseJoining), "boot: %+v", r)
		g.Expect(r.Error).To(ContainSubstring("refused by the test"))
	}, timeout, poll).Should(Succeed())
	g.Expect(workload.Client.Get(ctx, client.ObjectKey{Name: "stuck-0"}, &corev1.Node{})).To(Succeed(), "the Node was registered")
	// The provider revokes a token once the Node exists.
	revoke(t, token)
	lift()

	g.Eventually(func(g Gomega) {
		r := boot(g, vm)
		g.Expect(r.Phase).To(Equal(PhaseJoined), "boot: %+v", r)
		g.Expect(readyStatus(getNode(g, "stuck-0"))).To(Equal(corev1.ConditionTrue))
	}, timeout, poll).Should(Succeed())
}
