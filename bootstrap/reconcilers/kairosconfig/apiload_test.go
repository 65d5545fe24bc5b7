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
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// The API load of the reconciler (issue 7): every read is a cache hit, and
// each write happens once per Machine, even when reconciles outrun the
// cache. The suite's managers record their requests (requests.Log).

// loadTTL is long, so that no refresh falls into a test.
const loadTTL = time.Hour

// requestsOf selects the requests about one fixture's worker: management
// requests in its namespace, workload requests for its token.
func requestsOf(f *fixture, tokenID string) func(requests.Request) bool {
	return func(r requests.Request) bool {
		if r.Cluster == requests.ClusterWorkload {
			return r.Name == bootstrapapi.BootstrapTokenSecretPrefix+tokenID
		}
		return r.Namespace == f.namespace
	}
}

// settled waits until the manager's cache shows what the controller wrote:
// the config rendered and ready, and the token record holding a live token
// (recordWanted) or ended.
func settled(g Gomega, cm *controllerManager, w *worker, recordWanted bool) {
	g.Eventually(func(g Gomega) {
		cfg := &bootstrapv1.KairosConfig{}
		g.Expect(cm.reconciler.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
		g.Expect(cfg.Status.Initialization.DataSecretCreated).To(Equal(ptr.To(true)))
		g.Expect(conditions.IsTrue(cfg, bootstrapv1.ReadyCondition)).To(BeTrue())
		t, found, err := getTokenRecord(suiteCtx, cm.reconciler.SecretCachingClient, cfg)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue())
		if recordWanted {
			g.Expect(t.ended).To(BeEmpty(), "the record holds a live token")
		} else {
			g.Expect(t.ended).NotTo(BeEmpty(), "the record says the token ended")
		}
	}, eventually, 50*time.Millisecond).Should(Succeed())
}

// reconcileAlone runs one Reconcile of w's config outside the controller,
// with the manager's clients and cache and a clock of its own, and returns
// the requests it sent.
func reconcileAlone(g Gomega, cm *controllerManager, w *worker, now time.Time) (ctrl.Result, []string) {
	r := &Reconciler{
		Client:              cm.reconciler.Client,
		SecretCachingClient: cm.reconciler.SecretCachingClient,
		APIReader:           cm.reconciler.APIReader,
		ClusterCache:        cm.reconciler.ClusterCache,
		TokenTTL:            cm.reconciler.TokenTTL,
		InfrastructureKinds: cm.reconciler.InfrastructureKinds,
		Recorder:            cm.reconciler.Recorder,
		now:                 func() time.Time { return now },
		expect:              newExpectations(),
	}
	log := &requests.Log{}
	res, err := r.Reconcile(log.Into(context.Background()), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w.config)})
	g.Expect(err).NotTo(HaveOccurred())
	return res, log.Strings(nil)
}

