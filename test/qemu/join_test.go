//go:build qemu

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

package qemu

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capisetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/reconcilers/kairosconfig"
	"github.com/cozystack/cluster-api-workers/bootstrap/webhooks/admission"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// The suite boots real guests: one workload control plane on the host
// (kubeadm-prepared, guests reach it at 10.0.2.2), one management apiserver
// running the real KairosConfig controller that renders the bootstrap data,
// and QEMU guests booted from the worker disk with that data as their seed.
// Build tag qemu keeps it out of `go test ./...`.

const (
	kubernetesVersion = "v1.36.3"
	clusterName       = "workload"
	// joinTimeout bounds VM start to Node Ready; a guest under TCG on two
	// shared cores takes about half a minute.
	joinTimeout = 10 * time.Minute
)

var (
	suiteCtx     context.Context
	disk         Disk
	controlPlane *ControlPlane
	mgmt         *envtest.Environment
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suiteCtx = ctx
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var err error
	if disk, err = BuildDisk(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "building the worker disk: %v\n", err)
		return 1
	}
	if controlPlane, err = StartControlPlane(ctx, ControlPlaneOptions{KubernetesVersion: kubernetesVersion, ClusterName: clusterName}); err != nil {
		fmt.Fprintf(os.Stderr, "starting the workload control plane: %v\n", err)
		return 1
	}
	defer controlPlane.Stop()
	scheme := envtest.DefaultScheme()
	if err := bootstrapv1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgmt, err = envtest.Start(ctx, envtest.Options{
		Scheme:           scheme,
		CRDPaths:         []string{"bootstrap/reconcilers/kairosconfig/testdata/crds"},
		WebhookPaths:     []string{"config/bootstrap/webhook"},
		SetupWebhooks:    admission.SetupWebhooksWithManager,
		SetupControllers: setupBootstrapController,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the management apiserver: %v\n", err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()
	return m.Run()
}

// setupBootstrapController runs the KairosConfig controller as
// bootstrap/main.go does.
func setupBootstrapController(ctx context.Context, mgr ctrl.Manager) error {
	secretCachingClient, err := capisetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return err
	}
	opts := controller.Options{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 2}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        capisetup.ClusterCacheCacheOptions(),
		Client:       capisetup.ClusterCacheClientOptions("qemu-bootstrap", 20, 30),
	}, opts)
	if err != nil {
		return err
	}
	return (&kairosconfig.Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretCachingClient,
		APIReader:           mgr.GetAPIReader(),
		ClusterCache:        cc,
	}).SetupWithManager(ctx, mgr, opts)
}

// TestOneGuestJoins: the KairosConfig controller renders the bootstrap
// data for a Machine, a guest boots the worker disk with it as a NoCloud
// (or ConfigDrive) seed, runs the stages with yip and joins with kubeadm:
// its Node, named after the VM, becomes Ready with providerID
// kubevirt://<vm>. One guest at a time.
func TestOneGuestJoins(t *testing.T) {
	for _, seed := range []SeedKind{NoCloud, ConfigDrive} {
		t.Run(string(seed), func(t *testing.T) {
			g := NewWithT(t)
			ns := newClusterNamespace(t, controlPlane.CACert)
			vmName := "pool-" + strings.ToLower(string(seed)) + "-" + time.Now().Format("150405")
			machine, userData := renderBootstrapData(t, ns, vmName, bootstrapv1.KairosConfigSpec{})
			g.Expect(joinTokens(g, machine)).To(HaveLen(1))

			vm, err := StartVM(suiteCtx, VMOptions{Name: vmName, Disk: disk, UserData: userData, Seed: seed, Dir: artifactDir(t)})
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(vm.Kill)

			ready := waitForReadyNode(t, vm)
			g.Expect(ready.node.Spec.ProviderID).To(Equal("kubevirt://" + vmName))
			g.Expect(ready.node.Status.NodeInfo.KubeletVersion).To(Equal(kubernetesVersion))
			g.Expect(ready.node.Spec.Taints).To(ContainElement(HaveField("Key", "node.cluster.x-k8s.io/uninitialized")))
			t.Logf("timing: guest %s (%s seed) registered its Node %s and was Ready %s after QEMU started (accelerator %s)",
				vmName, seed, ready.registered.Round(time.Second), ready.ready.Round(time.Second), Accelerator())

			// Cluster API's Machine controller sets the nodeRef once a Node
			// with the Machine's providerID exists (it does not run in this
			// suite); the bootstrap provider then revokes the join token.
			machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: ready.node.Name}
			g.Expect(mgmt.Client.Status().Update(suiteCtx, machine)).To(Succeed())
			g.Eventually(func(g Gomega) { g.Expect(joinTokens(g, machine)).To(BeEmpty()) }, time.Minute, time.Second).Should(Succeed())
		})
	}
}

