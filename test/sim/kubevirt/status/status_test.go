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

package status

import (
	"testing"

	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// KubeVirt's run strategies: which one a VM has, and whether a finished
// instance is replaced.
func TestRunStrategyAndRestarts(t *testing.T) {
	always, rerun, manual := kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyManual
	for _, tc := range []struct {
		name              string
		spec              kubevirtv1.VirtualMachineSpec
		want              kubevirtv1.VirtualMachineRunStrategy
		restartsOnFailure bool
		restartsOnSuccess bool
	}{
		{name: "runStrategy Always restarts any finished instance", spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &always}, want: always, restartsOnFailure: true, restartsOnSuccess: true},
		{name: "runStrategy RerunOnFailure restarts failed instances only", spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &rerun}, want: rerun, restartsOnFailure: true},
		{name: "runStrategy Manual restarts nothing", spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &manual}, want: manual},
		{name: "running true is Always", spec: kubevirtv1.VirtualMachineSpec{Running: ptr.To(true)}, want: always, restartsOnFailure: true, restartsOnSuccess: true},
		{name: "running false is Halted", spec: kubevirtv1.VirtualMachineSpec{Running: ptr.To(false)}, want: kubevirtv1.RunStrategyHalted},
		{name: "neither is Halted", want: kubevirtv1.RunStrategyHalted},
		{name: "runStrategy wins over running", spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &manual, Running: ptr.To(true)}, want: manual},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RunStrategy(&kubevirtv1.VirtualMachine{Spec: tc.spec})
			if got != tc.want {
				t.Fatalf("RunStrategy = %s, want %s", got, tc.want)
			}
			if r := Restarts(got, true); r != tc.restartsOnFailure {
				t.Errorf("Restarts after a failure = %t, want %t", r, tc.restartsOnFailure)
			}
			if r := Restarts(got, false); r != tc.restartsOnSuccess {
				t.Errorf("Restarts after a success = %t, want %t", r, tc.restartsOnSuccess)
			}
		})
	}
}

func TestFinished(t *testing.T) {
	for phase, want := range map[kubevirtv1.VirtualMachineInstancePhase]bool{
		kubevirtv1.Pending: false, kubevirtv1.Scheduling: false, kubevirtv1.Scheduled: false,
		kubevirtv1.Running: false, kubevirtv1.Failed: true, kubevirtv1.Succeeded: true,
	} {
		vmi := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase}}
		if got := Finished(vmi); got != want {
			t.Errorf("Finished(%s) = %t, want %t", phase, got, want)
		}
	}
}
