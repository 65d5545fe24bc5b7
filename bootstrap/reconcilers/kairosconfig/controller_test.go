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
	"bytes"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/cloudconfig"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

const eventually = 30 * time.Second

func TestTokenCreatedAndBootstrapSecretWritten(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "worker-0-vm", spec: bootstrapv1.KairosConfigSpec{
		NodeLabels: map[string]string{"example.com/pool": "a"},
	}})
	data := f.waitForData(w)

	// The bootstrap Secret follows the contract.
	g.Expect(data.Type).To(Equal(clusterv1.ClusterSecretType))
	g.Expect(data.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, f.cluster.Name))
	g.Expect(metav1.GetControllerOf(data)).NotTo(BeNil())
	g.Expect(metav1.GetControllerOf(data).Kind).To(Equal("KairosConfig"))
	g.Expect(metav1.GetControllerOf(data).Name).To(Equal(w.config.Name))
	g.Expect(data.Data).To(HaveLen(2))
	g.Expect(string(data.Data["format"])).To(Equal("cloud-config"))

	cfg := &bootstrapv1.KairosConfig{}
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
	g.Expect(cfg.Status.DataSecretName).To(Equal(data.Name))
	g.Expect(cfg.Status.Initialization.DataSecretCreated).To(Equal(ptr.To(true)))
	g.Expect(cfg.Status.ObservedGeneration).To(Equal(cfg.Generation))
	g.Expect(cfg.Finalizers).To(ContainElement(bootstrapv1.ConfigFinalizer))
	ready := findCondition(cfg.Status.Conditions, bootstrapv1.ReadyCondition)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))

	// One token, kept in our Secret (never in spec), created in the
	// workload cluster with the TTL and the kubeadm node group.
	tok, found := f.storedToken(w)
	g.Expect(found).To(BeTrue())
	remote, err := workloadToken(tok.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(remote.Data[bootstrapapi.BootstrapTokenSecretKey])).To(Equal(tok.Secret))
	g.Expect(string(remote.Data[bootstrapapi.BootstrapTokenExtraGroupsKey])).To(Equal(NodeBootstrapTokenGroup))
	expiration, err := time.Parse(time.RFC3339, string(remote.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(expiration).To(BeTemporally("~", time.Now().Add(testTokenTTL), testTokenTTL))
	g.Expect(workloadTokensFor(g, w)).To(HaveLen(1))

	// The rendering joins with that token, the pinned CA, the endpoint,
	// and the VM name as hostname and providerID.
	value := string(data.Data["value"])
	g.Expect(value).To(HavePrefix("#cloud-config\n"))
	g.Expect(value).To(ContainSubstring(tok.String()))
	g.Expect(value).To(ContainSubstring(workload.Endpoint))
	g.Expect(value).To(ContainSubstring("hostname: worker-0-vm"))
	g.Expect(value).To(ContainSubstring("kubevirt://worker-0-vm"))
	g.Expect(value).To(ContainSubstring("sha256:"))
	g.Expect(value).To(ContainSubstring("example.com/pool=a"))
	g.Expect(value).NotTo(ContainSubstring("unsafeSkipCAVerification"))
	g.Expect(string(mustJSON(g, cfg.Spec))).NotTo(ContainSubstring(tok.Secret), "the token must never be in spec")
}

func TestTokenIsRefreshedUntilTheNodeJoins(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "refresh-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)
	first, err := workloadToken(tok.ID)
	g.Expect(err).NotTo(HaveOccurred())
	before := string(first.Data[bootstrapapi.BootstrapTokenExpirationKey])
	g.Eventually(func(g Gomega) string {
		s, err := workloadToken(tok.ID)
		g.Expect(err).NotTo(HaveOccurred())
		return string(s.Data[bootstrapapi.BootstrapTokenExpirationKey])
	}, eventually, 200*time.Millisecond).ShouldNot(Equal(before))

	// The same token is extended, never replaced: the rendered data stays valid.
	again, _ := f.storedToken(w)
	g.Expect(again.ID).To(Equal(tok.ID))
	g.Expect(workloadTokensFor(g, w)).To(HaveLen(1))

	// A token Secret that vanished before the node joined (expired and
	// cleaned up, or deleted by hand) is created again with the same value.
	g.Expect(workload.Client.Delete(suiteCtx, first)).To(Succeed())
	g.Eventually(func() error { _, err := workloadToken(tok.ID); return err }, eventually, 200*time.Millisecond).Should(Succeed())
}

func TestNodeJoinsAndTheTokenIsDeleted(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "joined-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)

	// The kubelet registers the Node; the Node watch in the workload
	// cluster triggers the revocation before Cluster API sets a nodeRef.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "joined-vm"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://joined-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })

	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, eventually, 100*time.Millisecond).Should(BeTrue())
	g.Eventually(func() bool { _, found := f.storedToken(w); return found }, eventually, 100*time.Millisecond).Should(BeFalse())
	// The data stays available and no new token appears.
	g.Consistently(func(g Gomega) []corev1.Secret { return workloadTokensFor(g, w) }, 2*time.Second, 200*time.Millisecond).Should(BeEmpty())
	g.Expect(f.condition(w)(g).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(f.tokenEnded(w)).To(Equal(endedJoined))
}

// TestAConfigThatJoinedNeverMintsAgain: the workload cluster's owner
// deletes the Node after it joined and before Cluster API set the nodeRef;
// the config, reconciled again, mints no new token and leaves its data as
// it was: its record says the token ended when the node joined.
func TestAConfigThatJoinedNeverMintsAgain(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "rejoin-vm"})
	data := f.waitForData(w)
	tok, _ := f.storedToken(w)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rejoin-vm"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://rejoin-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, eventually, 100*time.Millisecond).Should(BeTrue())
	g.Eventually(func() bool { _, live := f.storedToken(w); return live }, eventually, 100*time.Millisecond).Should(BeFalse())

	g.Expect(workload.Client.Delete(suiteCtx, node)).To(Succeed())
	// Any change of the Machine reconciles its config.
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.machine), w.machine)).To(Succeed())
	w.machine.Annotations = map[string]string{"example.com/touched": "after the Node was deleted"}
	g.Expect(mgmt.Client.Update(suiteCtx, w.machine)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(workloadTokensFor(g, w)).To(BeEmpty(), "no token is minted again")
		again := &corev1.Secret{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(data), again)).To(Succeed())
		g.Expect(again.Data["value"]).To(Equal(data.Data["value"]), "the data is not rendered again")
	}, 4*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.tokenEnded(w)).To(Equal(endedJoined))
}