// TestWrongCAPinFailsTheJoin: when the cluster CA the management cluster
// holds is not the workload's, the rendered CA pin does not match
// cluster-info: the guest's kubeadm join stops at discovery with kubeadm's
// pin error in its journal and no Node is registered. (Replacing the
// Machine is the MachineHealthCheck's job, in the harness scenarios.)
func TestWrongCAPinFailsTheJoin(t *testing.T) {
	g := NewWithT(t)
	ns := newClusterNamespace(t, otherCA(t))
	vmName := "pool-wrong-ca-" + time.Now().Format("150405")
	_, userData := renderBootstrapData(t, ns, vmName, bootstrapv1.KairosConfigSpec{})

	vm, err := StartVM(suiteCtx, VMOptions{Name: vmName, Disk: disk, UserData: userData, Seed: NoCloud, Dir: artifactDir(t)})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(vm.Kill)

	waitForJoinError(t, vm, "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys")
}

// TestExpiredTokenFailsTheJoin: a guest that boots after its join token
// expired (the token cleaner deleted it and the bootstrap signer dropped
// its cluster-info signature) fails discovery, with kubeadm's missing
// signature error once the configured discovery timeout passes, and
// registers no Node. The Cluster is paused once the data is
// rendered, so the bootstrap provider does not replace the token.
func TestExpiredTokenFailsTheJoin(t *testing.T) {
	g := NewWithT(t)
	ns := newClusterNamespace(t, controlPlane.CACert)
	vmName := "pool-expired-" + time.Now().Format("150405")
	// kubeadm waits for a token's cluster-info signature until discovery
	// times out (5 minutes by default), then reports the missing signature.
	machine, userData := renderBootstrapData(t, ns, vmName, bootstrapv1.KairosConfigSpec{
		JoinTimeouts: bootstrapv1.JoinTimeouts{DiscoverySeconds: ptr.To[int32](20)},
	})

	cluster := &clusterv1.Cluster{}
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster)).To(Succeed())
	cluster.Spec.Paused = ptr.To(true)
	g.Expect(mgmt.Client.Update(suiteCtx, cluster)).To(Succeed())
	ids := joinTokens(g, machine)
	g.Expect(ids).To(HaveLen(1))
	g.Expect(controlPlane.Client.Delete(suiteCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: metav1.NamespaceSystem, Name: bootstrapapi.BootstrapTokenSecretPrefix + ids[0],
	}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(controlPlane.Client.Get(suiteCtx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm)).To(Succeed())
		g.Expect(cm.Data).NotTo(HaveKey(bootstrapapi.JWSSignatureKeyPrefix + ids[0]))
	}, time.Minute, time.Second).Should(Succeed())

	vm, err := StartVM(suiteCtx, VMOptions{Name: vmName, Disk: disk, UserData: userData, Seed: NoCloud, Dir: artifactDir(t)})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(vm.Kill)
	waitForJoinError(t, vm, fmt.Sprintf("could not find a JWS signature in the cluster-info ConfigMap for token ID %q", ids[0]))
}

// waitForJoinError waits for a kubeadm error in the guest's journal, then
// checks that no Node of that name was registered.
func waitForJoinError(t *testing.T, vm *VM, message string) {
	t.Helper()
	deadline := time.Now().Add(joinTimeout)
	for !strings.Contains(vm.Journal(), message) {
		if exited, exitErr := vm.Exited(); exited {
			t.Fatalf("QEMU for %s exited (%v)\njournal:\n%s", vm.Name, exitErr, vm.Journal())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not report %q within %s\njournal:\n%s", message, joinTimeout, vm.Journal())
		}
		time.Sleep(time.Second)
	}
	t.Logf("timing: guest %s reported the join failure %s after QEMU started", vm.Name, time.Since(vm.Started).Round(time.Second))
	err := controlPlane.Client.Get(suiteCtx, client.ObjectKey{Name: vm.Name}, &corev1.Node{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a Node %s exists or cannot be read: %v", vm.Name, err)
	}
}

// TestKilledGuestIsFailed: a guest whose QEMU is killed reports the
// Failed phase, as a VMI whose virt-launcher died.
func TestKilledGuestIsFailed(t *testing.T) {
	g := NewWithT(t)
	vm, err := StartVM(suiteCtx, VMOptions{Name: "killed", Disk: disk, UserData: []byte("#cloud-config\n"), Dir: artifactDir(t)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vm.Phase()).To(Equal(kubevirtv1.Running))
	vm.Kill()
	g.Expect(vm.Phase()).To(Equal(kubevirtv1.Failed))
}

// otherCA is a CA certificate that did not sign the workload apiserver.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "not-the-workload-ca"}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
}

// artifactDir is where a guest's seed, serial logs and QEMU output go:
// under QEMU_ARTIFACTS when set (kept for CI artifacts), otherwise a
// temporary directory removed after the test.
func artifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("QEMU_ARTIFACTS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newClusterNamespace makes a namespace with a Cluster whose control plane
// is the host's workload control plane, as guests dial it, and the
// <cluster>-ca (holding caCert) and <cluster>-kubeconfig Secrets Cluster
// API would keep.
func newClusterNamespace(t *testing.T, caCert []byte) string {
	t.Helper()
	g := NewWithT(t)
	c := mgmt.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "qemu-"}}
	g.Expect(c.Create(suiteCtx, ns)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: clusterName},
		Spec: clusterv1.ClusterSpec{
			Paused:               ptr.To(false),
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: GuestHostAddress, Port: int32(controlPlane.Port)},
		},
	}
	g.Expect(c.Create(suiteCtx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	conditions.Set(cluster, metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue, Reason: "HostedControlPlane"})
	g.Expect(c.Status().Update(suiteCtx, cluster)).To(Succeed())
	labels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	for _, s := range []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: secret.Name(clusterName, secret.Kubeconfig), Labels: labels},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{secret.KubeconfigDataName: controlPlane.AdminKubeconfig},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: secret.Name(clusterName, secret.ClusterCA), Labels: labels},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{secret.TLSCrtDataName: caCert},
		},
	} {
		g.Expect(c.Create(suiteCtx, s)).To(Succeed())
	}
	return ns.Name
}

