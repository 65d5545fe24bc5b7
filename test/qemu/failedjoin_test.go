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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/test/process"
)

// brokenStartupTimeout is the pool's MachineHealthCheck nodeStartupTimeout
// for the moment it judges the broken Machines: set only once both guests
// have shown kubeadm's error (at least 1m19s after QEMU started;
// docs/real-guests.md#timings), when it has passed for both, so the
// MachineHealthCheck flags both in one pass. Everything else in the
// scenario is judged by replacementStartupTimeout, the template's default:
// a replacement slowed by a loaded host must never meet the short one.
const (
	brokenStartupTimeout      = 30 * time.Second
	replacementStartupTimeout = 15 * time.Minute
)

// What the rendered join configuration carries, and what the runner's
// tamper hook rewrites in it.
var (
	caPinPattern = regexp.MustCompile(`"sha256:[0-9a-f]{64}"`)
	tokenPattern = regexp.MustCompile(`"token": "[a-z0-9]{6}\.[a-z0-9]{16}"`)
)

// brokenJoin is how one guest's bootstrap data is tampered with, and the
// error kubeadm reports for it.
type brokenJoin struct {
	kind    string
	rewrite func([]byte) ([]byte, bool)
	// kubeadmError is what the guest's journal shows.
	kubeadmError string
}

