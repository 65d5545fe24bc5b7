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

// Package integration runs the KubeVirt provider's controllers and webhooks
// against a real kube-apiserver with the real Cluster API, KubeVirt and CDI
// CRD schemas, and the infrastructure cluster of test/infra: KubeVirt's own
// virt-api (which admits the provider's VirtualMachines) and
// virt-controller drive every VirtualMachine, beside the stand-ins for the
// node side and CDI. The tests never write a KubeVirt or CDI status: they
// inject failures through the stand-ins' fault API (a failed import, an
// unschedulable instance, an image that cannot be pulled, a crashed guest,
// a lost node) or act as a user would (deleting a VM), and they hold
// finalizers only to observe what the provider waits for.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
	"github.com/cozystack/cluster-api-workers/infrastructure/setup"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/infra"
	"github.com/cozystack/cluster-api-workers/test/kubevirt"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	kubevirtsim "github.com/cozystack/cluster-api-workers/test/sim/kubevirtnode"
)

const digestRef = "registry.example.com/workers/kairos-worker@sha256:1111111111111111111111111111111111111111111111111111111111111111"

// The infrastructure nodes. Machines with a failure domain land in its
// zone; only infra-b offers the GPU and the host device the shaped
// machine asks for. The hoster reserves the nodes of zones C and D, a
// control-plane node and one of its own, which no tenant VM may run on.
const (
	zoneA, zoneB       = "zone-a", "zone-b"
	zoneC, zoneD       = "zone-c", "zone-d"
	gpuResource        = "nvidia.com/GA102GL_A10"
	hostDeviceResource = "intel.com/E810"
	// reservedNodeLabel is the hoster's own reserved label, beside the
	// control plane's.
	reservedNodeLabel = "integration.cozystack.io/infrastructure-reserved"
	// retiredTolerationKey is a taint key the hoster let tenants tolerate
	// and has since taken out of --tenant-toleration-keys: admission (the
	// old policy) admits it, the machine controller (the policy in force)
	// does not.
	retiredTolerationKey = "integration.cozystack.io/retired"
)

var infraNodes = []kubevirtsim.InfraNode{
	{Name: "infra-a", Labels: map[string]string{corev1.LabelTopologyZone: zoneA}},
	{Name: "infra-b", Labels: map[string]string{corev1.LabelTopologyZone: zoneB}, Allocatable: corev1.ResourceList{
		gpuResource: resource.MustParse("8"), hostDeviceResource: resource.MustParse("8")}},
	{Name: "infra-c", Labels: map[string]string{corev1.LabelTopologyZone: zoneC, placement.ControlPlaneLabel: ""}},
	{Name: "infra-d", Labels: map[string]string{corev1.LabelTopologyZone: zoneD, reservedNodeLabel: "true"}},
}

// controllerPlacement is the suite's hoster's placement policy in force,
// the machine controller's: the defaults, with the devices infra-b offers
// (and one KubeVirt does not permit, whose refusal is KubeVirt's), the
// GPU nodes' toleration, and its own reserved label.
var controllerPlacement = func() placement.Policy {
	p := placement.DefaultPolicy()
	p.TolerationKeys = append(p.TolerationKeys, "gpu")
	p.DeviceNames = []string{gpuResource, hostDeviceResource, "nvidia.com/TU104GL_Tesla_T4"}
	p.ReservedNodeLabels = append(p.ReservedNodeLabels, reservedNodeLabel)
	return p
}()

// admissionPlacement is the webhooks' policy: the one in force and the
// retired toleration, as a webhook admitted objects before the hoster
// changed the flags.
var admissionPlacement = func() placement.Policy {
	p := controllerPlacement
	p.TolerationKeys = append(slices.Clone(p.TolerationKeys), retiredTolerationKey)
	return p
}()

var (
	env    *envtest.Environment
	scheme = runtime.NewScheme()
	// c creates and reads objects with strict field validation, so an
	// object the real CRD schemas would prune fails the test instead.
	c client.Client
	// stack is the infrastructure cluster: KubeVirt's control plane and
	// the node-side and CDI stand-ins, whose faults the tests inject.
	stack *infra.Infra
	// controllers is the running controller manager; tests restart it.
	controllers atomic.Pointer[controllerManager]
	managers    atomic.Int32
)

