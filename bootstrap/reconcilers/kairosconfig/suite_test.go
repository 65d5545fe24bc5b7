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

package kairosconfig

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/webhooks/admission"
	"github.com/cozystack/cluster-api-workers/internal/inlinekubeconfig"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// The suite runs one management apiserver (Cluster API and bootstrap CRDs,
// the bootstrap webhooks) and one workload apiserver (bootstrap-token
// authentication on), shared by every test. Each test works in its own
// namespace with its own Cluster; the controller runs in managers the tests
// start and stop, so a restart can be tested.

const (
	// testTokenTTL is short so that refreshes happen within a test.
	testTokenTTL = 9 * time.Second
	testVersion  = "v1.36.3"
)

var (
	managerCount atomic.Int32
	mgmt         *envtest.Environment
	workload     *envtest.Workload
	suiteCtx     context.Context
	scheme       *runtime.Scheme
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suiteCtx = ctx
	ctrl.SetLogger(envtestLogger())

	scheme = envtest.DefaultScheme()
	if err := bootstrapv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	var err error
	mgmt, err = envtest.Start(ctx, envtest.Options{
		Scheme:        scheme,
		CRDPaths:      []string{"bootstrap/reconcilers/kairosconfig/testdata/crds"},
		WebhookPaths:  []string{"config/bootstrap/webhook"},
		SetupWebhooks: admission.SetupWebhooksWithManager,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the management apiserver: %v\n", err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()
	workload, err = envtest.StartWorkload()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the workload apiserver: %v\n", err)
		return 1
	}
	defer func() { _ = workload.Stop() }()
	if err := workload.SeedKubeadmObjects(ctx, envtest.KubeadmSeed{KubernetesVersion: testVersion, ClusterName: "workload"}); err != nil {
		fmt.Fprintf(os.Stderr, "seeding the workload apiserver: %v\n", err)
		return 1
	}
	return m.Run()
}

// controllerManager is a running manager with the KairosConfig controller,
// set up as main.go sets it up.
type controllerManager struct {
	cancel       context.CancelFunc
	done         chan struct{}
	once         sync.Once
	clusterCache clustercache.ClusterCache
	// reconciler is the running controller's; tests copy its clients.
	reconciler *Reconciler
	// requests records what the manager sends to the API servers.
	requests *requests.Log
}

// stop stops the manager and the ClusterCache's workload connections
// (their caches outlive the manager by design, as in production the
// process exits).
func (c *controllerManager) stop() {
	c.once.Do(func() {
		c.cancel()
		<-c.done
		if s, ok := c.clusterCache.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	})
}

// testKinds are the suite's infrastructure kinds, which its controllers
// follow instead of the KubeVirt provider's.
var testKinds = InfrastructureKinds{
	Machine:  schema.GroupKind{Group: "infrastructure.test.cozystack.io", Kind: "TestMachine"},
	Template: schema.GroupKind{Group: "infrastructure.test.cozystack.io", Kind: "TestMachineTemplate"},
}

// startController starts the controller in a manager of its own; the test
// stops it at cleanup, or earlier to simulate a restart.
func startController(t *testing.T, ttl time.Duration) *controllerManager {
	t.Helper()
	return startControllerAs(t, mgmt.Config, ttl, testKinds)
}

// startIdleController starts a manager whose controller follows only
// objects with a watch-filter label no fixture sets: its cache and clients
// are there for reconcileAlone, and no reconcile of its own interferes.
func startIdleController(t *testing.T) *controllerManager {
	t.Helper()
	return startControllerWith(t, mgmt.Config, loadTTL, testKinds, "no-fixture-has-this-label")
}

// startControllerAs starts the controller as the user of cfg, following
// kinds.
func startControllerAs(t *testing.T, cfg *rest.Config, ttl time.Duration, kinds InfrastructureKinds) *controllerManager {
	t.Helper()
	return startControllerWith(t, cfg, ttl, kinds, "")
}

func startControllerWith(t *testing.T, cfg *rest.Config, ttl time.Duration, kinds InfrastructureKinds, watchFilter string, configure ...func(*Reconciler)) *controllerManager {
	t.Helper()
	// Informer names are process-wide, so each manager gets its own name.
	name := fmt.Sprintf("kairos-test-%d", managerCount.Add(1))
	requestLog := &requests.Log{}
	mgr, err := ctrl.NewManager(requestLog.WrapConfig(cfg), ctrl.Options{
		BaseContext:            func() context.Context { return requestLog.Into(context.Background()) },
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  managerCacheOptions(name),
		Client:                 kubeadmsetup.ManagerClientOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(suiteCtx)
	secretCachingClient, err := kubeadmsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		t.Fatal(err)
	}
	opts := controller.Options{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 4}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: inlinekubeconfig.SecretReader{Reader: secretCachingClient},
		Cache:        clusterCacheCacheOptions(),
		Client:       kubeadmsetup.ClusterCacheClientOptions(name, 50, 100),
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Retry workload connections quickly instead of every 30 s.
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(time.Second)
	}
	r := &Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretCachingClient,
		APIReader:           mgr.GetAPIReader(),
		// The ClusterCache's clients read Secrets directly.
		ClusterCache:        requests.ClusterCache{ClusterCache: cc, Uncached: []client.Object{&corev1.Secret{}}},
		TokenTTL:            ttl,
		InfrastructureKinds: kinds,
		WatchFilterValue:    watchFilter,
	}
	for _, c := range configure {
		c(r)
	}
	if err := r.SetupWithManager(ctx, mgr, opts); err != nil {
		t.Fatal(err)
	}
	c := &controllerManager{cancel: cancel, done: make(chan struct{}), clusterCache: cc, reconciler: r, requests: requestLog}
	go func() {
		defer close(c.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("controller manager stopped: %v", err)
		}
	}()
	t.Cleanup(c.stop)
	return c
}