// TestFailedJoinIsReplaced: the first two guests of a 2-machine pool boot
// with broken bootstrap data, rewritten by the runner's tamper hook as it
// writes their seeds: one pins a CA that did not sign the workload
// apiserver, the other carries a join token that expired (the token
// cleaner deleted it, so cluster-info has no signature for it). Each
// guest's kubeadm join fails at discovery with kubeadm's error in its
// journal, and no Node registers for its Machine. The MachineHealthCheck's
// nodeStartupTimeout, shortened for that moment only, remediates both
// Machines; their replacements boot untampered data and join, judged by
// the template's default startup timeout from their creation on.
func TestFailedJoinIsReplaced(t *testing.T) {
	timings.scenario(t)
	g := NewWithT(t)
	p := newPool("broken")
	onlyPool(t, p)

	expired := expiredToken(t)
	pin := otherCAPin(t)
	broken := []brokenJoin{
		{
			kind:         "wrong CA pin",
			rewrite:      replaceFirst(caPinPattern, `"`+pin+`"`),
			kubeadmError: "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys",
		},
		{
			kind:         "expired token",
			rewrite:      replaceFirst(tokenPattern, fmt.Sprintf("%q: %q", "token", expired)),
			kubeadmError: fmt.Sprintf("could not find a JWS signature in the cluster-info ConfigMap for token ID %q", strings.Split(expired, ".")[0]),
		},
	}
	tampered := tamperFirstGuests(t, p, broken)
	history := watchMachines(t, p)

	p.apply(t, map[string]string{
		"WORKER_MACHINE_COUNT":         "2",
		"MAX_UNHEALTHY":                "100%",
		"NODE_STARTUP_TIMEOUT_SECONDS": fmt.Sprint(int(replacementStartupTimeout.Seconds())),
	}, shortDiscovery)
	t.Cleanup(func() { p.remove(t) })

	// Both broken joins fail visibly in the guests, and their Machines have
	// no Node. The tamper hook runs before QEMU starts, so a tampered VM
	// has a guest only once the runner has started it.
	var brokenMachines []clusterv1.Machine
	g.Eventually(func(g Gomega) {
		guests := tampered.guests()
		g.Expect(guests).To(HaveLen(len(broken)))
		for vm := range guests {
			guestOf(g, vm)
		}
	}, joinTimeout, poll).Should(Succeed(), func() string { return describe(p) })
	for vm, b := range tampered.guests() {
		g.Expect(tampered.changed(vm)).To(BeTrue(), "the %s tamper found nothing to rewrite in the data of %s", b.kind, vm.Name)
		guest := guestOf(g, vm)
		g.Eventually(func() string { return process.Tail(guest.JournalLog, 64<<10) }, joinTimeout, poll).
			Should(ContainSubstring(b.kubeadmError), func() string { return describe(p) })
		failedAfter := time.Since(guest.Started)
		t.Logf("timing: guest %s (%s) reported kubeadm's error %s after QEMU started", vm.Name, b.kind, failedAfter.Round(time.Second))
		timings.addFailure(fmt.Sprintf("%s: kubeadm's error in the journal %s after QEMU started", b.kind, failedAfter.Round(time.Second)))

		m := machineOfVM(g, p, vm.Name)
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeFalse(), "Machine %s has a Node", m.Name)
		g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Name: vm.Name}, &corev1.Node{})).
			To(Satisfy(apierrors.IsNotFound), "a Node %s registered", vm.Name)
		brokenMachines = append(brokenMachines, m)
	}

	// The MachineHealthCheck remediates both once their startup timeout,
	// now short, has passed; it flags both in one pass, and the MachineSet
	// deletes them and creates their replacements.
	setStartupTimeout(g, p, brokenStartupTimeout)
	g.Eventually(func(g Gomega) {
		for _, m := range brokenMachines {
			g.Expect(history.Reasons(m.UID, metav1.ConditionFalse)).To(ContainElement(clusterv1.MachineHealthCheckNodeStartupTimeoutReason),
				"Machine %s was not remediated for its node startup timeout", m.Name)
			current := &clusterv1.Machine{}
			err := h.Client.Get(suiteCtx, client.ObjectKeyFromObject(&m), current)
			if err == nil && current.UID == m.UID {
				g.Expect(current.DeletionTimestamp.IsZero()).To(BeFalse(), "Machine %s is not being deleted yet", m.Name)
			} else if err != nil {
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "reading Machine %s: %v", m.Name, err)
			}
		}
	}, joinTimeout, poll).Should(Succeed(), func() string { return describe(p) })
	// From here on the replacements, created moments ago, are judged by
	// the long timeout: the short one only had to catch the broken
	// Machines.
	setStartupTimeout(g, p, replacementStartupTimeout)
	g.Eventually(func(g Gomega) {
		current := map[types.UID]bool{}
		for _, m := range p.machines(g) {
			current[m.UID] = true
		}
		for _, m := range brokenMachines {
			g.Expect(current).NotTo(HaveKey(m.UID), "Machine %s is not replaced yet", m.Name)
		}
	}, joinTimeout, poll).Should(Succeed(), func() string { return describe(p) })

	// Their replacements boot the data unchanged and join.
	ms := p.expectJoined(t, 2)
	for _, m := range ms {
		g.Expect(tampered.guests()).NotTo(HaveKey(vmKey(m)), "Machine %s is a tampered one", m.Name)
	}
	recordJoins(t, "failed join, replacement", ms)
	g.Eventually(func(g Gomega) { g.Expect(p.joinTokens(g)).To(BeEmpty()) }, time.Minute, poll).Should(Succeed())
}

// setStartupTimeout sets the pool's MachineHealthCheck nodeStartupTimeout.
func setStartupTimeout(g Gomega, p pool, timeout time.Duration) {
	mhc := &clusterv1.MachineHealthCheck{}
	g.Expect(h.Client.Get(suiteCtx, p.Deployment(), mhc)).To(Succeed())
	patch := client.MergeFrom(mhc.DeepCopy())
	mhc.Spec.Checks.NodeStartupTimeoutSeconds = ptr.To(int32(timeout.Seconds()))
	g.Expect(h.Client.Patch(suiteCtx, mhc, patch)).To(Succeed())
}

// shortDiscovery bounds kubeadm's discovery at 20 s (5 minutes by
// default), which is how long a guest with an unsigned token waits before
// it reports the missing signature.
func shortDiscovery(o *unstructured.Unstructured) {
	if o.GetKind() == "KairosConfigTemplate" {
		templateSpecOf(o)["joinTimeouts"] = map[string]any{"discoverySeconds": int64(20)}
	}
}

