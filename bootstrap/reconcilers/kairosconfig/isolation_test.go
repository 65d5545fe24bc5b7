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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/requests"
)

// hostileConfigs is how many KairosConfigs the hostile tenant makes.
const hostileConfigs = 300

// TestATenantCannotStallAnother: the controller runs as the bootstrap
// provider's own role (config/bootstrap/rbac), as in production, and two
// tenants write as their own users, each in its namespace. One tenant's
// hundreds of Machines name an infrastructure kind that role cannot list
// (a CRD that follows the contract, so Cluster API's lookup finds it): a
// read of it through the shared cache would start an informer that never
// syncs and hold a worker until the reconcile timeout, a minute each, so
// the other tenant's worker would wait for an hour. The controller
// follows only the KubeVirt provider's kinds: each hostile config reports
// InfrastructureKindNotSupported, naming the kind and the field, and the
// other tenant's worker gets its bootstrap data and joins as it did
// before they existed (the ratio of the two is logged, not asserted).
func TestATenantCannotStallAnother(t *testing.T) {
	g := NewWithT(t)
	startControllerAs(t, bootstrapProviderUser(t), testTokenTTL, KubeVirtKinds)
	hostile := newFixture(t, readyCluster)
	victim := newFixture(t, readyCluster)
	hostileClient := tenantClient(t, hostile.namespace)
	victimClient := tenantClient(t, victim.namespace)

	joinOnce := func(name string) time.Duration { return joinAsTenant(t, victim, victimClient, name) }
	alone := joinOnce("victim-0")

	for i := range hostileConfigs {
		name := fmt.Sprintf("hostile-%d", i)
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile.namespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: hostile.cluster.Name}},
			Spec: clusterv1.MachineSpec{
				ClusterName: hostile.cluster.Name,
				Version:     testVersion,
				Bootstrap:   clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name}},
				// The role lists no infrastructure.test.cozystack.io kind.
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.test.cozystack.io", Kind: "TestMachine", Name: name},
			},
		}
		g.Expect(hostileClient.Create(suiteCtx, machine)).To(Succeed())
		g.Expect(hostileClient.Create(suiteCtx, &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{
			Namespace: hostile.namespace, Name: name, Labels: machine.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: machine.UID}},
		}})).To(Succeed())
	}
	among := joinOnce("victim-1")
	t.Logf("the victim's worker got its data in %s alone and in %s beside %d hostile configs: ratio %.2f",
		alone.Round(time.Millisecond), among.Round(time.Millisecond), hostileConfigs, float64(among)/float64(alone))

	g.Eventually(func(g Gomega) {
		list := &bootstrapv1.KairosConfigList{}
		g.Expect(mgmt.Client.List(suiteCtx, list, client.InNamespace(hostile.namespace))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(hostileConfigs))
		for _, cfg := range list.Items {
			cond := conditions.Get(&cfg, bootstrapv1.DataSecretAvailableCondition)
			g.Expect(cond).NotTo(BeNil(), cfg.Name)
			g.Expect(cond.Reason).To(Equal(bootstrapv1.InfrastructureKindNotSupportedReason), cfg.Name)
			g.Expect(cond.Message).To(Equal(fmt.Sprintf(`Machine %s spec.infrastructureRef: Unsupported value: "TestMachine.infrastructure.test.cozystack.io": `+
				`supported values: "KubeVirtMachine.infrastructure.cozystack.io"; a KairosConfig reads no other infrastructure kind`, cfg.Name)))
			g.Expect(cfg.Status.DataSecretName).To(BeEmpty())
		}
	}, 10*time.Minute, time.Second).Should(Succeed())
}

// hostileFileConfigs and hostileLargeConfigs are how many KairosConfigs
// of each kind the hostile tenant of TestATenantsFilesCannotStallAnother
// makes.
const (
	hostileFileConfigs  = 240
	hostileLargeConfigs = 60
)

