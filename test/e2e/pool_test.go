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

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// joinTimeout covers image pulls, emulated boots and kubeadm joins.
const joinTimeout = 20 * time.Minute

var _ = Describe("A Kairos pool on KubeVirt", Ordered, func() {
	const pool = "kairos"

	It("joins: a pool of 2 gives 2 Ready Nodes and Running, NodeHealthy Machines", func() {
		applyFlavor("kairos", map[string]string{"POOL_NAME": pool}, 2)
		expectPoolJoined(pool, 2)
	})

	It("replaces a worker whose VM instance is lost", func() {
		before := poolMachines(Default, pool)
		victim := before[0]
		By("deleting the VirtualMachineInstance of " + victim.Spec.InfrastructureRef.Name)
		// KubeVirt starts a new instance on a blank container disk; the
		// provider reports the lost disk and the MachineHealthCheck's
		// unhealthyMachineConditions remediate the Machine.
		Expect(management.Delete(ctx(), &kubevirtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: victim.Spec.InfrastructureRef.Name},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			for _, m := range poolMachines(g, pool) {
				g.Expect(m.UID).NotTo(Equal(victim.UID))
			}
		}, joinTimeout, 10*time.Second).Should(Succeed())
		expectPoolJoined(pool, 2)
		Eventually(func(g Gomega) {
			n := &corev1.Node{}
			err := tenant.Get(ctx(), client.ObjectKey{Name: victim.Status.NodeRef.Name}, n)
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			g.Expect(err).To(HaveOccurred(), "the replaced Machine's Node is still there")
		}, 5*time.Minute, 10*time.Second).Should(Succeed())
	})

	It("scales a pool up from zero with the cluster autoscaler", func() {
		const burst = "burst"
		applyFlavor("scale-from-zero", map[string]string{"POOL_NAME": burst, "WORKER_MAX_COUNT": "2", "WORKER_CPU_CORES": "2", "WORKER_MEMORY": "4Gi"}, -1)
		template := &infrav1.KubeVirtMachineTemplate{}
		Eventually(func(g Gomega) {
			g.Expect(management.Get(ctx(), client.ObjectKey{Namespace: namespace, Name: clusterName + "-" + burst + "-r1"}, template)).To(Succeed())
			g.Expect(template.Status.Capacity).To(HaveKey(corev1.ResourceCPU))
			g.Expect(template.Status.NodeInfo.OperatingSystem).To(Equal("linux"))
		}, 5*time.Minute, 5*time.Second).Should(Succeed())
		Expect(poolMachines(Default, burst)).To(BeEmpty())

		By("running the cluster autoscaler in the management cluster")
		deployAutoscaler()
		By("asking the tenant for a pod only the burst pool can take")
		Expect(tenant.Create(ctx(), pendingWorkload(burst))).To(Succeed())
		expectPoolJoined(burst, 1)
		Eventually(func(g Gomega) {
			pods := &corev1.PodList{}
			g.Expect(tenant.List(ctx(), pods, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{"app": "burst"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
			g.Expect(pods.Items[0].Spec.NodeName).NotTo(BeEmpty())
		}, joinTimeout, 10*time.Second).Should(Succeed())
		for _, n := range poolNodes(Default, burst) {
			// What the template promised the autoscaler is what came.
			for name, want := range template.Status.Capacity {
				got := n.Status.Capacity[name]
				Expect(got.Cmp(want)).To(BeZero(), "Node %s has %s %s, the template advertises %s", n.Name, name, got.String(), want.String())
			}
		}
	})
})

// applyFlavor renders one of our cluster templates with clusterctl and
// applies it. workers < 0 leaves WORKER_MACHINE_COUNT to the template.
func applyFlavor(flavor string, vars map[string]string, workers int) {
	args := []string{"generate", "cluster", clusterName, "--from", filepath.Join(repoRoot, "templates", "cluster-template-"+flavor+".yaml"),
		"--target-namespace", namespace, "--kubernetes-version", cfg.kubernetesVersion, "--config", clusterctlConfig}
	if workers >= 0 {
		args = append(args, "--worker-machine-count", fmt.Sprint(workers))
	}
	env := []string{"CLUSTERCTL_DISABLE_VERSIONCHECK=true", "KUBERNETES_MINOR=" + minor(cfg.kubernetesVersion)}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	manifest := run(repoRoot, env, clusterctlBin, args...)
	path := filepath.Join(cfg.workDir, flavor+".yaml")
	Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
	kubectl(managementKubeconfig, "apply", "-f", path)
}

func poolMachines(g Gomega, pool string) []clusterv1.Machine {
	list := &clusterv1.MachineList{}
	g.Expect(management.List(ctx(), list, client.InNamespace(namespace), client.MatchingLabels{"node.cozystack.io/pool": pool})).To(Succeed())
	return list.Items
}

func poolNodes(g Gomega, pool string) []corev1.Node {
	list := &corev1.NodeList{}
	g.Expect(tenant.List(ctx(), list, client.MatchingLabels{"node.cozystack.io/pool": pool})).To(Succeed())
	return list.Items
}

// expectPoolJoined waits for n Running, NodeHealthy Machines in the pool
// and their Ready Nodes, named and identified after their VMs.
func expectPoolJoined(pool string, n int) {
	Eventually(func(g Gomega) {
		ms := poolMachines(g, pool)
		g.Expect(ms).To(HaveLen(n))
		for _, m := range ms {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
			g.Expect(conditions.IsTrue(&m, clusterv1.MachineNodeHealthyCondition)).To(BeTrue(), "Machine %s", m.Name)
			g.Expect(m.Status.NodeRef.Name).To(Equal(m.Spec.InfrastructureRef.Name))
			g.Expect(m.Spec.ProviderID).To(Equal("kubevirt://" + m.Spec.InfrastructureRef.Name))
		}
		nodes := poolNodes(g, pool)
		g.Expect(nodes).To(HaveLen(n))
		for _, node := range nodes {
			g.Expect(harness.NodeReady(node)).To(BeTrue(), "Node %s", node.Name)
		}
	}, joinTimeout, 10*time.Second).Should(Succeed())
}

// pendingWorkload is a pod that fits only a node of the pool: the tenant's
// only other node is its tainted control plane.
func pendingWorkload(pool string) *appsv1.Deployment {
	labels := map[string]string{"app": "burst"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "burst"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"node.cozystack.io/pool": pool},
					Containers: []corev1.Container{{
						Name: "pause", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
					}},
				},
			},
		},
	}
}