// managerCacheOptions are bootstrap/setup's: Cluster API's bootstrap
// provider cache with our Secret selection (setup imports this package, so
// the suite cannot import it).
func managerCacheOptions(name string) ctrlcache.Options {
	opts := kubeadmsetup.ManagerCacheOptions(scheme, name, "", 10*time.Minute)
	for obj := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			delete(opts.ByObject, obj)
		}
	}
	opts.ByObject[&corev1.Secret{}] = SecretCacheOptions()
	return opts
}

// clusterCacheCacheOptions are bootstrap/setup's workload cache options.
func clusterCacheCacheOptions() clustercache.CacheOptions {
	opts := kubeadmsetup.ClusterCacheCacheOptions()
	opts.ByObject = map[client.Object]ctrlcache.ByObject{&corev1.Node{}: NodeCacheOptions()}
	return opts
}

// fixture is one Cluster whose control plane is the workload apiserver,
// in a namespace of its own.
type fixture struct {
	t         *testing.T
	g         *WithT
	namespace string
	cluster   *clusterv1.Cluster
	// watchFilter is the value of the watch-filter label on the
	// fixture's objects; none when empty.
	watchFilter string
}

// filterLabel is the fixture's watch-filter label, nil without a filter.
func (f *fixture) filterLabel() map[string]string {
	if f.watchFilter == "" {
		return nil
	}
	return map[string]string{clusterv1.WatchLabel: f.watchFilter}
}

type clusterState struct {
	// absent leaves the Cluster out (createCluster makes it).
	absent                    bool
	infrastructureProvisioned bool
	controlPlaneInitialized   bool
	endpoint                  bool
	caSecret                  bool
	kubeconfigSecret          bool
}

var readyCluster = clusterState{infrastructureProvisioned: true, controlPlaneInitialized: true, endpoint: true, caSecret: true, kubeconfigSecret: true}

func newFixture(t *testing.T, state clusterState) *fixture {
	t.Helper()
	return newFilteredFixture(t, state, "")
}

// newFilteredFixture is newFixture whose Cluster, Machines and configs
// carry Cluster API's watch-filter label with watchFilter, so that only a
// controller started with that filter reconciles them, and it none of the
// configs earlier tests left behind.
func newFilteredFixture(t *testing.T, state clusterState, watchFilter string) *fixture {
	t.Helper()
	g := NewWithT(t)
	f := &fixture{t: t, g: g, namespace: "kairos-" + rand.String(6), watchFilter: watchFilter}
	c := mgmt.Client
	g.Expect(c.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.namespace}})).To(Succeed())
	// spec must not be empty; paused: false is the neutral field to send.
	f.cluster = &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "workload", Labels: f.filterLabel()}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}}
	if !state.absent {
		f.createCluster(state)
	}

	secrets, err := workload.ClusterSecrets(client.ObjectKeyFromObject(f.cluster))
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range secrets {
		if s.Name == f.cluster.Name+"-ca" && !state.caSecret || s.Name == f.cluster.Name+"-kubeconfig" && !state.kubeconfigSecret {
			continue
		}
		g.Expect(c.Create(suiteCtx, s)).To(Succeed())
	}
	return f
}

