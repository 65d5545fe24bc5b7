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

package cdi

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// steppedImporter hands each run's result to the test: Populate tells the
// test it started, then returns what the test sends.
type steppedImporter struct {
	started chan struct{}
	results chan error
}

func (s steppedImporter) Populate(ctx context.Context, _ Job) error {
	s.started <- struct{}{}
	select {
	case err := <-s.results:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

type discardLog struct{}

func (discardLog) Info(string, ...any) {}

// TestFailedImporterIsReportedAsCDIReportsIt: a failed importer's words are
// on the DataVolume's Running condition only while its container is down
// in the kubelet's back-off; the restart is counted when the container runs
// again, and then the condition is True with no words, as cdi-controller
// v1.65 copies a terminated container's message and clears it for a
// running one. The stand-in reported the words while its restarted importer
// ran, which real CDI never does, and counted the restart at the failure.
func TestFailedImporterIsReportedAsCDIReportsIt(t *testing.T) {
	g := NewWithT(t)
	imp := steppedImporter{started: make(chan struct{}), results: make(chan error)}
	backOff := 10 * time.Second
	c := New(Options{Importer: imp, ImporterBackOff: backOff})
	// The back-off is the test's to end: it records each wait asked for.
	waits, backOffEnds := make(chan time.Duration, 1), make(chan time.Time)
	c.after = func(d time.Duration) <-chan time.Time {
		waits <- d
		return backOffEnds
	}
	defer close(c.stopped)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := &job{dv: types.NamespacedName{Namespace: "ns", Name: "root"}, pod: types.NamespacedName{Namespace: "ns", Name: "importer-root"}, done: make(chan struct{})}
	go c.run(ctx, discardLog{}, j)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "importer-root"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "importer", Image: importerImage}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	// observe reports the Pod and DataVolume as the stand-in writes them.
	observe := func() (corev1.ContainerStatus, cdiv1.DataVolumeStatus) {
		c.mu.Lock()
		snap := &job{written: j.written, total: j.total, restarts: j.restarts, lastError: j.lastError, down: j.down, success: j.success}
		c.mu.Unlock()
		p := pod.DeepCopy()
		workerStatus(p, snap.success, snap.down, snap.restarts, snap.lastError)
		st := cdiv1.DataVolumeStatus{}
		progressStatus(&st, "root", kindImport, p, snap)
		return p.Status.ContainerStatuses[0], st
	}
	running := func(st cdiv1.DataVolumeStatus) *cdiv1.DataVolumeCondition {
		for i := range st.Conditions {
			if st.Conditions[i].Type == cdiv1.DataVolumeRunning {
				return &st.Conditions[i]
			}
		}
		return nil
	}

	// Seven failures: the back-off doubles from 10 s and stops at 5 min.
	const failures = 7
	for restart := range int32(failures) {
		<-imp.started
		cs, st := observe()
		g.Expect(cs.State.Running).NotTo(BeNil(), "run %d", restart)
		g.Expect(cs.RestartCount).To(Equal(restart))
		g.Expect(st.RestartCount).To(Equal(restart))
		g.Expect(running(st).Status).To(Equal(corev1.ConditionTrue), "the restarted importer runs: no words")
		g.Expect(running(st).Message).To(BeEmpty())

		imp.results <- errors.New(ImportFailureMessage)
		g.Expect(<-waits).To(Equal(min(backOff<<restart, MaxImporterBackOff)), "each restart waits twice as long, up to the kubelet's cap")
		func() {
			cs, st := observe()
			g.Expect(cs.State.Waiting).NotTo(BeNil())
			g.Expect(cs.State.Waiting.Reason).To(Equal("CrashLoopBackOff"))
			g.Expect(cs.LastTerminationState.Terminated.Message).To(Equal(ImportFailureMessage))
			g.Expect(cs.RestartCount).To(Equal(restart), "counted when the container runs again")
			g.Expect(st.RestartCount).To(Equal(restart))
			g.Expect(st.Phase).To(Equal(cdiv1.ImportInProgress))
			g.Expect(running(st).Status).To(Equal(corev1.ConditionFalse))
			g.Expect(running(st).Reason).To(Equal("Error"))
			g.Expect(running(st).Message).To(Equal(ImportFailureMessage))
		}()
		backOffEnds <- time.Now()
	}
	<-imp.started
	imp.results <- nil
	<-j.done
	cs, st := observe()
	g.Expect(cs.State.Terminated).NotTo(BeNil())
	g.Expect(st.Phase).To(Equal(cdiv1.Succeeded))
	g.Expect(st.RestartCount).To(Equal(int32(failures)))
}
