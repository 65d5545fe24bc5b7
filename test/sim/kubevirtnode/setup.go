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

package kubevirtnode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// kubevirtNamespace is where KubeVirt runs, and virt-handler with it.
const kubevirtNamespace = "kubevirt"

// handlerServiceAccount is virt-handler's service account.
const handlerServiceAccount = "kubevirt-handler"

// KubeletVersion is what the infrastructure nodes' kubelets report.
const KubeletVersion = "v1.36.3"

// SetupWithManager registers the nodes with their virt-handler Pods and
// runs the scheduler, the kubelets and virt-handler. KubeVirt must be
// installed (its namespace and virt-handler's service account exist).
func (h *Hosts) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	h.client = mgr.GetClient()
	admin := h.opts.Admin
	if admin == nil {
		admin = mgr.GetConfig()
	}
	if err := h.registerNodes(ctx, admin, mgr); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podNodeNameField, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return err
	}
	opts := controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}
	name := func(n string) string { return h.opts.ControllerNamePrefix + n }
	pending := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName == "" && (p.Spec.SchedulerName == "" || p.Spec.SchedulerName == corev1.DefaultSchedulerName)
	})
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-scheduler")).
		For(&corev1.Pod{}, builder.WithPredicates(pending)).
		WithOptions(opts).
		Complete(reconcile.Func(h.reconcilePending)); err != nil {
		return fmt.Errorf("setting up the scheduler stand-in: %w", err)
	}
	launchers := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Labels[kubevirtv1.AppLabel] == "virt-launcher" && h.ownsNode(p.Spec.NodeName)
	})
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-kubelet")).
		For(&corev1.Pod{}, builder.WithPredicates(launchers)).
		WatchesRawSource(source.Channel(h.podEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(reconcile.Func(h.reconcileLauncherPod)); err != nil {
		return fmt.Errorf("setting up the kubelet stand-in: %w", err)
	}
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		vmi, ok := o.(*kubevirtv1.VirtualMachineInstance)
		return ok && h.ownsNode(vmi.Status.NodeName)
	})
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-virt-handler")).
		For(&kubevirtv1.VirtualMachineInstance{}, builder.WithPredicates(onNode)).
		WatchesRawSource(source.Channel(h.instanceEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(reconcile.Func(h.reconcileInstance)); err != nil {
		return fmt.Errorf("setting up the virt-handler stand-in: %w", err)
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		defer h.stop()
		ticker := time.NewTicker(h.opts.HeartbeatInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
				for _, n := range h.opts.Nodes {
					if err := h.heartbeat(ctx, n.Name); err != nil {
						ctrl.LoggerFrom(ctx).Info("virt-handler stand-in could not refresh its heartbeat", "node", n.Name, "reason", err.Error())
					}
				}
			}
		}
	}))
}

// stop kills every guest, as the hosts going away would.
func (h *Hosts) stop() {
	close(h.stopped)
	h.mu.Lock()
	guests := make([]*guest, 0, len(h.guests))
	for _, g := range h.guests {
		guests = append(guests, g)
	}
	h.mu.Unlock()
	for _, g := range guests {
		g.guest.Kill("the hosts stopped")
	}
}