// renderBootstrapData creates a worker Machine with its KairosConfig and
// infrastructure machine and returns the Machine and the bootstrap Secret's
// value once the controller rendered it.
func renderBootstrapData(t *testing.T, namespace, vmName string, spec bootstrapv1.KairosConfigSpec) (*clusterv1.Machine, []byte) {
	t.Helper()
	g := NewWithT(t)
	c := mgmt.Client
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion("infrastructure.test.cozystack.io/v1alpha1")
	infra.SetKind("TestMachine")
	infra.SetNamespace(namespace)
	infra.SetName(vmName)
	infra.Object["spec"] = map[string]any{}
	g.Expect(c.Create(suiteCtx, infra)).To(Succeed())
	labels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: vmName, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName,
			Version:     kubernetesVersion,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: vmName,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.test.cozystack.io", Kind: "TestMachine", Name: vmName,
			},
		},
	}
	g.Expect(c.Create(suiteCtx, machine)).To(Succeed())
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: vmName, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
			}},
		},
		Spec: spec,
	}
	g.Expect(c.Create(suiteCtx, config)).To(Succeed())
	data := &corev1.Secret{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(suiteCtx, client.ObjectKeyFromObject(config), config)).To(Succeed())
		g.Expect(config.Status.DataSecretName).NotTo(BeEmpty(), "conditions: %v", config.Status.Conditions)
		g.Expect(c.Get(suiteCtx, client.ObjectKey{Namespace: namespace, Name: config.Status.DataSecretName}, data)).To(Succeed())
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Expect(c.Get(suiteCtx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
	return machine, data.Data["value"]
}

// joinTokens lists the workload bootstrap tokens the bootstrap provider
// made for a Machine's KairosConfig (it describes each token so).
func joinTokens(g Gomega, machine *clusterv1.Machine) []string {
	list := &corev1.SecretList{}
	g.Expect(controlPlane.Client.List(suiteCtx, list, client.InNamespace(metav1.NamespaceSystem))).To(Succeed())
	want := fmt.Sprintf("Join token of KairosConfig %s/%s, made by the Kairos bootstrap provider", machine.Namespace, machine.Spec.Bootstrap.ConfigRef.Name)
	var ids []string
	for _, s := range list.Items {
		if s.Type == bootstrapapi.SecretTypeBootstrapToken && string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey]) == want {
			ids = append(ids, string(s.Data[bootstrapapi.BootstrapTokenIDKey]))
		}
	}
	return ids
}

// joined is a guest's Node and when it got there.
type joined struct {
	node *corev1.Node
	// registered and ready count from QEMU's start.
	registered, ready time.Duration
}

// waitForReadyNode waits until the guest's Node is Ready; a QEMU that exits
// fails at once. On failure the guest's journal and the control plane's
// logs are in the output.
func waitForReadyNode(t *testing.T, vm *VM) joined {
	t.Helper()
	var res joined
	deadline := time.Now().Add(joinTimeout)
	for {
		node := &corev1.Node{}
		err := controlPlane.Client.Get(suiteCtx, client.ObjectKey{Name: vm.Name}, node)
		if err == nil {
			if res.registered == 0 {
				res.registered = time.Since(vm.Started)
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					res.node, res.ready = node, time.Since(vm.Started)
					return res
				}
			}
		}
		if exited, exitErr := vm.Exited(); exited {
			t.Fatalf("QEMU for %s exited (%v) before its Node was Ready\njournal:\n%s\nconsole:\n%s", vm.Name, exitErr, vm.Journal(), vm.Console())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Node of %s was not Ready within %s (last error: %v)\njournal:\n%s\ncontrol plane:\n%s", vm.Name, joinTimeout, err, vm.Journal(), controlPlane.Logs())
		}
		time.Sleep(time.Second)
	}
}