// TestAJoinedConfigWithoutARecordIsMarkedEnded: a config whose node
// joined and whose record is gone (restored from a backup without it, or
// deleted by hand) mints nothing and gets the mark alone, so that a later
// loss of its Node mints nothing either.
func TestAJoinedConfigWithoutARecordIsMarkedEnded(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "restored-vm"})
	data := f.waitForData(w)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "restored-vm"}, Spec: corev1.NodeSpec{ProviderID: "kubevirt://restored-vm"}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })
	g.Eventually(f.tokenEnded, eventually, 100*time.Millisecond).WithArguments(w).Should(Equal(endedJoined))

	record := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: tokenRecordName(w.config.Name)}}
	g.Expect(mgmt.Client.Delete(suiteCtx, record)).To(Succeed())
	g.Eventually(f.tokenEnded, eventually, 100*time.Millisecond).WithArguments(w).Should(BeEmpty())
	// Any change of the Machine reconciles its config.
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.machine), w.machine)).To(Succeed())
	w.machine.Annotations = map[string]string{"example.com/touched": "after the record was deleted"}
	g.Expect(mgmt.Client.Update(suiteCtx, w.machine)).To(Succeed())
	g.Eventually(f.tokenEnded, eventually, 100*time.Millisecond).WithArguments(w).Should(Equal(endedJoined), "the mark is made again")
	g.Consistently(func(g Gomega) {
		g.Expect(workloadTokensFor(g, w)).To(BeEmpty(), "no token is minted")
		again := &corev1.Secret{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(data), again)).To(Succeed())
		g.Expect(again.Data["value"]).To(Equal(data.Data["value"]), "the data is not rendered again")
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestTokenKeepAliveIsBounded: a node that never joins keeps its token
// alive only for the keep-alive after the mint; then the token ends with
// its expiry, its record says why, and no new one is minted.
func TestTokenKeepAliveIsBounded(t *testing.T) {
	keepAlive := 2 * testTokenTTL
	startControllerWith(t, mgmt.Config, testTokenTTL, testKinds, "", func(r *Reconciler) { r.TokenKeepAlive = keepAlive })
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "never-joins-vm"})
	f.waitForData(w)
	tok, found := f.storedToken(w)
	g.Expect(found).To(BeTrue())

	// Extended while the keep-alive lasts, at most one TTL past it.
	g.Eventually(f.tokenEnded, keepAlive+testTokenTTL+eventually, 200*time.Millisecond).WithArguments(w).Should(Equal(endedKeepAlive))
	_, err := workloadToken(tok.ID)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the ended token is revoked")
	g.Eventually(func(g Gomega) []string { return eventsOf(g, w.config) }, eventually, 100*time.Millisecond).Should(ContainElement(
		"Normal BootstrapTokenRevoked Revoke: Revoked the bootstrap token in the workload cluster: the node had not joined when its keep-alive was over; no new token is minted for this Machine"))
	g.Consistently(func(g Gomega) []corev1.Secret { return workloadTokensFor(g, w) }, 2*testTokenTTL/3, 200*time.Millisecond).Should(BeEmpty())
}