func (h *Hosts) ownsNode(name string) bool {
	for _, n := range h.opts.Nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// registerNodes registers every node as its kubelet does, starts its
// virt-handler Pod, and has virt-handler label it and beat.
func (h *Hosts) registerNodes(ctx context.Context, admin *rest.Config, mgr ctrl.Manager) error {
	c, err := client.New(admin, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	for i, n := range h.opts.Nodes {
		if err := registerNode(ctx, c, n, i); err != nil {
			return err
		}
		pod, err := startHandlerPod(ctx, c, n.Name)
		if err != nil {
			return err
		}
		token, err := cs.CoreV1().ServiceAccounts(kubevirtNamespace).CreateToken(ctx, handlerServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To[int64](7 * 24 * 3600),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting virt-handler's token on node %s: %w", n.Name, err)
		}
		cfg := rest.AnonymousClientConfig(admin)
		cfg.BearerToken = token.Status.Token
		hc, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return err
		}
		h.handlers[n.Name] = hc
		if err := h.heartbeat(ctx, n.Name); err != nil {
			return fmt.Errorf("virt-handler's first heartbeat on node %s: %w", n.Name, err)
		}
	}
	return nil
}

// registerNode creates the Node with what its kubelet reports, Ready.
func registerNode(ctx context.Context, c client.Client, n InfraNode, index int) error {
	labels := map[string]string{
		corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	}
	maps.Copy(labels, n.Labels)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels,
		// What a kubelet and the node controller annotate every node with
		// (KubeVirt's node restriction policy expects annotations).
		Annotations: map[string]string{
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			"node.alpha.kubernetes.io/ttl":                           "0",
		}}}
	if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", n.Name, err)
	} else if err != nil {
		if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
			return err
		}
	}
	allocatable := DefaultAllocatable()
	maps.Copy(allocatable, n.Allocatable)
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Capacity:    allocatable,
		Allocatable: allocatable,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.100.%d", 10+index)},
			{Type: corev1.NodeHostName, Address: n.Name},
		},
		NodeInfo: corev1.NodeSystemInfo{
			Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: KubeletVersion,
			ContainerRuntimeVersion: "containerd://2.1.4", OSImage: "Simulated infrastructure node",
		},
	}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("reporting node %s ready: %w", n.Name, err)
	}
	// The apiserver taints a new node not-ready; the node lifecycle
	// controller lifts the taint once the kubelet reports Ready.
	untainted := node.DeepCopy()
	untainted.Spec.Taints = append([]corev1.Taint(nil), n.Taints...)
	for _, t := range node.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady && !slices.ContainsFunc(n.Taints, func(o corev1.Taint) bool { return o.MatchTaint(&t) }) {
			untainted.Spec.Taints = append(untainted.Spec.Taints, t)
		}
	}
	if err := c.Patch(ctx, untainted, client.MergeFrom(node)); err != nil {
		return fmt.Errorf("lifting the not-ready taint of node %s: %w", n.Name, err)
	}
	return nil
}

// startHandlerPod creates virt-handler's Pod on the node, Running, as its
// DaemonSet and the kubelet would.
func startHandlerPod(ctx context.Context, c client.Client, node string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubevirtNamespace, Name: "virt-handler-" + node, Labels: map[string]string{kubevirtv1.AppLabel: "virt-handler"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: handlerServiceAccount,
			Containers:         []corev1.Container{{Name: "virt-handler", Image: "quay.io/kubevirt/virt-handler:v1.7.0"}},
		},
	}
	if err := c.Create(ctx, pod); apierrors.IsAlreadyExists(err) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return nil, err
		}
		return pod, nil
	} else if err != nil {
		return nil, fmt.Errorf("creating virt-handler's Pod on node %s: %w", node, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "virt-handler", Image: pod.Spec.Containers[0].Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("reporting virt-handler's Pod on node %s running: %w", node, err)
	}
	return pod, nil
}

// heartbeat is what virt-handler writes on its node every minute: the
// heartbeat time and the labels that make the node schedulable for VMs
// (virt-controller marks a node whose heartbeat is older than five minutes
// unresponsive and fails its instances).
func (h *Hosts) heartbeat(ctx context.Context, node string) error {
	patch := map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{kubevirtv1.VirtHandlerHeartbeat: time.Now().UTC().Format(time.RFC3339)},
		"labels": map[string]string{
			kubevirtv1.NodeSchedulable: "true",
			// virt-handler's node labeller: the machine types QEMU offers
			// and the host's CPU model.
			kubevirtv1.SupportedMachineTypeLabel + "q35":         "true",
			kubevirtv1.HostModelCPULabel + "Skylake-Client-IBRS": "true",
			kubevirtv1.CPUModelLabel + "Skylake-Client-IBRS":     "true",
		},
	}}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return h.handlers[node].Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, raw))
}