// syncPeriod is short so that the idle test sees many resyncs of every
// object: none of them may write.
const syncPeriod = 2 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests mostly wait for the controllers' once-a-second rate limit
	// per object and for KubeVirt, not for CPU: run more of them at once
	// than there are cores, unless -parallel says otherwise.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", "8"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	// Real KubeVirt starts VMs in seconds, but the suite shares two cores
	// with virt-api, virt-controller, the apiserver and other builds.
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SetDefaultConsistentlyPollingInterval(100 * time.Millisecond)
	for _, add := range []func(*runtime.Scheme) error{setup.AddToScheme, infra.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	ctx := context.Background()
	var err error
	// The environment's manager serves only the webhooks, so the
	// controllers can be stopped and restarted while admission keeps
	// working.
	env, err = envtest.Start(ctx, envtest.Options{
		Scheme:        scheme,
		CRDPaths:      envtest.ExternalCRDPaths(),
		WebhookPaths:  []string{"config/infrastructure/webhook"},
		SetupWebhooks: func(mgr ctrl.Manager) error { return setup.Webhooks(mgr, nil, admissionPlacement) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	c = client.WithFieldValidation(env.Client, metav1.FieldValidationStrict)
	// The garbage collector: launcher Pods, DataVolumes' claims and the
	// other dependents of deleted objects go as they do in a cluster.
	kcm, err := env.StartControllerManager(envtest.ManagementControllers...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kcm.Stop()
	stopInfra, err := startInfra(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopInfra()
	cm, err := startControllers(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	controllers.Store(cm)
	defer func() { controllers.Load().stop() }()
	return m.Run()
}

// startInfra starts the infrastructure cluster in the suite's apiserver:
// virt-controller is cluster-wide, so it drives every test's VMs, and
// virt-api admits the provider's. KubeVirt permits the GPU and host device
// of the shaped machine, as a hoster that offers them configures it.
// KUBEVIRT_LOG_DIR keeps virt-api's and virt-controller's logs.
func startInfra(ctx context.Context) (func(), error) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	stack, err = infra.Start(ctx, env, mgr, infra.Options{
		KubeVirt: kubevirt.Options{
			LogDir: os.Getenv("KUBEVIRT_LOG_DIR"),
			Configuration: kubevirtv1.KubeVirtConfiguration{
				DeveloperConfiguration: &kubevirtv1.DeveloperConfiguration{FeatureGates: []string{"HostDevices"}},
				PermittedHostDevices: &kubevirtv1.PermittedHostDevices{PciHostDevices: []kubevirtv1.PciHostDevice{
					{PCIVendorSelector: "10DE:2236", ResourceName: gpuResource},
					{PCIVendorSelector: "8086:1593", ResourceName: hostDeviceResource},
				}},
			},
		},
		// Scheduling and booting each last longer than the controller's
		// once-a-second limit per machine, so the controller sees every
		// phase KubeVirt moves an instance through: the pinned writes of
		// TestOneMachineLifecycleWrites must hold for all of them.
		Hosts: kubevirtsim.Options{Nodes: infraNodes, ScheduleDelay: 1500 * time.Millisecond, BootDelay: 1500 * time.Millisecond},
		CDI:   cdisim.Options{ImportDuration: time.Second},
	})
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			fmt.Fprintf(os.Stderr, "the infrastructure stand-ins stopped: %v\n", err)
		}
	}()
	return func() {
		// Watches still open when the apiserver stops delay its shutdown.
		cancel()
		<-done
		if err := stack.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}, nil
}

// zapLevel logs errors only, unless INTEGRATION_VERBOSE asks for the
// controllers' debug logs.
func zapLevel() zapcore.Level {
	if os.Getenv("INTEGRATION_VERBOSE") != "" {
		return zapcore.Level(-4)
	}
	return zapcore.ErrorLevel
}

type controllerManager struct {
	mgr    ctrl.Manager
	cancel context.CancelFunc
	done   chan struct{}
}

// startControllers starts a manager running the provider's reconcilers with
// the cache options main.go uses, and infra as the infrastructure cluster
// (nil: the management cluster). Each manager has its own informer names,
// as two managers in one process need.
func startControllers(ctx context.Context, infra *rest.Config) (*controllerManager, error) {
	name := fmt.Sprintf("kubevirt-workers-test-%d", managers.Add(1))
	cacheOptions, err := setup.ManagerCacheOptions(scheme, name, "", syncPeriod)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(controllerWrites.WrapConfig(env.Config), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOptions,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	if err := setup.Reconcilers(mctx, mgr, setup.Options{ControllerName: name, WorkerClasses: true, ImportFailureRestarts: 3, MachineConcurrency: 10, TemplateConcurrency: 4,
		Infrastructure: infra, SyncPeriod: syncPeriod, Placement: controllerPlacement}); err != nil {
		cancel()
		return nil, err
	}
	cm := &controllerManager{mgr: mgr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cm.done)
		if err := mgr.Start(mctx); err != nil {
			fmt.Fprintf(os.Stderr, "controller manager stopped: %v\n", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		cancel()
		return nil, fmt.Errorf("the controller manager's cache did not sync")
	}
	return cm, nil
}

func (cm *controllerManager) stop() {
	cm.cancel()
	<-cm.done
}

// restartControllers replaces the running controllers with fresh ones, as a
// new leader with empty caches would; infra is their infrastructure cluster
// (nil: the management cluster).
func restartControllers(t *testing.T, infra *rest.Config) {
	t.Helper()
	controllers.Load().stop()
	cm, err := startControllers(context.Background(), infra)
	if err != nil {
		t.Fatal(err)
	}
	controllers.Store(cm)
}

// namespacePrefix is a namespace name prefix from the test's name, short
// enough for the API server's random suffix.
func namespacePrefix(t *testing.T) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(strings.TrimPrefix(t.Name(), "Test")))
	if len(name) > 50 {
		name = name[:50]
	}
	return strings.Trim(name, "-") + "-"
}

// testCluster is a namespace with a provisioned Cluster whose control plane
// is hosted elsewhere.
type testCluster struct {
	namespace string
	cluster   *clusterv1.Cluster
}

func newCluster(t *testing.T) *testCluster {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// Named after the test by the API server, so that no scenario's names
	// depend on which scenarios ran before it.
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t)}}
	g.Expect(c.Create(ctx, namespace)).To(Succeed())
	ns := namespace.Name
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.tenant.example.com", Port: 6443}},
	}
	g.Expect(c.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(c.Status().Update(ctx, cluster)).To(Succeed())
	return &testCluster{namespace: ns, cluster: cluster}
}