func TestNodeRefRevokesTheToken(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "noderef-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)

	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.machine), w.machine)).To(Succeed())
	w.machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: "noderef-vm"}
	g.Expect(mgmt.Client.Status().Update(suiteCtx, w.machine)).To(Succeed())

	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, eventually, 100*time.Millisecond).Should(BeTrue())
	g.Eventually(func() bool { _, found := f.storedToken(w); return found }, eventually, 100*time.Millisecond).Should(BeFalse())
}

func TestMachineDeletedAndTheTokenIsDeleted(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "deleted-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)

	g.Expect(mgmt.Client.Delete(suiteCtx, w.machine)).To(Succeed())
	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, eventually, 100*time.Millisecond).Should(BeTrue())
	g.Eventually(func() bool { _, found := f.storedToken(w); return found }, eventually, 100*time.Millisecond).Should(BeFalse())
	g.Eventually(func(g Gomega) []string { return eventsOf(g, w.config) }, eventually, 100*time.Millisecond).Should(ContainElement(
		"Normal BootstrapTokenRevoked Revoke: Revoked the bootstrap token in the workload cluster: its Machine is being deleted"))
}

func TestConfigDeletedRevokesTheTokenBeforeItGoes(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	w := f.newWorker("worker-0", machineOptions{vmName: "config-deleted-vm"})
	f.waitForData(w)
	tok, _ := f.storedToken(w)

	// Cluster API deletes the bootstrap config when it deletes a Machine;
	// the finalizer holds the config until the token is revoked.
	g.Expect(mgmt.Client.Delete(suiteCtx, w.config)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), &bootstrapv1.KairosConfig{}))
	}, eventually, 100*time.Millisecond).Should(BeTrue())
	_, err := workloadToken(tok.ID)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the token must be revoked before the config is gone")
}

func TestControllerRestartNeitherDuplicatesNorLeaksTokens(t *testing.T) {
	f := newFixture(t, readyCluster)
	g := f.g

	// A controller that stored a token and died before creating it in the
	// workload cluster: the next one creates exactly that token.
	w := f.newWorker("worker-0", machineOptions{vmName: "restart-vm"})
	pending, err := generateToken(time.Now(), testTokenTTL)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), w.config)).To(Succeed())
	g.Expect(mgmt.Client.Create(suiteCtx, tokenRecordSecret(w.config, f.cluster.Name, pending))).To(Succeed())

	first := startController(t, testTokenTTL)
	data := f.waitForData(w)
	g.Expect(string(data.Data["value"])).To(ContainSubstring(pending.String()))
	g.Expect(workloadTokensFor(g, w)).To(HaveLen(1))
	_, err = workloadToken(pending.ID)
	g.Expect(err).NotTo(HaveOccurred())

	// Stop and start again: same token, same data, nothing new.
	first.stop()
	startController(t, testTokenTTL)
	second := f.newWorker("worker-1", machineOptions{vmName: "restart-vm-1"})
	f.waitForData(second) // the new manager is working
	g.Consistently(func(g Gomega) {
		g.Expect(workloadTokensFor(g, w)).To(HaveLen(1))
		tok, found := f.storedToken(w)
		g.Expect(found).To(BeTrue())
		g.Expect(tok.ID).To(Equal(pending.ID))
		again := &corev1.Secret{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(data), again)).To(Succeed())
		g.Expect(again.Data["value"]).To(Equal(data.Data["value"]))
	}, 3*time.Second, 300*time.Millisecond).Should(Succeed())
	g.Expect(workloadTokensFor(g, second)).To(HaveLen(1))
}

