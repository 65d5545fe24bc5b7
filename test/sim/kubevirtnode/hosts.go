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

// Package kubevirtnode stands in for the node side of KubeVirt on the
// infrastructure cluster, beside KubeVirt's real virt-controller and
// virt-api (test/kubevirt), which create the VirtualMachineInstances and
// their virt-launcher Pods:
//
//   - the scheduler binds pending Pods to the nodes whose labels, affinity,
//     taints and free resources admit them, and reports the others
//     unschedulable with the scheduler's message;
//   - the kubelet runs virt-launcher Pods bound to its nodes: it pulls the
//     images (a container disk that cannot be pulled leaves the Pod in
//     ErrImagePull), reports the containers running and the Pod ready with
//     its readiness gates, and on termination stops the guest and confirms
//     the deletion;
//   - virt-handler, as the kubevirt-handler service account with a token
//     bound to its Pod on each node (what KubeVirt's node restriction
//     policy requires), keeps the node's heartbeat and labels, boots the
//     guest of a Scheduled instance through a Hypervisor and reports it
//     Running with its interfaces, guest information and conditions, and
//     reports a guest that stopped Succeeded or Failed.
//
// The guest is the Hypervisor's: a simulated one by default (the node
// simulator, test/sim/guest, boots what it runs), or real QEMU (test/qemu).
// Faults (Crash, PowerOff, LoseDisk, NeverSchedule, FailPulls) are injected
// through the Go API.
package kubevirtnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/cozystack/cluster-api-workers/test/sim/fault"
)

// InfraNode is a node of the infrastructure cluster.
type InfraNode struct {
	Name string
	// Labels are added to what every node carries (host name, OS,
	// architecture, and the labels virt-handler sets).
	Labels map[string]string
	// Allocatable overrides the node's allocatable resources; see
	// DefaultAllocatable.
	Allocatable corev1.ResourceList
	// Taints are the node's taints.
	Taints []corev1.Taint
}

// DefaultAllocatable is what a node offers unless its InfraNode says
// otherwise: room for thousands of small VMs, and the device plugins
// virt-handler registers (tun, vhost-net, kvm).
func DefaultAllocatable() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2000"),
		corev1.ResourceMemory:           resource.MustParse("16Ti"),
		corev1.ResourcePods:             resource.MustParse("5000"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Ti"),
		"devices.kubevirt.io/tun":       resource.MustParse("5000"),
		"devices.kubevirt.io/vhost-net": resource.MustParse("5000"),
		"devices.kubevirt.io/kvm":       resource.MustParse("5000"),
	}
}

// Options configure the node side. Zero values take defaults short enough
// for tests.
type Options struct {
	// Nodes are the infrastructure nodes; one node named sim-infra-0 in
	// zone sim-zone-a when empty.
	Nodes []InfraNode
	// Hypervisor boots guests; the simulated hypervisor when nil.
	Hypervisor Hypervisor
	// Pull reports whether an image can be pulled (nil when it can); every
	// image can when nil.
	Pull func(image string) error
	// ScheduleDelay is the time from a Pod's creation to its binding.
	ScheduleDelay time.Duration
	// BootDelay is the time from an instance's scheduling to its guest's
	// start.
	BootDelay time.Duration
	// ShutdownDelay is how long a simulated guest takes to power off.
	ShutdownDelay time.Duration
	// HeartbeatInterval is how often virt-handler refreshes its node's
	// heartbeat; 1m when zero, virt-handler's own interval.
	HeartbeatInterval time.Duration
	// PodCIDRPrefix is the first three octets of Pod addresses.
	PodCIDRPrefix string
	// ControllerNamePrefix makes the controller names unique when more than
	// one node side runs in a process.
	ControllerNamePrefix string
	// Admin configures the clients of the scheduler and the kubelets, and
	// requests virt-handler's tokens; the manager's config when nil.
	Admin *rest.Config
}

func (o *Options) defaults() {
	if o.ScheduleDelay == 0 {
		o.ScheduleDelay = 100 * time.Millisecond
	}
	if o.BootDelay == 0 {
		o.BootDelay = 300 * time.Millisecond
	}
	if o.ShutdownDelay == 0 {
		o.ShutdownDelay = 200 * time.Millisecond
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = time.Minute
	}
	if len(o.Nodes) == 0 {
		o.Nodes = []InfraNode{{Name: "sim-infra-0", Labels: map[string]string{corev1.LabelTopologyZone: "sim-zone-a"}}}
	}
	if o.PodCIDRPrefix == "" {
		o.PodCIDRPrefix = "10.244.0"
	}
	if o.Hypervisor == nil {
		o.Hypervisor = simulatedHypervisor{shutdownDelay: o.ShutdownDelay}
	}
}

