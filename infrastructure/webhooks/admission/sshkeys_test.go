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

package admission

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
)

// TestWorkerClassSSHKeysAreRefused: workerClass.sshKeys of a machine or a
// template is rendered nowhere, so nothing in it is stored, a private key
// least of all (an armoured Ed25519 key, a public key whose comment carries
// the private key, a valid public key alike); the error names the field
// and where a guest's key is set, and never echoes the value. An empty
// list, as the pool interface writes for Talos, is accepted.
func TestWorkerClassSSHKeysAreRefused(t *testing.T) {
	public, private := sshkeystest.KeyPair()
	armoured := sshkeystest.EncodedPrivateKeys()["ed25519/openssh-pem"]
	inComment := public + " " + strings.ReplaceAll(private, "\n", "")
	withKeys := func(keys []string) func(*infrav1.KubeVirtMachineTemplate) {
		return func(t *infrav1.KubeVirtMachineTemplate) {
			t.Labels = map[string]string{infrav1.WorkerClassLabel: t.Spec.Template.Spec.WorkerClass.Name}
			t.Spec.Template.Spec.WorkerClass.SSHKeys = keys
		}
	}
	ctx := withRequest(false)
	for name, keys := range map[string][]string{
		"an armoured Ed25519 private key":                  {armoured},
		"a public key with the private key in its comment": {inComment},
		"a valid public key":                               {public},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl := template(classBased, withKeys(keys))
			_, err := (&KubeVirtMachineTemplate{Instancetypes: instancetypeReader(t)}).ValidateCreate(ctx, tmpl)
			g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec.workerClass.sshKeys: Forbidden: " + SSHKeysElsewhere)))
			g.Expect(err.Error()).NotTo(ContainSubstring(keys[0][:40]), "the value is never echoed")
			g.Expect(err.Error()).NotTo(ContainSubstring("PRIVATE KEY"))

			machine := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Name: "worker-0", Namespace: "ns"}, Spec: *tmpl.Spec.Template.Spec.DeepCopy()}
			_, err = (&KubeVirtMachine{Instancetypes: instancetypeReader(t)}).ValidateCreate(ctx, machine)
			g.Expect(err).To(MatchError(ContainSubstring("spec.workerClass.sshKeys: Forbidden: " + SSHKeysElsewhere)))
			g.Expect(err.Error()).NotTo(ContainSubstring(keys[0][:40]))
		})
	}
	t.Run("an empty list is accepted", func(t *testing.T) {
		_, err := (&KubeVirtMachineTemplate{Instancetypes: instancetypeReader(t)}).ValidateCreate(ctx, template(classBased, withKeys([]string{})))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
	})
}