func TestWaitingConditions(t *testing.T) {
	startController(t, testTokenTTL)
	tests := []struct {
		name    string
		state   clusterState
		options machineOptions
		reason  string
		// release ends the wait; the data must then be written.
		release func(f *fixture, w *worker)
	}{
		{
			// Nothing but the Cluster watch ends this wait, and no token
			// is minted for a Cluster that does not exist.
			name:    "cluster does not exist",
			state:   clusterState{absent: true, caSecret: true, kubeconfigSecret: true},
			options: machineOptions{vmName: "wait-cluster-vm"},
			reason:  bootstrapv1.WaitingForClusterReason,
			release: func(f *fixture, _ *worker) { f.createCluster(readyCluster) },
		},
		{
			name:    "cluster infrastructure not provisioned",
			state:   clusterState{controlPlaneInitialized: true, endpoint: true, caSecret: true, kubeconfigSecret: true},
			options: machineOptions{vmName: "wait-infra-vm"},
			reason:  bootstrapv1.WaitingForClusterInfrastructureReason,
			release: func(f *fixture, _ *worker) { f.setClusterStatus(readyCluster) },
		},
		{
			name:    "control plane not initialized",
			state:   clusterState{infrastructureProvisioned: true, endpoint: true, caSecret: true, kubeconfigSecret: true},
			options: machineOptions{vmName: "wait-cp-vm"},
			reason:  bootstrapv1.WaitingForControlPlaneInitializedReason,
			release: func(f *fixture, _ *worker) { f.setClusterStatus(readyCluster) },
		},
		{
			name:    "cluster CA Secret missing",
			state:   clusterState{infrastructureProvisioned: true, controlPlaneInitialized: true, endpoint: true, kubeconfigSecret: true},
			options: machineOptions{vmName: "wait-ca-vm"},
			reason:  bootstrapv1.WaitingForClusterCAReason,
			release: func(f *fixture, _ *worker) { f.createClusterSecret("ca") },
		},
		{
			name:    "control plane endpoint not set",
			state:   clusterState{infrastructureProvisioned: true, controlPlaneInitialized: true, caSecret: true, kubeconfigSecret: true},
			options: machineOptions{vmName: "wait-endpoint-vm"},
			reason:  bootstrapv1.WaitingForControlPlaneEndpointReason,
			release: func(f *fixture, _ *worker) { f.setEndpoint() },
		},
		{
			// No kubeconfig Secret: the ClusterCache cannot connect, so no
			// token can be created in the workload cluster.
			name:    "workload cluster not reachable",
			state:   clusterState{infrastructureProvisioned: true, controlPlaneInitialized: true, endpoint: true, caSecret: true},
			options: machineOptions{vmName: "wait-workload-vm"},
			reason:  bootstrapv1.WaitingForWorkloadClusterReason,
			release: func(f *fixture, _ *worker) { f.createClusterSecret("kubeconfig") },
		},
		{
			// Machine.spec.infrastructureRef.name is required by the v1beta2
			// schema; the name is known but the object may not exist yet,
			// and the image's version cannot be checked without it. (The
			// empty-name wait is covered by TestRenderWaitsForTheInfrastructureName.)
			name:    "infrastructure machine not created yet",
			state:   readyCluster,
			options: machineOptions{vmName: "wait-infra-object-vm", skipInfrastructure: true},
			reason:  bootstrapv1.WaitingForInfrastructureReason,
			release: func(f *fixture, _ *worker) { f.newInfrastructureMachine("wait-infra-object-vm") },
		},
		{
			// The template names a class it has not resolved: its family is
			// unknown, and a token minted now could be for a Talos disk.
			// Nothing requeues this wait: the watch on the template kind
			// ends it.
			name:    "infrastructure template not resolved yet",
			state:   readyCluster,
			options: machineOptions{vmName: "wait-template-vm", templateClass: "kairos"},
			reason:  bootstrapv1.WaitingForInfrastructureTemplateReason,
			release: func(f *fixture, w *worker) {
				f.resolveTemplate(w.config.Name+"-template", map[string]any{
					"workerClassName": "kairos", "bootstrap": string(workerclassv1.BootstrapKairos),
					"kubernetesVersion": testVersion, "kubernetesVersionMatch": string(workerclassv1.KubernetesVersionMatchMinor),
				})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.state)
			w := f.newWorker("worker-0", tt.options)
			cond := f.waitForReason(w, tt.reason)
			f.g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			f.g.Expect(cond.Message).NotTo(BeEmpty())
			// Nothing was rendered and no token was minted while waiting.
			f.g.Expect(apierrors.IsNotFound(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: w.config.Name}, &corev1.Secret{}))).To(BeTrue())
			_, found := f.storedToken(w)
			f.g.Expect(found).To(BeFalse())
			tt.release(f, w)
			f.waitForData(w)
		})
	}
}

