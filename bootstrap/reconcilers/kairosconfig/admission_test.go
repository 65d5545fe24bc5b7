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
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// TestAdmission exercises the CRD schema and the webhooks as the
// management apiserver applies them.
func TestAdmission(t *testing.T) {
	g := NewWithT(t)
	ns := "admission-" + rand.String(6)
	c := mgmt.Client
	g.Expect(c.Create(suiteCtx, newNamespace(ns))).To(Succeed())
	strict := client.FieldValidation("Strict")

	config := func(spec bootstrapv1.KairosConfigSpec) *bootstrapv1.KairosConfig {
		return &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "c-"}, Spec: spec}
	}

	// The join mode defaults to Stages and is stored (an empty spec is not
	// sent at all, and the controller reads an unset mode as Stages too).
	created := config(bootstrapv1.KairosConfigSpec{NodeLabels: map[string]string{"example.com/a": "b"}})
	g.Expect(c.Create(suiteCtx, created, strict)).To(Succeed())
	g.Expect(created.Spec.JoinMode).To(Equal(bootstrapv1.JoinModeStages))

	// The spec is immutable.
	created.Spec.NodeLabels = map[string]string{"a": "c"}
	err := c.Update(suiteCtx, created)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("immutable"))

	for name, spec := range map[string]bootstrapv1.KairosConfigSpec{
		"two SSH keys (schema)":        {SSHKeys: []string{"ssh-ed25519 AAAA a", "ssh-ed25519 AAAA b"}},
		"a private key (webhook)":      {SSHKeys: []string{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"}},
		"a reserved kubelet flag":      {KubeletExtraArgs: []bootstrapv1.Arg{{Name: "provider-id", Value: "x"}}},
		"a file over the sentinel":     {Files: []bootstrapv1.File{{Path: "/run/cluster-api/bootstrap-success.complete"}}},
		"content and contentFrom":      {Files: []bootstrapv1.File{{Path: "/etc/a", Content: "x", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "s", Key: "k"}}}}},
		"an unknown join mode":         {JoinMode: "Both"},
		"a world-readable secret file": {Files: []bootstrapv1.File{{Path: "/etc/a", Permissions: "0644", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: "s", Key: "k"}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.Create(suiteCtx, config(spec), strict)
			NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		})
	}

	// Templates are immutable, except for the ClusterClass topology
	// controller's server-side-apply dry runs.
	tmpl := &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"}}
	g.Expect(c.Create(suiteCtx, tmpl, strict)).To(Succeed())
	tmpl.Spec.Template.Spec.NodeLabels = map[string]string{"a": "b"}
	err = c.Update(suiteCtx, tmpl)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)

	dryRun := tmpl.DeepCopy()
	dryRun.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	g.Expect(c.Update(suiteCtx, dryRun, client.DryRunAll)).To(Succeed())
	g.Expect(c.Update(suiteCtx, dryRun)).NotTo(Succeed(), "the annotation alone, without dry run, must not open the template")

	bad := &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}}
	bad.Spec.Template.Spec.NodeLabels = map[string]string{"node-role.kubernetes.io/worker": ""}
	g.Expect(apierrors.IsInvalid(c.Create(suiteCtx, bad, strict))).To(BeTrue())
}
