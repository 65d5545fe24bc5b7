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

package workerclass_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"

	"github.com/cozystack/cluster-api-workers/exp/workerclass"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

// The manager's pool flags: Cozystack's Cluster names and KubeVirt when
// unset; a Cluster name without the placeholder and an unknown substrate
// are refused at start-up.
func TestWebhookFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want workerclass.WebhookOptions
		err  string
	}{
		{name: "unset: as Cozystack names the Cluster", want: workerclass.WebhookOptions{PoolClusterName: "kubernetes-{cluster}", PoolSubstrate: resolve.KubeVirt}},
		{name: "the same name, on Proxmox", args: []string{"--pool-cluster-name={cluster}", "--pool-substrate=Proxmox"},
			want: workerclass.WebhookOptions{PoolClusterName: "{cluster}", PoolSubstrate: resolve.Proxmox}},
		{name: "no placeholder", args: []string{"--pool-cluster-name=kubernetes-"},
			err: `invalid argument "kubernetes-" for "--pool-cluster-name" flag: must contain {cluster}, which stands for the pool's spec.cluster, not "kubernetes-"`},
		{name: "an unknown substrate", args: []string{"--pool-substrate=metal"},
			err: `invalid argument "metal" for "--pool-substrate" flag: must be KubeVirt or Proxmox, not "metal"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
			var o workerclass.WebhookOptions
			o.AddFlags(fs)
			err := fs.Parse(tc.args)
			if tc.err != "" {
				g.Expect(err).To(MatchError(tc.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(o).To(Equal(tc.want))
		})
	}
	g := NewWithT(t)
	g.Expect(workerclass.DefaultWebhookOptions()).To(Equal(workerclass.WebhookOptions{PoolClusterName: "kubernetes-{cluster}", PoolSubstrate: resolve.KubeVirt}))
}