func (f *fixture) newInfrastructureMachine(name string) {
	infra := map[string]any{
		"apiVersion": "infrastructure.test.cozystack.io/v1alpha1", "kind": "TestMachine",
		"metadata": map[string]any{"namespace": f.namespace, "name": name}, "spec": map[string]any{},
	}
	f.g.Expect(mgmt.Client.Create(suiteCtx, unstructuredFrom(infra))).To(Succeed())
}

func TestKubernetesVersionMismatchRendersNothing(t *testing.T) {
	startController(t, testTokenTTL)
	tests := []struct {
		name         string
		machine      string
		image        string
		match        string
		wantMismatch bool
	}{
		{name: "fixed image: another patch is a mismatch", machine: "v1.35.5", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact), wantMismatch: true},
		{name: "fixed image: the exact patch matches", machine: "v1.35.6", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchExact)},
		{name: "platform image: another minor is a mismatch", machine: "v1.34.9", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchMinor), wantMismatch: true},
		{name: "platform image: any patch of the minor matches", machine: "v1.35.1", image: "v1.35.6", match: string(workerclassv1.KubernetesVersionMatchMinor)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, readyCluster)
			w := f.newWorker("worker-0", machineOptions{
				vmName:   "version-vm-" + string(rune('a'+i)),
				version:  tt.machine,
				template: map[string]any{"kubernetesVersion": tt.image, "kubernetesVersionMatch": tt.match},
			})
			if !tt.wantMismatch {
				f.waitForData(w)
				return
			}
			cond := f.waitForReason(w, bootstrapv1.KubernetesVersionMismatchReason)
			f.g.Expect(cond.Message).To(ContainSubstring(tt.machine))
			f.g.Expect(cond.Message).To(ContainSubstring(tt.image))
			f.g.Consistently(func(g Gomega) {
				g.Expect(apierrors.IsNotFound(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: w.config.Name}, &corev1.Secret{}))).To(BeTrue())
				g.Expect(workloadTokensFor(g, w)).To(BeEmpty())
			}, time.Second, 200*time.Millisecond).Should(Succeed())
			_, found := f.storedToken(w)
			f.g.Expect(found).To(BeFalse())
		})
	}
}

func TestPausedClusterIsNotReconciled(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(f.cluster), f.cluster)).To(Succeed())
	f.cluster.Spec.Paused = ptr.To(true)
	g.Expect(mgmt.Client.Update(suiteCtx, f.cluster)).To(Succeed())
	w := f.newWorker("worker-0", machineOptions{vmName: "paused-vm"})
	g.Eventually(func(g Gomega) {
		cfg := &bootstrapv1.KairosConfig{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
		paused := findCondition(cfg.Status.Conditions, clusterv1.PausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Status).To(Equal(metav1.ConditionTrue))
	}, eventually, 100*time.Millisecond).Should(Succeed())
	_, found := f.storedToken(w)
	g.Expect(found).To(BeFalse())

	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(f.cluster), f.cluster)).To(Succeed())
	f.cluster.Spec.Paused = ptr.To(false)
	g.Expect(mgmt.Client.Update(suiteCtx, f.cluster)).To(Succeed())
	f.waitForData(w)
}

