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
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Hypervisor boots the guest of a VirtualMachineInstance on a node, as
// virt-launcher's QEMU does once virt-handler hands it the domain.
type Hypervisor interface {
	// Start boots the guest and returns once it runs. An error fails the
	// instance, as a domain that does not start does.
	Start(ctx context.Context, req StartRequest) (Guest, error)
}

// StartRequest is what a guest is started from: the instance as
// virt-controller created it (never the VirtualMachine), its launcher Pod
// and node, and a reader for what its volumes name (cloud-init Secrets,
// claims and their volumes).
type StartRequest struct {
	Instance *kubevirtv1.VirtualMachineInstance
	Pod      *corev1.Pod
	Node     string
	Reader   client.Reader
}

// Guest is a running guest.
type Guest interface {
	// Done is closed when the guest stopped; Err then tells how: nil for
	// a power-off, the failure otherwise.
	Done() <-chan struct{}
	Err() error
	// Shutdown asks the guest to power off, as virt-launcher does when its
	// Pod is terminated; Kill ends it at once.
	Shutdown()
	Kill(reason string)
	// Interfaces are the guest's network interfaces as virt-handler
	// reports them.
	Interfaces() []kubevirtv1.VirtualMachineInstanceNetworkInterface
	// OSInfo is what the guest agent reports; nil without an agent.
	OSInfo() *kubevirtv1.VirtualMachineInstanceGuestOSInfo
}

// simulatedHypervisor runs guests that only keep state: the node
// simulator (test/sim/guest) boots what they would run once the instance is
// Running and ready.
type simulatedHypervisor struct {
	shutdownDelay time.Duration
}

func (h simulatedHypervisor) Start(_ context.Context, req StartRequest) (Guest, error) {
	ip := req.Pod.Status.PodIP
	if ip == "" {
		return nil, errors.New("the launcher Pod has no address")
	}
	g := &simulatedGuest{done: make(chan struct{}), shutdownDelay: h.shutdownDelay}
	// Pod networking with bridge or masquerade binding: the first
	// interface carries the Pod's address.
	for i, iface := range req.Instance.Spec.Domain.Devices.Interfaces {
		n := kubevirtv1.VirtualMachineInstanceNetworkInterface{
			Name: iface.Name, InterfaceName: fmt.Sprintf("eth%d", i), MAC: macFor(req.Instance.UID, i),
			InfoSource: "domain, guest-agent", QueueCount: 1,
		}
		if i == 0 {
			n.IP, n.IPs = ip, []string{ip}
		}
		g.interfaces = append(g.interfaces, n)
	}
	return g, nil
}

// macFor is a stable, locally administered MAC address for the i-th
// interface of an instance.
func macFor(uid types.UID, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", uid, i)))
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", sum[0], sum[1], sum[2], sum[3], sum[4])
}

type simulatedGuest struct {
	interfaces    []kubevirtv1.VirtualMachineInstanceNetworkInterface
	shutdownDelay time.Duration
	once          sync.Once
	done          chan struct{}
	err           error
}

func (g *simulatedGuest) Done() <-chan struct{} { return g.done }
func (g *simulatedGuest) Err() error            { return g.err }

func (g *simulatedGuest) stop(err error) {
	g.once.Do(func() {
		g.err = err
		close(g.done)
	})
}

func (g *simulatedGuest) Shutdown() {
	go func() {
		time.Sleep(g.shutdownDelay)
		g.stop(nil)
	}()
}

func (g *simulatedGuest) Kill(reason string) { g.stop(errors.New(reason)) }

func (g *simulatedGuest) Interfaces() []kubevirtv1.VirtualMachineInstanceNetworkInterface {
	return g.interfaces
}

func (g *simulatedGuest) OSInfo() *kubevirtv1.VirtualMachineInstanceGuestOSInfo {
	return &kubevirtv1.VirtualMachineInstanceGuestOSInfo{Name: "Linux", ID: "linux", KernelRelease: "6.1.0-simulated"}
}