// machine creates a bootstrap Secret, a Machine and its KubeVirtMachine.
func (tc *testCluster) machine(t *testing.T, name string, spec infrav1.KubeVirtMachineSpec, mutate ...func(*clusterv1.Machine, *infrav1.KubeVirtMachine, *corev1.Secret)) *infrav1.KubeVirtMachine {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: tc.namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": bootstrapData(name), "format": []byte("cloud-config")},
	}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Spec: clusterv1.MachineSpec{
			ClusterName: tc.cluster.Name,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtMachine", Name: name},
		},
	}
	kvm := &infrav1.KubeVirtMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Spec: spec,
	}
	for _, f := range mutate {
		f(machine, kvm, secret)
	}
	g.Expect(c.Create(ctx, secret)).To(Succeed())
	g.Expect(c.Create(ctx, machine)).To(Succeed())
	kvm.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine",
		Name: machine.Name, UID: machine.UID, Controller: ptr.To(true)}}
	g.Expect(c.Create(ctx, kvm)).To(Succeed())
	return kvm
}

// bootstrapData has bytes a text round trip would mangle.
func bootstrapData(name string) []byte {
	return []byte("#cloud-config\nhostname: " + name + "\n\x00\xff\r\n")
}

func containerDiskSpec() infrav1.KubeVirtMachineSpec {
	return infrav1.KubeVirtMachineSpec{
		Image:  &infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: digestRef}},
		CPU:    &infrav1.CPU{Cores: 2},
		Memory: ptr.To(resource.MustParse("4Gi")),
	}
}

func key(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: name}
}