// createCluster creates the fixture's Cluster in state.
func (f *fixture) createCluster(state clusterState) {
	if state.endpoint {
		f.cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: workload.Host(), Port: workload.Port()}
	}
	f.g.Expect(mgmt.Client.Create(suiteCtx, f.cluster)).To(Succeed())
	f.setClusterStatus(state)
}

// createClusterSecret creates the <cluster>-<suffix> Secret of the
// workload apiserver that newFixture left out.
func (f *fixture) createClusterSecret(suffix string) {
	secrets, err := workload.ClusterSecrets(client.ObjectKeyFromObject(f.cluster))
	f.g.Expect(err).NotTo(HaveOccurred())
	for _, s := range secrets {
		if s.Name == f.cluster.Name+"-"+suffix {
			f.g.Expect(mgmt.Client.Create(suiteCtx, s)).To(Succeed())
		}
	}
}

func (f *fixture) setEndpoint() {
	f.g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(f.cluster), f.cluster)).To(Succeed())
	f.cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: workload.Host(), Port: workload.Port()}
	f.g.Expect(mgmt.Client.Update(suiteCtx, f.cluster)).To(Succeed())
}

func (f *fixture) setClusterStatus(state clusterState) {
	f.g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(f.cluster), f.cluster)).To(Succeed())
	f.cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(state.infrastructureProvisioned)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(state.controlPlaneInitialized)
	status := metav1.ConditionFalse
	if state.controlPlaneInitialized {
		status = metav1.ConditionTrue
	}
	conditions.Set(f.cluster, metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: status, Reason: "Test"})
	f.g.Expect(mgmt.Client.Status().Update(suiteCtx, f.cluster)).To(Succeed())
}

// machineOptions shape one worker.
type machineOptions struct {
	// version is the Machine's spec.version, testVersion when empty
	// unless unversioned.
	version     string
	unversioned bool
	// vmName is the infrastructure machine's name; empty leaves
	// spec.infrastructureRef.name empty.
	vmName string
	// template, when set, is the resolved status of the template the
	// infrastructure machine was cloned from.
	template map[string]any
	// templateClass, when set, is the template's
	// spec.template.spec.workerClass.name
	// (the template is created, resolved only when template is set).
	templateClass string
	// skipInfrastructure does not create the infrastructure machine.
	skipInfrastructure bool
	spec               bootstrapv1.KairosConfigSpec
}

// worker is a Machine with its KairosConfig and infrastructure machine.
type worker struct {
	machine *clusterv1.Machine
	config  *bootstrapv1.KairosConfig
	vmName  string
}

func (f *fixture) newWorker(name string, o machineOptions) *worker {
	g, c := f.g, mgmt.Client
	if o.version == "" && !o.unversioned {
		o.version = testVersion
	}
	w := &worker{vmName: o.vmName}
	templateName := ""
	if o.template != nil || o.templateClass != "" {
		templateName = name + "-template"
		tmpl := &unstructured.Unstructured{}
		tmpl.SetAPIVersion("infrastructure.test.cozystack.io/v1alpha1")
		tmpl.SetKind("TestMachineTemplate")
		tmpl.SetNamespace(f.namespace)
		tmpl.SetName(templateName)
		machine := map[string]any{}
		if o.templateClass != "" {
			machine["workerClass"] = map[string]any{"name": o.templateClass}
		}
		spec := map[string]any{"template": map[string]any{"spec": machine}}
		tmpl.Object["spec"] = spec
		g.Expect(c.Create(suiteCtx, tmpl)).To(Succeed())
		if o.template != nil {
			f.resolveTemplate(templateName, o.template)
		}
	}
	if o.vmName != "" && !o.skipInfrastructure {
		infra := &unstructured.Unstructured{}
		infra.SetAPIVersion("infrastructure.test.cozystack.io/v1alpha1")
		infra.SetKind("TestMachine")
		infra.SetNamespace(f.namespace)
		infra.SetName(o.vmName)
		if templateName != "" {
			infra.SetAnnotations(map[string]string{
				clusterv1.TemplateClonedFromNameAnnotation:      templateName,
				clusterv1.TemplateClonedFromGroupKindAnnotation: "TestMachineTemplate.infrastructure.test.cozystack.io",
			})
		}
		infra.Object["spec"] = map[string]any{}
		g.Expect(c.Create(suiteCtx, infra)).To(Succeed())
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}
	maps.Copy(labels, f.filterLabel())
	w.machine = &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: f.cluster.Name,
			Version:     o.version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.test.cozystack.io", Kind: "TestMachine", Name: o.vmName,
			},
		},
	}
	g.Expect(c.Create(suiteCtx, w.machine)).To(Succeed())
	w.config = &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: f.namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: w.machine.Name, UID: w.machine.UID,
			}},
		},
		Spec: o.spec,
	}
	g.Expect(c.Create(suiteCtx, w.config)).To(Succeed())
	return w
}