// deployAutoscaler runs the cluster autoscaler's Cluster API provider in the
// management cluster: Cluster API objects through its service account, the
// tenant through the Cluster's kubeconfig Secret.
func deployAutoscaler() {
	manifest := strings.NewReplacer("${IMAGE}", cfg.autoscalerImage, "${NAMESPACE}", namespace, "${CLUSTER}", clusterName).Replace(autoscalerManifest)
	path := filepath.Join(cfg.workDir, "autoscaler.yaml")
	Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
	kubectl(managementKubeconfig, "apply", "-f", path)
	kubectl(managementKubeconfig, "-n", namespace, "rollout", "status", "deployment/cluster-autoscaler", "--timeout", "10m")
}

const autoscalerManifest = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: cluster-autoscaler
  namespace: ${NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-cluster-autoscaler
rules:
- apiGroups: [cluster.x-k8s.io]
  resources: [machinedeployments, machinedeployments/scale, machinesets, machinesets/scale, machines, machinepools, machinepools/scale]
  verbs: [get, list, watch, update, patch]
- apiGroups: [infrastructure.cozystack.io]
  resources: [kubevirtmachinetemplates]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces, configmaps]
  verbs: [get, list, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-cluster-autoscaler
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: e2e-cluster-autoscaler
subjects:
- kind: ServiceAccount
  name: cluster-autoscaler
  namespace: ${NAMESPACE}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cluster-autoscaler
  namespace: ${NAMESPACE}
spec:
  replicas: 1
  selector:
    matchLabels: {app: cluster-autoscaler}
  template:
    metadata:
      labels: {app: cluster-autoscaler}
    spec:
      serviceAccountName: cluster-autoscaler
      containers:
      - name: cluster-autoscaler
        image: ${IMAGE}
        command:
        - /cluster-autoscaler
        args:
        - --cloud-provider=clusterapi
        - --kubeconfig=/etc/kubernetes/tenant/value
        - --clusterapi-cloud-config-authoritative
        - --node-group-auto-discovery=clusterapi:namespace=${NAMESPACE},clusterName=${CLUSTER}
        - --scale-down-enabled=false
        - --v=4
        volumeMounts:
        - name: tenant-kubeconfig
          mountPath: /etc/kubernetes/tenant
          readOnly: true
      volumes:
      - name: tenant-kubeconfig
        secret:
          secretName: ${CLUSTER}-kubeconfig
`