// get returns a function for Eventually that fetches obj.
func get(obj client.Object) func(g Gomega) {
	return func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	}
}

func conditionOf(obj interface{ GetConditions() []metav1.Condition }, t string) *metav1.Condition {
	for _, cond := range obj.GetConditions() {
		if cond.Type == t {
			return &cond
		}
	}
	return nil
}

// haveCondition matches a condition's status and reason.
func expectCondition(g Gomega, obj interface{ GetConditions() []metav1.Condition }, t string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	cond := conditionOf(obj, t)
	g.Expect(cond).NotTo(BeNil(), "condition %s is missing", t)
	g.Expect(cond.Status).To(Equal(status), "condition %s: %s", t, cond.Message)
	g.Expect(cond.Reason).To(Equal(reason), "condition %s: %s", t, cond.Message)
	return cond
}

// waitForVM waits for the machine's VirtualMachine.
func waitForVM(t *testing.T, kvm *infrav1.KubeVirtMachine) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: kvm.Name, Namespace: kvm.Namespace}}
	NewWithT(t).Eventually(get(vm)).Should(Succeed())
	return vm
}

// expectReady waits for the machine's Ready condition; on failure it
// lists what KubeVirt and CDI hold in the machine's namespace.
func expectReady(t *testing.T, kvm *infrav1.KubeVirtMachine, status metav1.ConditionStatus, reason string) {
	t.Helper()
	expectReadySaying(t, kvm, status, reason, "")
}

// expectReadySaying is expectReady whose message must also contain words:
// CDI's words about a failed import reach the machine only while the
// importer's container is down, so they may follow the reason.
func expectReadySaying(t *testing.T, kvm *infrav1.KubeVirtMachine, status metav1.ConditionStatus, reason, words string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, infrav1.ReadyCondition, status, reason)
		g.Expect(conditionOf(kvm, infrav1.ReadyCondition).Message).To(ContainSubstring(words))
	}).Should(Succeed(), func() string { return describe(kvm.Namespace) })
}

// expectProvisioned waits for the machine to be Ready and provisioned:
// Cluster API's patch helper writes the conditions before the other status
// fields.
func expectProvisioned(t *testing.T, kvm *infrav1.KubeVirtMachine) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvm), kvm)).To(Succeed())
		expectCondition(g, kvm, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason)
		g.Expect(kvm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(kvm.Status.ProvisionedInstanceUID).NotTo(BeEmpty())
	}).Should(Succeed(), func() string { return describe(kvm.Namespace) })
}

// runningInstance waits for KubeVirt to run the machine's instance with an
// address and returns it.
func runningInstance(t *testing.T, kvm *infrav1.KubeVirtMachine) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	vmi := &kubevirtv1.VirtualMachineInstance{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kvm), vmi)).To(Succeed())
		g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		g.Expect(vmi.Status.Interfaces).NotTo(BeEmpty())
		g.Expect(vmi.Status.Interfaces[0].IP).NotTo(BeEmpty())
	}).Should(Succeed(), func() string { return describe(kvm.Namespace) })
	return vmi
}

// goldenImage creates what a golden catalog holds: a claim, which the CDI
// stand-in's provisioner binds, and a DataSource naming it. Machines clone
// either.
func goldenImage(t *testing.T, namespace, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, ns))).To(Succeed())
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
		},
	}
	g.Expect(c.Create(ctx, pvc)).To(Succeed())
	// CDI clones only a bound source.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	}).Should(Succeed())
	ds := &cdiv1.DataSource{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: namespace, Name: name}}},
	}
	g.Expect(c.Create(ctx, ds)).To(Succeed())
}

// describe lists what KubeVirt and CDI hold in a namespace, for a failure
// message.
func describe(ns string) string {
	ctx := context.Background()
	var b strings.Builder
	b.WriteString("\n" + infra.Describe(ctx, c, ns))
	kvms := &infrav1.KubeVirtMachineList{}
	_ = c.List(ctx, kvms, client.InNamespace(ns))
	for _, k := range kvms.Items {
		fmt.Fprintf(&b, "KubeVirtMachine %s conditions=%+v\n", k.Name, k.Status.Conditions)
	}
	return b.String()
}