// TestATenantsFilesCannotStallAnother: the controller reads a file's
// Secret from the API server, through the client and rate limit every
// tenant shares, and renders what it reads. The hostile tenant's
// hundreds of configs name 32 files each (the most a config may): 31
// times one Secret and then a Secret that does not exist, or 31 times a
// Secret of 512 KiB that two files already make too large. Each distinct
// Secret is read once per rendering, contents too large are refused
// before they are rendered, and a config waiting for a Secret is asked
// again with backoff; so the other tenant's worker gets its data and
// joins as fast as alone (the ratio is logged, not asserted), every
// hostile config reports why it renders nothing, and the hostile tenant's
// reads of its repeated Secrets are bounded by what the code reads per
// rendering: one read of each Secret, not 31.
func TestATenantsFilesCannotStallAnother(t *testing.T) {
	g := NewWithT(t)
	manager := startControllerAs(t, bootstrapProviderUser(t), testTokenTTL, KubeVirtKinds)
	hostile := newFixture(t, readyCluster)
	victim := newFixture(t, readyCluster)
	hostileClient := tenantClient(t, hostile.namespace)
	victimClient := tenantClient(t, victim.namespace)

	joinOnce := func(name string) time.Duration { return joinAsTenant(t, victim, victimClient, name) }
	alone := joinOnce("victim-0")

	// No cluster-name label: no watch sees these Secrets, only the
	// reconciles that read them.
	hostileSecret := func(name string, size int) {
		g.Expect(hostileClient.Create(suiteCtx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile.namespace, Name: name},
			Data:       map[string][]byte{"blob": bytes.Repeat([]byte("a"), size)},
		})).To(Succeed())
	}
	fileFrom := func(i int, secret string) bootstrapv1.File {
		return bootstrapv1.File{Path: fmt.Sprintf("/etc/hostile/%d", i), ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: secret, Key: "blob"}}}
	}
	hostileSecret("shared", 16*1024)
	hostileSecret("large", 512*1024)
	for i := range hostileFileConfigs {
		var files []bootstrapv1.File
		for j := range 31 {
			files = append(files, fileFrom(j, "shared"))
		}
		files = append(files, fileFrom(31, fmt.Sprintf("missing-%d", i)))
		hostile.kubeVirtWorkerWith(hostileClient, fmt.Sprintf("missing-%d", i), bootstrapv1.KairosConfigSpec{Files: files})
	}
	for i := range hostileLargeConfigs {
		// A Secret of the config's own first, read once per rendering
		// as the large one should be.
		own := fmt.Sprintf("own-%d", i)
		hostileSecret(own, 1024)
		files := []bootstrapv1.File{fileFrom(0, own)}
		for j := 1; j < 32; j++ {
			files = append(files, fileFrom(j, "large"))
		}
		hostile.kubeVirtWorkerWith(hostileClient, fmt.Sprintf("large-%d", i), bootstrapv1.KairosConfigSpec{Files: files})
	}
	// Right after the hostile configs are written the victim's config
	// queues behind their first reconciles; once they all report, only
	// their retries compete with it.
	among := joinOnce("victim-1")
	t.Logf("the victim's worker got its data in %s alone and in %s right after %d hostile configs: ratio %.2f",
		alone.Round(time.Millisecond), among.Round(time.Millisecond), hostileFileConfigs+hostileLargeConfigs, float64(among)/float64(alone))

	g.Eventually(func(g Gomega) {
		list := &bootstrapv1.KairosConfigList{}
		g.Expect(mgmt.Client.List(suiteCtx, list, client.InNamespace(hostile.namespace))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(hostileFileConfigs + hostileLargeConfigs))
		for _, cfg := range list.Items {
			cond := conditions.Get(&cfg, bootstrapv1.DataSecretAvailableCondition)
			g.Expect(cond).NotTo(BeNil(), cfg.Name)
			if missing, ok := strings.CutPrefix(cfg.Name, "missing-"); ok {
				g.Expect(cond.Reason).To(Equal(bootstrapv1.FileSourceNotAvailableReason), cfg.Name)
				g.Expect(cond.Message).To(Equal("spec.files[31].contentFrom.secret: Secret missing-"+missing+" not found"), cfg.Name)
			} else {
				g.Expect(cond.Reason).To(Equal(bootstrapv1.BootstrapDataTooLargeReason), cfg.Name)
				g.Expect(cond.Message).To(Equal("The bootstrap data would be at least 1049612 bytes, the size of the contents of spec.files[0] to spec.files[2], "+
					"and a Secret holds at most 1048576: shrink spec.files"), cfg.Name)
			}
			g.Expect(cfg.Status.DataSecretName).To(BeEmpty())
		}
	}, 10*time.Minute, time.Second).Should(Succeed())
	settled := joinOnce("victim-2")
	t.Logf("the victim's worker got its data in %s alone and in %s beside %d hostile configs that all report: ratio %.2f",
		alone.Round(time.Millisecond), settled.Round(time.Millisecond), hostileFileConfigs+hostileLargeConfigs, float64(settled)/float64(alone))

	// Each rendering reads a Secret once, so the Secret 31 files name is
	// read as often as the one file's Secret read after it (a reconcile
	// under way may have read the first and not yet the second).
	reads := map[string]int{}
	for _, r := range manager.requests.Requests(func(r requests.Request) bool {
		return r.Verb == "get" && r.Resource == "secrets" && r.Namespace == hostile.namespace
	}) {
		switch name := r.Name; {
		case strings.HasPrefix(name, "missing-"):
			reads["missing-*"]++
		case strings.HasPrefix(name, "own-"):
			reads["own-*"]++
		default:
			reads[name]++
		}
	}
	t.Logf("the hostile tenant's Secrets were read: %v", reads)
	const reconcilesUnderWay = 4 // startControllerWith's MaxConcurrentReconciles
	g.Expect(reads["missing-*"]).To(BeNumerically(">=", hostileFileConfigs))
	g.Expect(reads["shared"]).To(BeNumerically("<=", reads["missing-*"]+reconcilesUnderWay))
	g.Expect(reads["own-*"]).To(BeNumerically(">=", hostileLargeConfigs))
	g.Expect(reads["large"]).To(BeNumerically("<=", reads["own-*"]+reconcilesUnderWay))
}