func machineOfVM(g Gomega, p pool, vm string) clusterv1.Machine {
	for _, m := range p.machines(g) {
		if m.Spec.InfrastructureRef.Name == vm {
			return m
		}
	}
	g.Expect(vm).To(BeEmpty(), "no Machine of pool %s has the VM", p.Name)
	return clusterv1.Machine{}
}

// tamperings are the guests the tamper hook broke.
type tamperings struct {
	mu     sync.Mutex
	broken map[client.ObjectKey]brokenJoin
	hit    map[client.ObjectKey]bool
}

func (tp *tamperings) guests() map[client.ObjectKey]brokenJoin {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := map[client.ObjectKey]brokenJoin{}
	for k, v := range tp.broken {
		out[k] = v
	}
	return out
}

func (tp *tamperings) changed(vm client.ObjectKey) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.hit[vm]
}

// tamperFirstGuests breaks the bootstrap data of the pool's first guests,
// one way each, in start order; later guests (the replacements) boot the
// data unchanged.
func tamperFirstGuests(t *testing.T, p pool, ways []brokenJoin) *tamperings {
	t.Helper()
	tp := &tamperings{broken: map[client.ObjectKey]brokenJoin{}, hit: map[client.ObjectKey]bool{}}
	runner.Tamper(func(vm client.ObjectKey, userData []byte) []byte {
		if vm.Namespace != p.Deployment().Namespace || !strings.HasPrefix(vm.Name, p.Deployment().Name+"-") {
			return userData
		}
		tp.mu.Lock()
		defer tp.mu.Unlock()
		b, seen := tp.broken[vm]
		if !seen {
			if len(tp.broken) == len(ways) {
				return userData
			}
			b = ways[len(tp.broken)]
			tp.broken[vm] = b
		}
		out, ok := b.rewrite(userData)
		tp.hit[vm] = tp.hit[vm] || ok
		return out
	})
	t.Cleanup(func() { runner.Tamper(nil) })
	return tp
}

func replaceFirst(re *regexp.Regexp, with string) func([]byte) ([]byte, bool) {
	return func(data []byte) ([]byte, bool) {
		loc := re.FindIndex(data)
		if loc == nil {
			return data, false
		}
		out := append(append(append([]byte(nil), data[:loc[0]]...), with...), data[loc[1]:]...)
		return out, true
	}
}

// otherCAPin is the pin (sha256 of the public key) of a CA that did not
// sign the workload apiserver.
func otherCAPin(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// expiredToken makes a join token in the workload cluster whose expiration
// has passed, and waits until the token cleaner deleted it and the
// bootstrap signer dropped its cluster-info signature: the state a guest
// that boots too late finds.
func expiredToken(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	token, err := bootstraputil.GenerateBootstrapToken()
	g.Expect(err).NotTo(HaveOccurred())
	id, secret, _ := strings.Cut(token, ".")
	name := bootstrapapi.BootstrapTokenSecretPrefix + id
	g.Expect(workload.API.Client.Create(suiteCtx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               id,
			bootstrapapi.BootstrapTokenSecretKey:           secret,
			bootstrapapi.BootstrapTokenExpirationKey:       time.Now().Add(-time.Minute).UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      "system:bootstrappers:kubeadm:default-node-token",
			bootstrapapi.BootstrapTokenDescriptionKey:      "An expired join token of the failed-join scenario",
		},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := workload.API.Client.Get(suiteCtx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: name}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the token cleaner has not deleted the expired token (%v)", err)
		cm := &corev1.ConfigMap{}
		g.Expect(workload.API.Client.Get(suiteCtx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm)).To(Succeed())
		g.Expect(cm.Data).NotTo(HaveKey(bootstrapapi.JWSSignatureKeyPrefix + id))
	}, time.Minute, poll).Should(Succeed())
	return token
}