func TestFilesFromSecretsAndClusterProviderMode(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	// Kairos's kubeadm provider stops without the Kubernetes version: a
	// Machine without one gets nothing, and no token.
	unversioned := f.newWorker("worker-unversioned", machineOptions{unversioned: true, vmName: "unversioned-vm", spec: bootstrapv1.KairosConfigSpec{
		JoinMode: bootstrapv1.JoinModeClusterProvider,
	}})
	cond := f.waitForReason(unversioned, bootstrapv1.KubernetesVersionRequiredReason)
	g.Expect(cond.Message).To(ContainSubstring("Machine spec.version is required with joinMode ClusterProvider"))
	_, found := f.storedToken(unversioned)
	g.Expect(found).To(BeFalse(), "no token for a config that cannot be rendered")

	w := f.newWorker("worker-0", machineOptions{version: "v1.35.6", vmName: "files-vm", spec: bootstrapv1.KairosConfigSpec{
		JoinMode: bootstrapv1.JoinModeClusterProvider,
		Files: []bootstrapv1.File{{
			Path:        "/etc/app/credentials",
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "app", Key: "credentials"}},
		}},
	}})
	cond = f.waitForReason(w, bootstrapv1.FileSourceNotAvailableReason)
	g.Expect(cond.Message).To(ContainSubstring("spec.files[0].contentFrom.secret"))

	g.Expect(mgmt.Client.Create(suiteCtx, &corev1.Secret{
		// The cluster-name label puts the Secret in the controller's cache,
		// so its creation is seen at once.
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "app", Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
		Data:       map[string][]byte{"credentials": []byte("user: {{ not a template }}\n")},
	})).To(Succeed())
	data := f.waitForData(w)
	value := string(data.Data["value"])
	g.Expect(value).To(ContainSubstring("control_plane_host: " + workload.Endpoint))
	g.Expect(value).To(ContainSubstring("role: worker"))
	g.Expect(value).To(ContainSubstring(`"kubernetesVersion": "v1.35.6"`), "the Machine's version, for the provider")
	g.Expect(value).To(ContainSubstring(`user: {{ "{{" }} not a template }}`))
	g.Expect(value).To(ContainSubstring("permissions: 384 # 0600"))
	g.Expect(strings.Count(value, "kubeadm join")).To(BeZero(), "the provider joins; the stages must not join a second time")
	g.Expect(value).To(ContainSubstring(cloudconfig.StageReportSuccess))
}

// TestBootstrapDataTooLargeForASecret: files that would render past a
// Secret's 1 MiB say so on the config, with both sizes, and no token is
// minted for them; once they shrink, the data is written. Contents that
// alone cannot fit are refused before they are rendered; contents that fit
// but render past the limit (binary content is carried base64-encoded)
// are refused after.
func TestBootstrapDataTooLargeForASecret(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	fileFrom := func(name string) bootstrapv1.File {
		return bootstrapv1.File{Path: "/etc/app/" + name, ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: name, Key: "blob"}}}
	}
	for _, s := range []struct {
		name string
		blob []byte
	}{
		{"first", bytes.Repeat([]byte("a"), 600*1024)},
		{"second", bytes.Repeat([]byte("a"), 600*1024)},
		{"binary", make([]byte, 900*1024)},
	} {
		g.Expect(mgmt.Client.Create(suiteCtx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: s.name, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
			Data:       map[string][]byte{"blob": s.blob},
		})).To(Succeed())
	}
	summed := f.newWorker("worker-0", machineOptions{vmName: "large-vm", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{fileFrom("first"), fileFrom("second")}}})
	rendered := f.newWorker("worker-1", machineOptions{vmName: "binary-vm", spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{fileFrom("binary")}}})
	cond := f.waitForReason(summed, bootstrapv1.BootstrapDataTooLargeReason)
	g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond.Message).To(Equal("The bootstrap data would be at least 1228812 bytes, the size of the contents of spec.files[0] to spec.files[1], " +
		"and a Secret holds at most 1048576: shrink spec.files"))
	cond = f.waitForReason(rendered, bootstrapv1.BootstrapDataTooLargeReason)
	g.Expect(cond.Message).To(MatchRegexp(`^The rendered bootstrap data is \d+ bytes and a Secret holds at most 1048576: shrink spec.files$`))
	for _, w := range []*worker{summed, rendered} {
		_, found := f.storedToken(w)
		g.Expect(found).To(BeFalse(), "no token for data that cannot be stored")
	}

	for _, name := range []string{"second", "binary"} {
		shrunk := &corev1.Secret{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKey{Namespace: f.namespace, Name: name}, shrunk)).To(Succeed())
		shrunk.Data["blob"] = []byte("small")
		g.Expect(mgmt.Client.Update(suiteCtx, shrunk)).To(Succeed())
	}
	f.waitForData(summed)
	f.waitForData(rendered)
}