// resolveTemplate writes a TestMachineTemplate's status.resolved, as the
// infrastructure provider does once.
func (f *fixture) resolveTemplate(name string, resolved map[string]any) {
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion("infrastructure.test.cozystack.io/v1alpha1")
	tmpl.SetKind("TestMachineTemplate")
	f.g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: name}, tmpl)).To(Succeed())
	tmpl.Object["status"] = map[string]any{"resolved": resolved}
	f.g.Expect(mgmt.Client.Status().Update(suiteCtx, tmpl)).To(Succeed())
}

// condition returns the config's DataSecretAvailable condition.
func (f *fixture) condition(w *worker) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		cfg := &bootstrapv1.KairosConfig{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
		return conditions.Get(cfg, bootstrapv1.DataSecretAvailableCondition)
	}
}

func (f *fixture) waitForReason(w *worker, reason string) *metav1.Condition {
	var got *metav1.Condition
	f.g.Eventually(func(g Gomega) {
		got = f.condition(w)(g)
		g.Expect(got).NotTo(BeNil())
		g.Expect(got.Reason).To(Equal(reason), "message: %s", got.Message)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	return got
}

// waitForData waits for the bootstrap data as a Machine controller does,
// by status.dataSecretName and initialization.dataSecretCreated, and
// returns the Secret. The condition alone is not enough: Cluster API's
// patch helper writes conditions before the rest of status.
func (f *fixture) waitForData(w *worker) *corev1.Secret {
	f.waitForReason(w, bootstrapv1.DataSecretAvailableReason)
	f.g.Eventually(func(g Gomega) {
		cfg := &bootstrapv1.KairosConfig{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
		g.Expect(cfg.Status.DataSecretName).To(Equal(w.config.Name))
		g.Expect(cfg.Status.Initialization.DataSecretCreated).To(Equal(ptr.To(true)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	s := &corev1.Secret{}
	f.g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: w.config.Name}, s)).To(Succeed())
	return s
}

// storedToken reads the token our management Secret keeps; ok is false
// when there is none.
func (f *fixture) storedToken(w *worker) (token, bool) {
	s := &corev1.Secret{}
	err := mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: tokenRecordName(w.config.Name)}, s)
	if apierrors.IsNotFound(err) {
		return token{}, false
	}
	f.g.Expect(err).NotTo(HaveOccurred())
	t, found, err := parseTokenRecord(s)
	f.g.Expect(err).NotTo(HaveOccurred())
	return t, found && t.ended == ""
}

// tokenEnded is why the worker's token ended for good, as its record
// says; "" while it lives or when there is no record.
func (f *fixture) tokenEnded(w *worker) tokenEnded {
	s := &corev1.Secret{}
	err := mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: tokenRecordName(w.config.Name)}, s)
	if apierrors.IsNotFound(err) {
		return ""
	}
	f.g.Expect(err).NotTo(HaveOccurred())
	ended, ok := s.Data[endedKey]
	if ok {
		_, withToken := s.Data[tokenKey]
		f.g.Expect(withToken).To(BeFalse(), "an ended record keeps no token")
	}
	return tokenEnded(ended)
}

// workloadToken reads a bootstrap token Secret in the workload cluster.
func workloadToken(id string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := workload.Client.Get(suiteCtx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstrapapi.BootstrapTokenSecretPrefix + id}, s)
	return s, err
}

// workloadTokensFor lists the workload bootstrap tokens made for a config.
func workloadTokensFor(g Gomega, w *worker) []corev1.Secret {
	list := &corev1.SecretList{}
	g.Expect(workload.Client.List(suiteCtx, list, client.InNamespace(metav1.NamespaceSystem))).To(Succeed())
	var out []corev1.Secret
	want := fmt.Sprintf("Join token of KairosConfig %s/%s, made by the Kairos bootstrap provider", w.config.Namespace, w.config.Name)
	for _, s := range list.Items {
		if s.Type == bootstrapapi.SecretTypeBootstrapToken && string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey]) == want {
			out = append(out, s)
		}
	}
	return out
}
