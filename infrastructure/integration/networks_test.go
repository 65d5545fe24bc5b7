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
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// TestNetworksOfAnotherNamespaceAreRefused: two tenants with their own
// namespaces and users, each with a Multus network. A tenant may attach its
// machines to its own namespace's network, by its bare or its qualified
// name, and is refused the other tenant's, on the field that names it.
func TestNetworksOfAnotherNamespaceAreRefused(t *testing.T) {
	ensureClusterRoles(t)
	alice, mallory := newCluster(t), newCluster(t)
	malloryName := "mallory-" + rand.String(5)
	bind(t, mallory.namespace, tenantRole, user(malloryName))
	asMallory := tenantClient(t, malloryName)
	multusNetwork(t, alice.namespace, "storage")
	multusNetwork(t, mallory.namespace, "storage")
	ctx := context.Background()

	attached := func(networkName string) infrav1.KubeVirtMachineSpec {
		spec := containerDiskSpec()
		spec.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}}, {Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: networkName}}}
		return spec
	}
	forbidden := alice.namespace + "/storage is a NetworkAttachmentDefinition of namespace " + alice.namespace +
		"; a machine of namespace " + mallory.namespace + " attaches only its own namespace's networks"

	t.Run("the tenant's own network, by either name", func(t *testing.T) {
		g := NewWithT(t)
		for _, name := range []string{"storage", mallory.namespace + "/storage"} {
			g.Expect(asMallory.Create(ctx, classlessTemplate(mallory.namespace, "own-"+rand.String(4), attached(name)))).To(Succeed())
			kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "own-" + rand.String(4)}, Spec: attached(name)}
			g.Expect(asMallory.Create(ctx, kvm, client.DryRunAll)).To(Succeed())
		}
	})

	t.Run("another tenant's network is refused in a template", func(t *testing.T) {
		g := NewWithT(t)
		err := asMallory.Create(ctx, classlessTemplate(mallory.namespace, "theirs-"+rand.String(4), attached(alice.namespace+"/storage")))
		expectRefused(g, err, "spec.template.spec.networks[1].multus.networkName", forbidden)
	})

	t.Run("another tenant's network is refused in a machine", func(t *testing.T) {
		g := NewWithT(t)
		kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: mallory.namespace, Name: "theirs-" + rand.String(4)}, Spec: attached(alice.namespace + "/storage")}
		expectRefused(g, asMallory.Create(ctx, kvm), "spec.networks[1].multus.networkName", forbidden)
	})
}
