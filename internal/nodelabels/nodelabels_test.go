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

package nodelabels

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestValidate: the kubelet's --node-labels rule, applied to every label
// a worker registers with, whatever wrote it.
func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name   string
		labels map[string]string
		// wantInvalid are the keys refused.
		wantInvalid []string
	}{
		{name: "no labels"},
		{name: "unprefixed and other domains", labels: map[string]string{"pool": "gpu", "example.com/team": "a", "cluster-api/accelerator": "A10"}},
		{name: "labels a kubelet sets on itself", labels: map[string]string{
			"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": "w1",
			"topology.kubernetes.io/zone": "a", "topology.kubernetes.io/region": "r",
			"node.kubernetes.io/instance-type": "u1.large", "beta.kubernetes.io/instance-type": "u1.large",
			"kubelet.kubernetes.io/x": "y", "example.node.kubernetes.io/x": "y",
		}},
		{name: "a role", labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}, wantInvalid: []string{"node-role.kubernetes.io/control-plane"}},
		{name: "NodeRestriction's own namespace", labels: map[string]string{"node-restriction.kubernetes.io/reserved": "infra"}, wantInvalid: []string{"node-restriction.kubernetes.io/reserved"}},
		{name: "k8s.io and its subdomains", labels: map[string]string{"k8s.io/x": "y", "x.k8s.io/y": "z"}, wantInvalid: []string{"k8s.io/x", "x.k8s.io/y"}},
		{name: "a lookalike domain is not restricted", labels: map[string]string{"notkubernetes.io/x": "y"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := Validate(tt.labels, field.NewPath("spec", "nodeLabels"))
			var invalid []string
			for _, e := range errs {
				g.Expect(e.Type).To(Equal(field.ErrorTypeInvalid))
				invalid = append(invalid, e.BadValue.(string))
			}
			g.Expect(invalid).To(ConsistOf(tt.wantInvalid))
			for _, key := range tt.wantInvalid {
				g.Expect(errs.ToAggregate().Error()).To(ContainSubstring("spec.nodeLabels[" + key + "]"))
			}
		})
	}
	g := NewWithT(t)
	errs := Validate(map[string]string{"pool": "not a value"}, field.NewPath("spec", "nodeLabels"))
	g.Expect(errs).To(HaveLen(1), "syntax is checked too")
	g.Expect(errs[0].Field).To(Equal("spec.nodeLabels"))
}