func TestOneMachineIsWrittenOnceFromCreationToJoin(t *testing.T) {
	cm := startController(t, loadTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	// A workload cluster not connected yet is a wait the status reports;
	// this test counts the writes of a Machine that does not wait.
	g.Eventually(func() error {
		_, err := cm.clusterCache.GetClient(suiteCtx, client.ObjectKeyFromObject(f.cluster))
		return err
	}, eventually, 50*time.Millisecond).Should(Succeed())
	w := f.newWorker("worker-0", machineOptions{vmName: "load-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)
	ours := requestsOf(f, tok.ID)
	// The Events are writes the recorder sends in the background: counted
	// on their own, below.
	writes := func(r requests.Request) bool { return ours(r) && r.IsWrite() && r.Resource != "events" }
	reads := func(r requests.Request) bool { return ours(r) && !r.IsWrite() }

	// Until the data is ready: the finalizer, Paused=False (Cluster API's
	// paused helper, a patch of its own), the status (its conditions and
	// its other fields are two patches of Cluster API's patch helper), our
	// token record, the workload token and the bootstrap data. Nothing
	// more, though the Machine's and the Cluster's events reconcile the
	// config again and again.
	ns := f.namespace
	rendered := []string{
		"management patch kairosconfigs " + ns + "/worker-0",
		"management patch kairosconfigs/status " + ns + "/worker-0",
		"management patch kairosconfigs/status " + ns + "/worker-0",
		"management patch kairosconfigs/status " + ns + "/worker-0",
		"management create secrets " + ns + "/" + tokenRecordName(w.config.Name),
		"management create secrets " + ns + "/worker-0",
		"workload create secrets kube-system/" + bootstrapapi.BootstrapTokenSecretPrefix + tok.ID,
	}
	settled(g, cm, w, true)
	g.Consistently(func() []string { return cm.requests.Strings(writes) }, time.Second, 100*time.Millisecond).Should(ConsistOf(rendered))

	// The node joins: the workload token is deleted and our record ended,
	// once.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "load-vm"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://load-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.machine), w.machine)).To(Succeed())
	w.machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: "load-vm"}
	g.Expect(mgmt.Client.Status().Update(suiteCtx, w.machine)).To(Succeed())
	joined := append(rendered,
		"workload delete secrets kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+tok.ID,
		"management patch secrets "+ns+"/"+tokenRecordName(w.config.Name),
	)
	g.Eventually(func() []string { return cm.requests.Strings(writes) }, eventually, 50*time.Millisecond).Should(ConsistOf(joined))
	settled(g, cm, w, false)
	g.Consistently(func() []string { return cm.requests.Strings(writes) }, time.Second, 100*time.Millisecond).Should(ConsistOf(joined))

	// Every read of the controller was a cache hit.
	g.Expect(cm.requests.Strings(reads)).To(BeEmpty())

	// One Event for each transition of the machine's life, each created
	// once and never made a series: the reconciles the Machine's, the
	// Cluster's and the Node's events caused added none.
	lifeEvents := []string{
		"Normal BootstrapDataReady Render: Wrote the bootstrap data Secret worker-0 (join mode Stages)",
		"Normal BootstrapTokenRevoked Revoke: Revoked the bootstrap token in the workload cluster: the node joined",
	}
	g.Eventually(func(g Gomega) []string { return eventsOf(g, w.config) }, eventually, 50*time.Millisecond).Should(Equal(lifeEvents))
	eventWrites := func(r requests.Request) bool { return ours(r) && r.IsWrite() && r.Resource == "events" }
	g.Consistently(func(g Gomega) {
		g.Expect(eventsOf(g, w.config)).To(Equal(lifeEvents))
		sent := cm.requests.Requests(eventWrites)
		g.Expect(sent).To(HaveLen(len(lifeEvents)))
		for _, r := range sent {
			g.Expect(r.Verb).To(Equal("create"))
		}
	}, time.Second, 100*time.Millisecond).Should(Succeed())

	// A joined Machine's config costs nothing to reconcile.
	res, requests := reconcileAlone(g, cm, w, time.Now())
	g.Expect(requests).To(BeEmpty())
	g.Expect(res.IsZero()).To(BeTrue())
}

// The bootstrap data is ready after the first reconcile of a config owned
// by its Machine: the finalizer and Paused=False are patches of their own
// (Cluster API's helpers), but the reconcile goes on after them instead of
// waiting for their events to come back through the cache, two watch round
// trips that stood between a Machine's creation and its bootstrap data.
func TestTheFirstReconcileOfAMachinesConfigRendersItsData(t *testing.T) {
	cm := startIdleController(t)
	f := newFixture(t, readyCluster)
	g := f.g
	g.Eventually(func() error {
		_, err := cm.clusterCache.GetClient(suiteCtx, client.ObjectKeyFromObject(f.cluster))
		return err
	}, eventually, 50*time.Millisecond).Should(Succeed())
	w := f.newWorker("worker-0", machineOptions{vmName: "first-vm"})
	// The manager's cache has the config and its Machine, as the
	// controller's first reconcile would.
	g.Eventually(func() error {
		return cm.reconciler.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.machine), &clusterv1.Machine{})
	}, eventually, 50*time.Millisecond).Should(Succeed())
	g.Eventually(func() error {
		return cm.reconciler.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), &bootstrapv1.KairosConfig{})
	}, eventually, 50*time.Millisecond).Should(Succeed())

	_, sent := reconcileAlone(g, cm, w, time.Now())
	tok, found := f.storedToken(w)
	g.Expect(found).To(BeTrue())
	ns := f.namespace
	g.Expect(sent).To(ConsistOf(
		"management patch kairosconfigs "+ns+"/worker-0",
		"management patch kairosconfigs/status "+ns+"/worker-0",
		"management patch kairosconfigs/status "+ns+"/worker-0",
		"management patch kairosconfigs/status "+ns+"/worker-0",
		"management create secrets "+ns+"/"+tokenRecordName(w.config.Name),
		"management create secrets "+ns+"/worker-0",
		"workload create secrets kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+tok.ID,
	), "the finalizer, Paused=False, the status in the patch helper's two patches, the token and the data; no conflict retried")

	cfg := &bootstrapv1.KairosConfig{}
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
	g.Expect(cfg.Finalizers).To(ContainElement(bootstrapv1.ConfigFinalizer))
	g.Expect(conditions.IsFalse(cfg, clusterv1.PausedCondition)).To(BeTrue())
	g.Expect(conditions.IsTrue(cfg, bootstrapv1.ReadyCondition)).To(BeTrue())
	g.Expect(cfg.Status.DataSecretName).To(Equal(w.config.Name))
	g.Expect(cfg.Status.Initialization.DataSecretCreated).To(Equal(ptr.To(true)))
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: w.config.Name}, &corev1.Secret{})).To(Succeed())
}

