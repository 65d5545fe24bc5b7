//go:build node

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

package node_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// TestFailingImportOnRealCDI: two pools of one Machine each whose
// template's HTTP import cannot succeed on CDI's own controller and
// importer: one names a path the image server answers 404, the other
// trusts a CA that did not sign the server's certificate. CDI's importer
// Pod fails and the kubelet restarts it; once it restarted
// --import-failure-restarts times, the provider deletes the shared import
// and creates it once more (attempt 2), and after the second failure
// leaves it for an operator. Throughout, each Machine waits for its
// template's import: its KubeVirtMachine reports ImageImportFailed with
// CDI's words (kept on the DataVolume: CDI has them only while its
// importer is down), one message however often CDI restarts the
// importer, Unknown and never False (a new Machine would wait for the
// same import), so the MachineHealthCheck, whose infrastructure failure
// timeout is short here and which may remediate the whole pool, never
// marks it unhealthy and the Machine is never replaced. No Machine
// clones a failed import; each template's SharedImportCreated Event
// occurs once per attempt.
func TestFailingImportOnRealCDI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	const namespace = "node-real-cdi-fail"

	disk := serveWorkerDisk(t, true)
	k := startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{realCDI: true, forwards: disk.forwards})
	c := k.h.Management.Client
	cdiLog := func() string { return tail(k.h.RealCDI.Process.Tail(), 40) }

	// A CA of the test's that signed nothing the server serves.
	otherCert, _, err := certutil.GenerateSelfSignedCertKey("other-ca.invalid", []net.IP{net.ParseIP(tenantHost)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherChain, err := certutil.ParseCertsPEM(otherCert)
	if err != nil || len(otherChain) < 2 {
		t.Fatalf("the other CA: %v", err)
	}
	otherCA, err := certutil.EncodeCertificates(otherChain[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	missingURL := strings.TrimSuffix(disk.url, "/worker-disk.img") + "/missing.img"
	failing := []struct {
		pool string
		edit func(*unstructured.Unstructured, map[string]any)
	}{
		{"missing", func(_ *unstructured.Unstructured, machine map[string]any) {
			machine["image"].(map[string]any)["httpImport"].(map[string]any)["url"] = missingURL
		}},
		{"untrusted", func(_ *unstructured.Unstructured, machine map[string]any) {
			machine["image"].(map[string]any)["httpImport"].(map[string]any)["caBundle"] = string(otherCA)
		}},
	}

	watcher, err := client.NewWithWatch(k.h.Config(), client.Options{Scheme: k.h.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	health := harness.WatchConditions(t, watcher, &clusterv1.MachineList{}, clusterv1.MachineHealthCheckSucceededCondition, client.InNamespace(namespace))
	ready := harness.WatchConditions(t, watcher, &infrav1.KubeVirtMachineList{}, infrav1.ReadyCondition, client.InNamespace(namespace))
	// The MachineHealthCheck would remediate an infrastructure failure
	// after this, and may remediate every Machine of a pool.
	const failedTimeout = 30 * time.Second
	vars := map[string]string{
		"WORKER_MACHINE_COUNT":                  "1",
		"INFRASTRUCTURE_FAILED_TIMEOUT_SECONDS": fmt.Sprint(int(failedTimeout.Seconds())),
		"MAX_UNHEALTHY":                         "100%",
	}
	t0 := time.Now()
	type state struct {
		p          pool
		template   *infrav1.KubeVirtMachineTemplate
		shared     string
		machine    types.UID
		attempts   map[types.UID]string
		restarts   int32
		message    string
		failedOnce time.Duration
		failed     time.Duration
	}
	states := make([]*state, 0, len(failing))
	for _, f := range failing {
		s := &state{p: k.pool(f.pool), template: &infrav1.KubeVirtMachineTemplate{}, attempts: map[types.UID]string{}}
		s.p.apply(ctx, t, vars, append(disk.imports(), f.edit)...)
		states = append(states, s)
	}
	for _, s := range states {
		if err := waitFor(ctx, 2*time.Minute, func() (bool, string) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.p.Deployment().Name + "-r1"}, s.template); err != nil {
				return false, err.Error()
			}
			return s.template.Status.Resolved != nil, "template not resolved"
		}); err != nil {
			t.Fatal(err)
		}
		s.shared = sharedimage.Name(s.template)
	}

	// The same Machine of each pool waits until both attempts failed.
	observe := func(s *state) (bool, string) {
		ms, err := k.h.PoolMachines(ctx, s.p.Pool)
		if err != nil || len(ms) != 1 {
			return false, fmt.Sprintf("pool %s: Machines %d (%v)", s.p.Name, len(ms), err)
		}
		m := ms[0]
		if s.machine == "" {
			s.machine = m.UID
		}
		if m.UID != s.machine || !m.DeletionTimestamp.IsZero() || conditions.Get(&m, clusterv1.MachineOwnerRemediatedCondition) != nil {
			t.Fatalf("pool %s: Machine %s (%s) replaced, deleted or marked for remediation while it waited for a failing import: %+v", s.p.Name, m.Name, m.UID, m.Status.Conditions)
		}
		dv := &cdiv1.DataVolume{}
		kept := ""
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.shared}, dv); err == nil {
			kept = dv.Annotations[vmspec.ImportFailureAnnotation]
			if _, seen := s.attempts[dv.UID]; !seen {
				s.attempts[dv.UID] = dv.Annotations[vmspec.ImportAttemptAnnotation]
			}
			s.restarts = max(s.restarts, dv.Status.RestartCount)
		}
		kvm := &infrav1.KubeVirtMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: m.Spec.InfrastructureRef.Name}, kvm); err != nil {
			return false, err.Error()
		}
		cond := apimeta.FindStatusCondition(kvm.Status.Conditions, infrav1.ReadyCondition)
		if cond == nil {
			return false, fmt.Sprintf("pool %s: KubeVirtMachine %s has no Ready condition", s.p.Name, kvm.Name)
		}
		prefix := func(attempt int) string {
			return fmt.Sprintf("Shared import DataVolume %s, attempt %d of %d: ", s.shared, attempt, sharedimage.Attempts)
		}
		if cond.Reason == infrav1.ImageImportFailedReason && strings.HasPrefix(cond.Message, prefix(1)) && s.failedOnce == 0 {
			s.failedOnce = time.Since(t0)
		}
		if cond.Reason != infrav1.ImageImportFailedReason || !strings.HasPrefix(cond.Message, prefix(2)) {
			return false, fmt.Sprintf("pool %s: KubeVirtMachine %s Ready %s %s: %s; shared import attempts %v, importer restarts %d",
				s.p.Name, kvm.Name, cond.Status, cond.Reason, cond.Message, s.attempts, s.restarts)
		}
		if s.failed == 0 {
			s.failed = time.Since(t0)
		}
		// CDI's words, kept on the DataVolume once seen, stay in the
		// message while CDI's importer keeps restarting.
		if kept == "" || !strings.Contains(cond.Message, ": "+kept+"; ") {
			return false, fmt.Sprintf("pool %s: KubeVirtMachine %s says %q; CDI's words kept on the shared import: %q", s.p.Name, kvm.Name, cond.Message, kept)
		}
		if s.message != "" && cond.Message != s.message {
			t.Errorf("pool %s: the failed import's message changed from %q to %q", s.p.Name, s.message, cond.Message)
		}
		s.message = cond.Message
		infra := conditions.Get(&m, clusterv1.MachineInfrastructureReadyCondition)
		return infra != nil && infra.Reason == infrav1.ImageImportFailedReason, fmt.Sprintf("pool %s: Machine %s InfrastructureReady %+v", s.p.Name, m.Name, infra)
	}
	importerPods := func() string {
		var pods []string
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{"app": "containerized-data-importer"}); err == nil {
			for i := range list.Items {
				pods = append(pods, fmt.Sprintf("%s %s %+v\n%s", list.Items[i].Name, list.Items[i].Status.Phase, list.Items[i].Status.ContainerStatuses, podLogs(k.node, &list.Items[i])))
			}
		}
		return strings.Join(pods, "\n")
	}
	if err := waitFor(ctx, 25*time.Minute, func() (bool, string) {
		var waiting []string
		for _, s := range states {
			if ok, why := observe(s); !ok {
				waiting = append(waiting, why)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "\n")
	}); err != nil {
		t.Fatalf("the failing imports were not reported as retried and failed: %v\nimporter Pods:\n%s\ncdi-controller:\n%s", err, importerPods(), cdiLog())
	}
	for _, s := range states {
		t.Logf("pool %s: attempt 1 reported failed %s after the pools were applied, attempt 2 %s; CDI's importer restarted %d times in an attempt; the machines say %q",
			s.p.Name, s.failedOnce.Round(time.Second), s.failed.Round(time.Second), s.restarts, s.message)
	}

	// Well past the health check's infrastructure failure timeout, every
	// Machine is still the first and the second attempt is not retried.
	retried := map[string]types.UID{}
	for _, s := range states {
		dv := &cdiv1.DataVolume{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.shared}, dv); err != nil {
			t.Fatal(err)
		}
		retried[s.shared] = dv.UID
	}
	until := time.Now().Add(2 * failedTimeout)
	for time.Now().Before(until) {
		for _, s := range states {
			observe(s)
			dv := &cdiv1.DataVolume{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.shared}, dv); err != nil || dv.UID != retried[s.shared] {
				t.Fatalf("pool %s: the shared import after its second failure: %v, UID %s, want it left as it is (%s)", s.p.Name, err, dv.UID, retried[s.shared])
			}
		}
		time.Sleep(time.Second)
	}

	for _, s := range states {
		if len(s.attempts) != sharedimage.Attempts {
			t.Errorf("pool %s: shared import DataVolumes seen %v (UID: attempt), want %d", s.p.Name, s.attempts, sharedimage.Attempts)
		}
		if !strings.HasSuffix(s.message, "; delete it to import again") {
			t.Errorf("pool %s: the machine's message %q does not end the attempts", s.p.Name, s.message)
		}
		// One SharedImportCreated per attempt. The events API's recorder
		// makes an Event that recurs within minutes a series of the first
		// (the note is not part of its key): the second attempt's is then
		// a count of 2 on the first's Event, which keeps attempt 1's note.
		created := 0
		var notes []string
		if err := waitFor(ctx, time.Minute, func() (bool, string) {
			events := &eventsv1.EventList{}
			if err := c.List(ctx, events, client.InNamespace(namespace)); err != nil {
				return false, err.Error()
			}
			created, notes = 0, nil
			for _, e := range events.Items {
				if e.Regarding.Kind != "KubeVirtMachineTemplate" || e.Regarding.Name != s.template.Name || e.Reason != "SharedImportCreated" {
					continue
				}
				n := int32(1)
				if e.Series != nil {
					n = e.Series.Count
				}
				created += int(n)
				notes = append(notes, fmt.Sprintf("%s (%d times)", e.Note, n))
			}
			return created >= sharedimage.Attempts, fmt.Sprintf("template %s: SharedImportCreated %d times: %q", s.template.Name, created, notes)
		}); err != nil || created != sharedimage.Attempts {
			t.Errorf("template %s: SharedImportCreated %d times, want once per attempt (%d): %q (%v)", s.template.Name, created, sharedimage.Attempts, notes, err)
		}
		t.Logf("template %s: Events %q", s.template.Name, notes)
	}
	if f := health.With(metav1.ConditionFalse); len(f) > 0 {
		t.Errorf("the MachineHealthCheck found Machines waiting for a failing import unhealthy: %q", f)
	}
	if f := ready.With(metav1.ConditionFalse); len(f) > 0 {
		t.Errorf("KubeVirtMachines waiting for their template's import read as failed: %q", f)
	}
	dvs := &cdiv1.DataVolumeList{}
	if err := c.List(ctx, dvs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, dv := range dvs.Items {
		if _, shared := dv.Labels[vmspec.SharedImageLabel]; !shared {
			t.Errorf("DataVolume %s exists: no machine may clone a failed import", dv.Name)
		}
	}
	t.Logf("the Ready states the KubeVirtMachines showed: %q; load average %s", ready.With(metav1.ConditionUnknown), loadAverage())
}