// kubeVirtWorker is a worker of the KubeVirt provider's kind, written by
// the tenant's own client: a KubeVirtMachine without template, its Machine
// and KairosConfig.
func (f *fixture) kubeVirtWorker(c client.Client, name string) *worker {
	return f.kubeVirtWorkerWith(c, name, bootstrapv1.KairosConfigSpec{})
}

// kubeVirtWorkerWith is kubeVirtWorker with the config's spec.
func (f *fixture) kubeVirtWorkerWith(c client.Client, name string, spec bootstrapv1.KairosConfigSpec) *worker {
	vm := name + "-" + rand.String(5)
	kvm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cozystack.io/v1alpha1", "kind": "KubeVirtMachine",
		"metadata": map[string]any{"namespace": f.namespace, "name": vm},
		"spec":     map[string]any{"cpu": map[string]any{"cores": int64(1)}, "memory": "1Gi"},
	}}
	f.g.Expect(c.Create(suiteCtx, kvm)).To(Succeed())
	labels := map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName:       f.cluster.Name,
			Version:           testVersion,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: KubeVirtKinds.Machine.Group, Kind: KubeVirtKinds.Machine.Kind, Name: vm},
		},
	}
	f.g.Expect(c.Create(suiteCtx, machine)).To(Succeed())
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.namespace, Name: name, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: machine.UID}},
	}, Spec: spec}
	f.g.Expect(c.Create(suiteCtx, config)).To(Succeed())
	return &worker{machine: machine, config: config, vmName: vm}
}