func TestAReadyConfigIsReconciledWithoutRequests(t *testing.T) {
	cm := startController(t, loadTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "ready-vm"})
	f.waitForData(w)
	settled(g, cm, w, true)

	// Waiting for the node with a token that needs no refresh: no reads
	// (not of the token record, not of the workload token), no writes.
	res, requests := reconcileAlone(g, cm, w, time.Now())
	g.Expect(requests).To(BeEmpty())
	g.Expect(res.RequeueAfter).To(Equal(refreshInterval(loadTTL)))
}

func TestADueRefreshPatchesTheTokenWithoutReadingIt(t *testing.T) {
	cm := startController(t, loadTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "due-vm"})
	f.waitForData(w)
	settled(g, cm, w, true)
	tok, _ := f.storedToken(w)

	// Half the TTL later the expiry is pushed out: one patch of the
	// workload token and one update of our record, nothing read.
	later := time.Now().Add(loadTTL / 2)
	res, requests := reconcileAlone(g, cm, w, later)
	g.Expect(requests).To(ConsistOf(
		"workload patch secrets kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+tok.ID,
		"management update secrets "+f.namespace+"/"+tokenRecordName(w.config.Name),
	))
	g.Expect(res.RequeueAfter).To(Equal(refreshInterval(loadTTL)))
	want := later.Add(loadTTL).UTC().Truncate(time.Second).Format(time.RFC3339)
	remote, err := workloadToken(tok.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(remote.Data[bootstrapapi.BootstrapTokenExpirationKey])).To(Equal(want))
	g.Expect(string(remote.Data[bootstrapapi.BootstrapTokenSecretKey])).To(Equal(tok.Secret), "the same token is extended")
	stored, _ := f.storedToken(w)
	g.Expect(stored.Expiration.Format(time.RFC3339)).To(Equal(want))

	// A workload token deleted by hand comes back with the same value at
	// the next refresh, still without a read.
	g.Expect(workload.Client.Delete(suiteCtx, remote)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(cm.reconciler.SecretCachingClient.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: tokenRecordName(w.config.Name)}, s)).To(Succeed())
		g.Expect(string(s.Data[expirationKey])).To(Equal(want))
	}, eventually, 50*time.Millisecond).Should(Succeed())
	_, requests = reconcileAlone(g, cm, w, later.Add(loadTTL/2))
	g.Expect(requests).To(ConsistOf(
		"workload patch secrets kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+tok.ID,
		"workload create secrets kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+tok.ID,
		"management update secrets "+f.namespace+"/"+tokenRecordName(w.config.Name),
	))
	remote, err = workloadToken(tok.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(remote.Data[bootstrapapi.BootstrapTokenSecretKey])).To(Equal(tok.Secret))
}

// TestExpectations covers what the reconciler remembers beyond the
// versions its writes replaced (internal/ownwrites tests those).
func TestExpectations(t *testing.T) {
	key := client.ObjectKey{Namespace: "ns", Name: "c"}
	t.Run("a revoked token's cached record counts as gone until the cache drops it", func(t *testing.T) {
		g := NewWithT(t)
		e := newExpectations()
		e.endedToken(key, "abcdef", "")
		g.Expect(e.tokenRevoked(key, "abcdef")).To(BeTrue())
		g.Expect(e.endedAs(key)).To(BeEmpty(), "a deleted record")
		g.Expect(e.tokenRevoked(key, "123456")).To(BeFalse(), "a new token of the same config is live")
		e.tokenRecordGone(key)
		g.Expect(e.tokenRevoked(key, "abcdef")).To(BeFalse(), "once the cache dropped it, a record with that ID is a new one")
	})
	t.Run("an ended token's cached record counts as ended until the cache shows it", func(t *testing.T) {
		g := NewWithT(t)
		e := newExpectations()
		e.endedToken(key, "abcdef", endedJoined)
		g.Expect(e.tokenRevoked(key, "abcdef")).To(BeTrue())
		g.Expect(e.endedAs(key)).To(Equal(endedJoined))
		e.tokenRecordGone(key)
		g.Expect(e.tokenRevoked(key, "abcdef")).To(BeFalse())
		g.Expect(e.endedAs(key)).To(BeEmpty())
	})
	t.Run("a config that is gone is forgotten", func(t *testing.T) {
		g := NewWithT(t)
		e := newExpectations()
		e.Wrote(key, "1", []string{"2"})
		e.endedToken(key, "abcdef", endedJoined)
		e.forget(key)
		g.Expect(e.CacheBehind(key, "1")).To(BeFalse(), "the versions our writes replaced are forgotten")
		g.Expect(e.tokenRevoked(key, "abcdef")).To(BeFalse(), "the revocation is forgotten")
	})
}

