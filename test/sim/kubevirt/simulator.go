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

// Package kubevirt simulates the parts of KubeVirt (virt-controller,
// virt-handler) and CDI that a Cluster API infrastructure provider observes,
// against a real apiserver with the real KubeVirt and CDI CRDs:
//
//   - a VirtualMachine gets KubeVirt's finalizer, the DataVolumes of its
//     dataVolumeTemplates, and, once every DataVolume it boots from has
//     succeeded, a VirtualMachineInstance that its run strategy restarts;
//   - a DataVolume gets its PersistentVolumeClaim and goes through CDI's
//     phases with import or clone progress to Succeeded;
//   - a VirtualMachineInstance is scheduled to a simulated infrastructure
//     node that satisfies its node affinity, then runs, ready, with an
//     address on every interface, after configurable delays;
//   - deleting a VirtualMachine deletes its instance first, and an instance
//     is released only after a simulated shutdown, as KubeVirt's
//     finalizers do.
//
// Faults are injected through the Simulator's Go API (FailImports,
// NeverSchedule, Crash), never through annotations on the objects under
// test. Owner-reference garbage collection is not simulated: run the real
// kube-controller-manager garbage collector beside it
// (envtest.Environment.StartControllerManager).
package kubevirt

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// InfraNode is a node of the simulated infrastructure cluster that
// VirtualMachineInstances are scheduled to.
type InfraNode struct {
	Name   string
	Labels map[string]string
}

// Options are the simulator's timings and infrastructure. Zero values take
// the defaults, which are short enough for tests.
type Options struct {
	// ImportDuration is how long an import or clone takes from start to
	// Succeeded; progress is reported in ProgressSteps steps.
	ImportDuration time.Duration
	// ProgressSteps is how many progress updates an import reports.
	ProgressSteps int
	// ImporterRestartInterval is how often the importer pod of a failing
	// import restarts.
	ImporterRestartInterval time.Duration
	// ScheduleDelay is the time from a VirtualMachineInstance's creation to
	// its scheduling.
	ScheduleDelay time.Duration
	// BootDelay is the time from scheduling to Running and ready with an
	// address.
	BootDelay time.Duration
	// ShutdownDelay is how long a deleted instance takes to shut down.
	ShutdownDelay time.Duration
	// RestartDelay is how long KubeVirt waits before it replaces a failed or
	// stopped instance its run strategy restarts.
	RestartDelay time.Duration
	// Nodes are the infrastructure nodes; one node named sim-infra-0 in
	// zone sim-zone-a when empty.
	Nodes []InfraNode
	// PodCIDRPrefix is the first three octets of instance addresses.
	PodCIDRPrefix string
	// ControllerNamePrefix makes the controller names unique when more than
	// one simulator runs in a process.
	ControllerNamePrefix string
}

func (o *Options) defaults() {
	if o.ImportDuration == 0 {
		o.ImportDuration = 2 * time.Second
	}
	if o.ProgressSteps == 0 {
		o.ProgressSteps = 4
	}
	if o.ImporterRestartInterval == 0 {
		o.ImporterRestartInterval = 500 * time.Millisecond
	}
	if o.ScheduleDelay == 0 {
		o.ScheduleDelay = 200 * time.Millisecond
	}
	if o.BootDelay == 0 {
		o.BootDelay = 500 * time.Millisecond
	}
	if o.ShutdownDelay == 0 {
		o.ShutdownDelay = 200 * time.Millisecond
	}
	if o.RestartDelay == 0 {
		o.RestartDelay = 500 * time.Millisecond
	}
	if len(o.Nodes) == 0 {
		o.Nodes = []InfraNode{{Name: "sim-infra-0", Labels: map[string]string{corev1.LabelTopologyZone: "sim-zone-a"}}}
	}
	if o.PodCIDRPrefix == "" {
		o.PodCIDRPrefix = "10.244.0"
	}
}

// Selector picks the objects a fault applies to.
type Selector func(client.Object) bool

// All selects every object.
func All() Selector { return func(client.Object) bool { return true } }

// Named selects one object.
func Named(key client.ObjectKey) Selector {
	return func(o client.Object) bool { return o.GetNamespace() == key.Namespace && o.GetName() == key.Name }
}

// InNamespace selects the objects of one namespace.
func InNamespace(namespace string) Selector {
	return func(o client.Object) bool { return o.GetNamespace() == namespace }
}

// WithLabels selects objects carrying all the given labels.
func WithLabels(set map[string]string) Selector {
	selector := labels.SelectorFromSet(set)
	return func(o client.Object) bool { return selector.Matches(labels.Set(o.GetLabels())) }
}

// fault applies to the next `remaining` objects its selector picks, or to
// all of them when remaining is negative.
type fault struct {
	selector  Selector
	remaining int
	duration  time.Duration
}

// Simulator runs the KubeVirt and CDI simulation in a controller-runtime
// manager. Timings live in memory, keyed by UID, because the apiserver
// keeps timestamps only to the second.
type Simulator struct {
	opts   Options
	client client.Client

	mu sync.Mutex
	// faults waiting for an object to claim them.
	importFailures []*fault
	slowImports    []*fault
	unschedulable  []*fault
	// imports and instances are the simulated processes, by UID.
	imports   map[types.UID]*importProcess
	instances map[types.UID]*instanceProcess
	// started records VMs whose run strategy Once has started an instance.
	started  map[types.UID]bool
	nextIP   int
	nextNode int
}

// importProcess is CDI's importer (or cloner) for one DataVolume.
type importProcess struct {
	start    time.Time
	duration time.Duration
	failing  bool
}