// TestFilesFromClusterAPISecretsAreNeverRendered: a file that reads one
// of Cluster API's own Secrets renders nothing, for good. The webhook
// refuses the cluster's Secrets by name (the CA, with its key, here); the
// controller also knows them by type, as another Machine's bootstrap data.
func TestFilesFromClusterAPISecretsAreNeverRendered(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	caFile := bootstrapv1.File{Path: "/etc/ca.key",
		ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: f.cluster.Name + "-ca", Key: "tls.key"}}}
	thief := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "ca-thief",
		Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}}, Spec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{caFile}}}
	g.Expect(mgmt.Client.Create(suiteCtx, thief)).To(MatchError(ContainSubstring(
		"spec.files[0].contentFrom.secret.name: Forbidden: Secret " + f.cluster.Name + "-ca is Cluster API's \"ca\" Secret")))

	// Another Machine's bootstrap data, under a name the webhook cannot
	// know.
	g.Expect(mgmt.Client.Create(suiteCtx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "neighbour", Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\n")},
	})).To(Succeed())
	w := f.newWorker("worker-0", machineOptions{vmName: "data-thief", spec: bootstrapv1.KairosConfigSpec{
		Files: []bootstrapv1.File{{Path: "/etc/neighbour",
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "neighbour", Key: "value"}}}},
	}})
	cond := f.waitForReason(w, bootstrapv1.FileSourceForbiddenReason)
	g.Expect(cond.Message).To(Equal("spec.files[0].contentFrom.secret: Secret neighbour is of Cluster API's Secret type cluster.x-k8s.io/secret and is never copied into a worker"))
	g.Consistently(func(g Gomega) {
		config := &bootstrapv1.KairosConfig{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), config)).To(Succeed())
		g.Expect(config.Status.DataSecretName).To(BeEmpty())
		g.Expect(workloadTokensFor(g, w)).To(BeEmpty(), "no token is minted for data that is never rendered")
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// TestFilesFromAnotherClustersSecretsAreNeverRendered: the Secrets of
// every cluster of the namespace are Cluster API's, not only the config's
// own cluster's. A neighbour's bring-your-own CA carries neither Cluster
// API's type nor, necessarily, a label: its name and the neighbour
// Cluster say whose it is. One labelled for a cluster still to come is
// refused by its label.
func TestFilesFromAnotherClustersSecretsAreNeverRendered(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	fileFrom := func(name, key string) bootstrapv1.KairosConfigSpec {
		return bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/stolen",
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: name, Key: key}}}}}
	}
	byoCA := func(name string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: labels},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("certificate"), "tls.key": []byte("the neighbour's CA key")}}
	}

	// Written before the neighbour Cluster and its CA exist, so the webhook
	// had nothing to know it by; the controller waits for the Secret.
	w := f.newWorker("worker-0", machineOptions{vmName: "byo-thief", spec: fileFrom("staging-ca", "tls.key")})
	f.waitForReason(w, bootstrapv1.FileSourceNotAvailableReason)
	g.Expect(mgmt.Client.Create(suiteCtx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "staging"},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}})).To(Succeed())
	g.Expect(mgmt.Client.Create(suiteCtx, byoCA("staging-ca", nil))).To(Succeed())
	cond := f.waitForReason(w, bootstrapv1.FileSourceForbiddenReason)
	g.Expect(cond.Message).To(Equal(`spec.files[0].contentFrom.secret: Secret staging-ca is Cluster API's "ca" Secret of cluster staging and is never copied into a worker`))

	// A CA labelled for a Cluster not created yet.
	g.Expect(mgmt.Client.Create(suiteCtx, byoCA("next-ca", map[string]string{clusterv1.ClusterNameLabel: "next"}))).To(Succeed())
	next := f.newWorker("worker-1", machineOptions{vmName: "next-thief", spec: fileFrom("next-ca", "tls.key")})
	cond = f.waitForReason(next, bootstrapv1.FileSourceForbiddenReason)
	g.Expect(cond.Message).To(Equal(`spec.files[0].contentFrom.secret: Secret next-ca is Cluster API's "ca" Secret of cluster next and is never copied into a worker`))

	// Once the neighbour Cluster exists, the webhook refuses at once.
	thief := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "byo-thief-2"}, Spec: fileFrom("staging-ca", "tls.key")}
	g.Expect(mgmt.Client.Create(suiteCtx, thief)).To(MatchError(ContainSubstring(
		`spec.files[0].contentFrom.secret.name: Forbidden: Secret staging-ca is Cluster API's "ca" Secret of cluster staging`)))

	g.Consistently(func(g Gomega) {
		for _, w := range []*worker{w, next} {
			config := &bootstrapv1.KairosConfig{}
			g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), config)).To(Succeed())
			g.Expect(config.Status.DataSecretName).To(BeEmpty())
			g.Expect(workloadTokensFor(g, w)).To(BeEmpty(), "no token is minted for data that is never rendered")
		}
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

