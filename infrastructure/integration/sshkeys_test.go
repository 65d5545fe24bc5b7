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

package integration

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
)

// TestWorkerClassSSHKeysAreNeverStored: through the real apiserver and
// webhooks, a template or machine whose workerClass.sshKeys holds a key
// (an armoured Ed25519 private key, a public key with the private key in
// its comment) is refused, naming the field and where a guest's key is
// set, without echoing the value; nothing is stored. That field is
// rendered nowhere: a guest's key is KairosConfig(Template) spec.sshKeys.
func TestWorkerClassSSHKeysAreNeverStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := newCluster(t)
	public, private := sshkeystest.KeyPair()
	for name, key := range map[string]string{
		"armoured": sshkeystest.EncodedPrivateKeys()["ed25519/openssh-pem"],
		"comment":  public + " " + strings.ReplaceAll(private, "\n", ""),
	} {
		g := NewWithT(t)
		tmpl := classTemplate(tc.namespace, "keys-"+name, "kairos", "v1.36", containerDiskSpec())
		tmpl.Spec.Template.Spec.WorkerClass.SSHKeys = []string{key}
		err := c.Create(ctx, tmpl)
		g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec.workerClass.sshKeys: Forbidden: nothing renders SSH keys from here")), name)
		g.Expect(err.Error()).NotTo(ContainSubstring(key[:40]))
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(tmpl), &infrav1.KubeVirtMachineTemplate{}))).To(BeTrue())

		machine := &infrav1.KubeVirtMachine{}
		machine.Namespace, machine.Name = tc.namespace, "keys-"+name
		machine.Spec = *tmpl.Spec.Template.Spec.DeepCopy()
		err = c.Create(ctx, machine)
		g.Expect(err).To(MatchError(ContainSubstring("spec.workerClass.sshKeys: Forbidden: nothing renders SSH keys from here")), name)
		g.Expect(err.Error()).NotTo(ContainSubstring(key[:40]))
	}
}