// instanceProcess is virt-launcher and the guest for one instance.
type instanceProcess struct {
	created        time.Time
	scheduled      time.Time
	node           string
	ip             string
	neverScheduled bool
	crashed        string
	// stopped is when the instance failed or succeeded.
	stopped  time.Time
	deleting time.Time
}

// New returns a simulator; call SetupWithManager to run it.
func New(opts Options) *Simulator {
	opts.defaults()
	return &Simulator{
		opts:      opts,
		imports:   map[types.UID]*importProcess{},
		instances: map[types.UID]*instanceProcess{},
		started:   map[types.UID]bool{},
	}
}

// Options returns the simulator's effective options.
func (s *Simulator) Options() Options { return s.opts }

// FailImports makes the next count imports (or clones) of DataVolumes the
// selector picks fail the way CDI reports an unreachable or corrupt source:
// the importer pod keeps restarting and the DataVolume never succeeds. A
// negative count applies to every such DataVolume until ClearFaults.
func (s *Simulator) FailImports(sel Selector, count int) {
	s.addFault(&s.importFailures, &fault{selector: sel, remaining: count})
}

// SlowImports makes the next count imports the selector picks take d
// instead of Options.ImportDuration, progressing steadily; a negative count
// applies to every such import until ClearFaults.
func (s *Simulator) SlowImports(sel Selector, count int, d time.Duration) {
	s.addFault(&s.slowImports, &fault{selector: sel, remaining: count, duration: d})
}

// NeverSchedule keeps the next count VirtualMachineInstances of the
// VirtualMachines the selector picks unschedulable, as when no node has room
// for them; a negative count applies to every such instance until
// ClearFaults.
func (s *Simulator) NeverSchedule(sel Selector, count int) {
	s.addFault(&s.unschedulable, &fault{selector: sel, remaining: count})
}

// ClearFaults drops the faults no object has claimed yet. Objects that
// already claimed one keep their fate.
func (s *Simulator) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.importFailures, s.slowImports, s.unschedulable = nil, nil, nil
}

func (s *Simulator) addFault(list *[]*fault, f *fault) {
	if f.remaining == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	*list = append(*list, f)
}

// claim returns the first fault of the list that selects obj and uses it up.
func (s *Simulator) claim(list *[]*fault, obj client.Object) *fault {
	for i, f := range *list {
		if f.selector != nil && !f.selector(obj) {
			continue
		}
		if f.remaining > 0 {
			f.remaining--
			if f.remaining == 0 {
				*list = append((*list)[:i:i], (*list)[i+1:]...)
			}
		}
		return f
	}
	return nil
}

// Crash makes the running instance of a VirtualMachine fail now, as when
// its QEMU process or its infrastructure node dies. The instance becomes
// Failed; the VM's run strategy decides whether KubeVirt starts another.
func (s *Simulator) Crash(ctx context.Context, vm client.ObjectKey, reason string) error {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, vm, vmi); err != nil {
		return fmt.Errorf("crashing the instance of VirtualMachine %s: %w", vm, err)
	}
	if reason == "" {
		reason = "the virt-launcher pod terminated unexpectedly"
	}
	s.mu.Lock()
	p := s.instanceLocked(vmi)
	if p.crashed == "" {
		p.crashed = reason
	}
	s.mu.Unlock()
	_, err := s.reconcileInstance(ctx, reconcile.Request{NamespacedName: vm})
	return err
}

// SetupWithManager registers the VirtualMachine, VirtualMachineInstance and
// DataVolume controllers.
func (s *Simulator) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	s.client = mgr.GetClient()
	opts := controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}
	name := func(n string) string { return s.opts.ControllerNamePrefix + n }
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-virtualmachine")).
		For(&kubevirtv1.VirtualMachine{}).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		Owns(&cdiv1.DataVolume{}).
		// A VM boots DataVolumes that it does not own, too.
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(s.vmsUsingDataVolume)).
		WithOptions(opts).
		Complete(reconcile.Func(s.reconcileVirtualMachine)); err != nil {
		return fmt.Errorf("setting up the simulated VirtualMachine controller: %w", err)
	}
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-virtualmachineinstance")).
		For(&kubevirtv1.VirtualMachineInstance{}).
		WithOptions(opts).
		Complete(reconcile.Func(s.reconcileInstance)); err != nil {
		return fmt.Errorf("setting up the simulated VirtualMachineInstance controller: %w", err)
	}
	if err := builder.ControllerManagedBy(mgr).
		Named(name("sim-datavolume")).
		For(&cdiv1.DataVolume{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		WithOptions(opts).
		Complete(reconcile.Func(s.reconcileDataVolume)); err != nil {
		return fmt.Errorf("setting up the simulated DataVolume controller: %w", err)
	}
	return nil
}

func (s *Simulator) vmsUsingDataVolume(ctx context.Context, o client.Object) []reconcile.Request {
	vms := &kubevirtv1.VirtualMachineList{}
	if err := s.client.List(ctx, vms, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range vms.Items {
		for _, name := range dataVolumeNames(&vms.Items[i]) {
			if name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vms.Items[i])})
			}
		}
	}
	return out
}

// now is the time the simulator writes into conditions.
func now() metav1.Time { return metav1.NewTime(time.Now()) }

// after returns how long until t+d, at least a millisecond so a requeue
// never spins.
func after(t time.Time, d time.Duration) time.Duration {
	if left := time.Until(t.Add(d)); left > time.Millisecond {
		return left
	}
	return time.Millisecond
}