// waitForDataWithin is waitForData with a longer wait: the victim of a
// stall would wait for a long time, and a busy machine is slow.
func (f *fixture) waitForDataWithin(w *worker, timeout time.Duration) {
	f.g.Eventually(func(g Gomega) {
		cfg := &bootstrapv1.KairosConfig{}
		g.Expect(mgmt.Client.Get(suiteCtx, client.ObjectKeyFromObject(w.config), cfg)).To(Succeed())
		cond := conditions.Get(cfg, bootstrapv1.DataSecretAvailableCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(bootstrapv1.DataSecretAvailableReason), "message: %s", cond.Message)
		g.Expect(cfg.Status.Initialization.DataSecretCreated).To(Equal(ptr.To(true)))
	}, timeout, 100*time.Millisecond).Should(Succeed())
}

// bootstrapProviderUser is a user bound to exactly the ClusterRole the
// bootstrap provider ships.
func bootstrapProviderUser(t *testing.T) *rest.Config {
	t.Helper()
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "config", "bootstrap", "rbac", "role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.Unmarshal(data, role)).To(Succeed())
	suffix := rand.String(6)
	role.Name = "kairos-bootstrap-" + suffix
	user := "system:serviceaccount:kairos-system:manager-" + suffix
	g.Expect(mgmt.Client.Create(suiteCtx, role)).To(Succeed())
	g.Expect(mgmt.Client.Create(suiteCtx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
	cfg, err := mgmt.AddUser(user, "system:serviceaccounts", "system:authenticated")
	g.Expect(err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = mgmt.Config.QPS, mgmt.Config.Burst
	return cfg
}

// tenantClient is a tenant's own user, who may write Machines, their
// KairosConfigs and KubeVirtMachines in its namespace and nothing else.
func tenantClient(t *testing.T, namespace string) client.Client {
	t.Helper()
	g := NewWithT(t)
	user := "tenant-" + namespace
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{"machines"}, Verbs: []string{"create", "get", "list"}},
		{APIGroups: []string{bootstrapv1.GroupVersion.Group}, Resources: []string{"kairosconfigs"}, Verbs: []string{"create", "get", "list"}},
		{APIGroups: []string{KubeVirtKinds.Machine.Group}, Resources: []string{"kubevirtmachines"}, Verbs: []string{"create", "get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	}}
	g.Expect(mgmt.Client.Create(suiteCtx, role)).To(Succeed())
	g.Expect(mgmt.Client.Create(suiteCtx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
	cfg, err := mgmt.AddUser(user, "system:authenticated")
	g.Expect(err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = 200, 400
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	// Another tenant's namespace is not this tenant's.
	g.Expect(apierrors.IsForbidden(c.List(suiteCtx, &bootstrapv1.KairosConfigList{}, client.InNamespace("default")))).To(BeTrue())
	return c
}

// joinAsTenant writes a worker as the tenant's client, waits for its
// bootstrap data, registers its Node and waits for its token's
// revocation; it returns how long the data took.
func joinAsTenant(t *testing.T, f *fixture, tenant client.Client, name string) time.Duration {
	t.Helper()
	g := NewWithT(t)
	start := time.Now()
	w := f.kubeVirtWorker(tenant, name)
	f.waitForDataWithin(w, 10*time.Minute)
	took := time.Since(start)
	tok, found := f.storedToken(w)
	g.Expect(found).To(BeTrue())
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.vmName}, Spec: corev1.NodeSpec{ProviderID: infrav1.ProviderID(w.vmName)}}
	g.Expect(workload.Client.Create(suiteCtx, node)).To(Succeed())
	t.Cleanup(func() { _ = workload.Client.Delete(suiteCtx, node) })
	g.Eventually(func() bool { _, err := workloadToken(tok.ID); return apierrors.IsNotFound(err) }, 10*time.Minute, 100*time.Millisecond).Should(BeTrue(), "the node joined")
	return took
}