// A manager whose cache drops Secret data (Cluster API's bootstrap cache
// options, not SecretCacheOptions) still finds the token, by reading it
// directly.
func TestTokenRecordWithoutCachedDataIsReadDirectly(t *testing.T) {
	g := NewWithT(t)
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid"}}
	tok, err := generateToken(time.Now(), time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	live := tokenRecordSecret(config, "cluster", tok)
	cached := live.DeepCopy()
	cached.Data = nil
	r := &Reconciler{
		SecretCachingClient: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cached).Build(),
		APIReader:           fake.NewClientBuilder().WithScheme(scheme).WithObjects(live).Build(),
		expect:              newExpectations(),
	}
	got, found, err := r.readTokenRecord(context.Background(), config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeTrue())
	g.Expect(got.ID).To(Equal(tok.ID))

	// A record without data even on the server holds no token.
	r.APIReader = fake.NewClientBuilder().WithScheme(scheme).WithObjects(cached).Build()
	_, found, err = r.readTokenRecord(context.Background(), config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeFalse())
}

// TestForgettingATokenKeepsARecordMadeSince: the record of a token is
// deleted only while it is the Secret the token was read from. A record
// made again in between (another token for the same config) stays, or
// its token would be live in the workload cluster with nothing to revoke
// it.
func TestForgettingATokenKeepsARecordMadeSince(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace("forget-token")
	g.Expect(mgmt.Client.Create(ctx, ns)).To(Succeed())
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "c"}}
	g.Expect(mgmt.Client.Create(ctx, config)).To(Succeed())
	r := &Reconciler{Client: mgmt.Client, APIReader: mgmt.Client, expect: newExpectations()}

	first, err := generateToken(time.Now(), time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mgmt.Client.Create(ctx, tokenRecordSecret(config, "cluster", first))).To(Succeed())
	read, found, err := r.readTokenRecordLive(ctx, config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeTrue())
	g.Expect(read.recordUID).NotTo(BeEmpty())

	// The record is replaced by one of a second token.
	record := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: tokenRecordName(config.Name)}}
	g.Expect(mgmt.Client.Delete(ctx, record)).To(Succeed())
	second, err := generateToken(time.Now(), time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mgmt.Client.Create(ctx, tokenRecordSecret(config, "cluster", second))).To(Succeed())

	g.Expect(r.forgetTokenRecord(ctx, config, read)).To(Succeed())
	kept, found, err := r.readTokenRecordLive(ctx, config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeTrue(), "the second token's record is kept")
	g.Expect(kept.ID).To(Equal(second.ID))

	// Its own record is forgotten.
	g.Expect(r.forgetTokenRecord(ctx, config, kept)).To(Succeed())
	_, found, err = r.readTokenRecordLive(ctx, config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeFalse())
	// A token without a record to forget is a programming error, not a
	// deletion by name.
	g.Expect(r.forgetTokenRecord(ctx, config, second)).To(MatchError(ContainSubstring("has no record")))
}

// eventsOf lists the Events of a config as "type reason action: note",
// sorted; one the recorder made a series (a repeat) says so, and no note
// carries bootstrap data or a token.
func eventsOf(g Gomega, config *bootstrapv1.KairosConfig) []string {
	list := &eventsv1.EventList{}
	g.Expect(mgmt.Client.List(suiteCtx, list, client.InNamespace(config.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind != "KairosConfig" || e.Regarding.Name != config.Name {
			continue
		}
		g.Expect(e.Note).NotTo(ContainSubstring("cloud-config"))
		g.Expect(e.Note).NotTo(MatchRegexp(`[a-z0-9]{6}\.[a-z0-9]{16}`), "a bootstrap token")
		line := e.Type + " " + e.Reason + " " + e.Action + ": " + e.Note
		if e.Series != nil {
			line += fmt.Sprintf(" (repeated %d times)", e.Series.Count)
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}