// Hosts is the node side of the infrastructure cluster.
type Hosts struct {
	opts   Options
	client client.Client
	// handlers are each node's virt-handler client.
	handlers map[string]client.Client

	unschedulable fault.Set
	pullFailures  fault.Set

	mu sync.Mutex
	// guests are the running guests, by instance UID.
	guests map[types.UID]*guest
	// pods are what the kubelets keep of launcher Pods, by Pod UID.
	pods   map[types.UID]*podState
	nextIP int

	// podEvents and instanceEvents requeue objects when something outside
	// the apiserver changed: a guest started or stopped.
	podEvents      chan event.GenericEvent
	instanceEvents chan event.GenericEvent
	stopped        chan struct{}
}

// guest is a guest virt-handler started for an instance.
type guest struct {
	instance    client.ObjectKey
	instanceUID types.UID
	node        string
	guest       Guest
	started     time.Time
	// crash is why a fault killed it.
	crash string
}

// podState is what a kubelet keeps of a launcher Pod.
type podState struct {
	ip            string
	created       time.Time
	neverSchedule bool
	pullFailure   string
}

// New returns the node side; run it with SetupWithManager.
func New(opts Options) *Hosts {
	opts.defaults()
	return &Hosts{
		opts:           opts,
		handlers:       map[string]client.Client{},
		guests:         map[types.UID]*guest{},
		pods:           map[types.UID]*podState{},
		podEvents:      make(chan event.GenericEvent),
		instanceEvents: make(chan event.GenericEvent),
		stopped:        make(chan struct{}),
	}
}

// Options returns the effective options.
func (h *Hosts) Options() Options { return h.opts }

// NeverSchedule keeps the launcher Pods of the next count instances the
// selector picks (it sees the VirtualMachineInstance) pending, as when no
// node has room for them; a negative count applies until ClearFaults.
func (h *Hosts) NeverSchedule(sel fault.Selector, count int) {
	h.unschedulable.Add(fault.Fault{Selector: sel, Remaining: count})
}

// FailPulls makes the container disks of the next count instances the
// selector picks fail to pull, as an image missing from its registry; a
// negative count applies until ClearFaults.
func (h *Hosts) FailPulls(sel fault.Selector, count int) {
	h.pullFailures.Add(fault.Fault{Selector: sel, Remaining: count})
}

// ClearFaults drops the faults no instance has claimed yet.
func (h *Hosts) ClearFaults() {
	h.unschedulable.Clear()
	h.pullFailures.Clear()
}

// Crash kills the running guest of a VirtualMachine (its instance has the
// VM's name), as when QEMU dies: virt-handler reports the instance Failed
// and the run strategy decides what comes next.
func (h *Hosts) Crash(vm client.ObjectKey, reason string) error {
	if reason == "" {
		reason = "the QEMU process of the guest was killed"
	}
	g, err := h.running(vm)
	if err != nil {
		return err
	}
	h.mu.Lock()
	g.crash = reason
	h.mu.Unlock()
	g.guest.Kill(reason)
	return nil
}

// PowerOff shuts the running guest of a VirtualMachine down from inside,
// as `poweroff` in the guest does: the instance Succeeds.
func (h *Hosts) PowerOff(vm client.ObjectKey) error {
	g, err := h.running(vm)
	if err != nil {
		return err
	}
	g.guest.Shutdown()
	return nil
}

// LoseDisk makes the host lose a VirtualMachine's instance with its
// ephemeral disks, as when its node dies: the launcher Pod is force-deleted
// and the guest killed; virt-controller fails the instance, and a new one
// (if the run strategy starts one) boots a blank container disk.
func (h *Hosts) LoseDisk(ctx context.Context, vm client.ObjectKey) error {
	g, err := h.running(vm)
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := h.client.List(ctx, pods, client.InNamespace(vm.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(g.instanceUID)}); err != nil {
		return err
	}
	g.guest.Kill("the node lost the instance and its ephemeral disks")
	for i := range pods.Items {
		p := &pods.Items[i]
		if err := client.IgnoreNotFound(h.client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})); err != nil {
			return fmt.Errorf("deleting launcher Pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// running returns the running guest of a VirtualMachine.
func (h *Hosts) running(vm client.ObjectKey) (*guest, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range h.guests {
		if g.instance == vm {
			select {
			case <-g.guest.Done():
			default:
				return g, nil
			}
		}
	}
	return nil, fmt.Errorf("VirtualMachine %s has no running guest", vm)
}

// Running counts the guests that run now.
func (h *Hosts) Running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, g := range h.guests {
		select {
		case <-g.guest.Done():
		default:
			n++
		}
	}
	return n
}

// notify requeues an object through a channel source without blocking the
// caller; nothing is sent once the node side stopped.
func (h *Hosts) notify(ch chan event.GenericEvent, obj client.Object) {
	go func() {
		select {
		case ch <- event.GenericEvent{Object: obj}:
		case <-h.stopped:
		}
	}()
}