func findCondition(list []metav1.Condition, t string) *metav1.Condition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// TestAConfigWithoutAnOwnerMachineSetsItsConditions: Cluster API's
// MachineSet creates a config before its Machine owns it. Until then the
// config says so in every condition it owns, takes no finalizer and gets
// no token; a paused one only says that it is paused.
func TestAConfigWithoutAnOwnerMachineSetsItsConditions(t *testing.T) {
	startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	labels := map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}
	unowned := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "unowned", Labels: labels}}
	paused := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "unowned-paused", Labels: labels,
		Annotations: map[string]string{clusterv1.PausedAnnotation: ""}}}
	g.Expect(mgmt.Client.Create(suiteCtx, unowned)).To(Succeed())
	g.Expect(mgmt.Client.Create(suiteCtx, paused)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(unowned), unowned)).To(Succeed())
		g.Expect(unowned.Status.Conditions).To(ConsistOf(
			HaveField("Type", bootstrapv1.ReadyCondition),
			And(HaveField("Type", bootstrapv1.DataSecretAvailableCondition), HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", bootstrapv1.WaitingForOwnerReason), HaveField("Message", "Waiting for a Machine to own this KairosConfig")),
			And(HaveField("Type", clusterv1.PausedCondition), HaveField("Status", metav1.ConditionFalse)),
		))
		g.Expect(conditions.GetReason(unowned, bootstrapv1.ReadyCondition)).To(Equal(bootstrapv1.NotReadyReason))
		g.Expect(unowned.Status.ObservedGeneration).To(Equal(unowned.Generation))
	}, eventually, 50*time.Millisecond).Should(Succeed())
	g.Expect(unowned.Finalizers).To(BeEmpty())
	_, found := f.storedToken(&worker{config: unowned})
	g.Expect(found).To(BeFalse(), "no token before a Machine owns the config")

	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(paused), paused)).To(Succeed())
		g.Expect(conditions.IsTrue(paused, clusterv1.PausedCondition)).To(BeTrue())
	}, eventually, 50*time.Millisecond).Should(Succeed())
	g.Expect(conditions.Has(paused, bootstrapv1.DataSecretAvailableCondition)).To(BeFalse(), "a paused config only records that")
}

// TestAConfigOfAMachineBeingCreatedWaitsWithoutWriting: Cluster API's
// MachineSet owns the config it makes for a Machine it is creating, until
// the Machine controller makes the Machine the owner moments later. The
// config is not written in between: a WaitingForOwner condition would be
// overwritten at once.
func TestAConfigOfAMachineBeingCreatedWaitsWithoutWriting(t *testing.T) {
	cm := startController(t, testTokenTTL)
	f := newFixture(t, readyCluster)
	g := f.g
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.namespace, Name: "being-created",
		Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: "workers", UID: "machineset-uid", Controller: ptr.To(true),
		}},
	}}
	g.Expect(mgmt.Client.Create(suiteCtx, config)).To(Succeed())
	g.Eventually(func() error {
		return cm.reconciler.Client.Get(suiteCtx, client.ObjectKeyFromObject(config), &bootstrapv1.KairosConfig{})
	}, eventually, 50*time.Millisecond).Should(Succeed())

	res, requests := reconcileAlone(g, cm, &worker{config: config}, time.Now())
	g.Expect(requests).To(BeEmpty())
	g.Expect(res.IsZero()).To(BeTrue(), "the Machine's ownership reconciles the config")
	g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(config), config)).To(Succeed())
	g.Expect(config.Status.Conditions).To(BeEmpty())
	g.Expect(config.Finalizers).To(BeEmpty())
}
