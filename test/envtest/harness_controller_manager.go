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

package envtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cozystack/cluster-api-workers/test/process"
)

// Controllers of kube-controller-manager that the harness runs. envtest
// starts no controller-manager, so without these nothing garbage-collects
// dependents, signs cluster-info or removes expired bootstrap tokens.
const (
	GarbageCollectorController = "garbage-collector-controller"
	NamespaceController        = "namespace-controller"
	ClaimProtectionController  = "persistentvolumeclaim-protection-controller"
	// VolumeProtectionController removes the apiserver's
	// kubernetes.io/pv-protection finalizer from a deleted volume once it
	// is no longer Bound.
	VolumeProtectionController = "persistentvolume-protection-controller"
	BootstrapSignerController  = "bootstrap-signer-controller"
	TokenCleanerController     = "token-cleaner-controller"
	// DaemonSetController creates a DaemonSet's Pods (test/node: virt-handler).
	DaemonSetController = "daemonset-controller"
	// NodeLifecycleController removes the not-ready taint a kubelet
	// registers its Node with once the Node is Ready (test/node), which
	// a DaemonSet's Pods do not tolerate.
	NodeLifecycleController = "node-lifecycle-controller"
	// EndpointSliceController writes Services' EndpointSlices, which
	// kube-proxy reads (test/node with Options.KubeProxy).
	EndpointSliceController = "endpointslice-controller"
)

// ManagementControllers are the controllers a management cluster needs for
// Cluster API's owner-reference chains to be collected, test namespaces to
// be emptied on deletion, and claims and volumes (which the apiserver
// protects with a finalizer each) to be released once deleted.
var ManagementControllers = []string{GarbageCollectorController, NamespaceController, ClaimProtectionController, VolumeProtectionController}

// WorkloadControllers are the controllers a workload cluster needs for joins:
// cluster-info is signed for every signing bootstrap token and expired
// tokens are removed, as in a kubeadm cluster.
var WorkloadControllers = []string{BootstrapSignerController, TokenCleanerController, GarbageCollectorController}

// ControllerManager is a running kube-controller-manager (or kube-scheduler)
// built from source by hack/tools-bins.sh.
type ControllerManager struct {
	proc *process.Process
	dir  string
	once sync.Once
}

// ControllerManagerBinary returns the kube-controller-manager path: the
// KUBE_CONTROLLER_MANAGER_BIN variable when set, otherwise the cache that
// hack/tools-bins.sh fills (building it on first use).
func ControllerManagerBinary() (string, error) {
	if bin := os.Getenv("KUBE_CONTROLLER_MANAGER_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := ToolsBinary("controller-manager")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kube-controller-manager"), nil
}

// StartControllerManager runs kube-controller-manager with the given
// controllers against the management apiserver.
func (e *Environment) StartControllerManager(controllers ...string) (*ControllerManager, error) {
	return startControllerManager(e.env, controllers)
}

// StartControllerManager runs kube-controller-manager with the given
// controllers against the workload apiserver.
func (w *Workload) StartControllerManager(controllers ...string) (*ControllerManager, error) {
	return startControllerManager(w.env, controllers)
}

func startControllerManager(env *crenvtest.Environment, controllers []string) (*ControllerManager, error) {
	if len(controllers) == 0 {
		return nil, fmt.Errorf("kube-controller-manager needs at least one controller")
	}
	bin, err := ControllerManagerBinary()
	if err != nil {
		return nil, err
	}
	return startComponent(env, "kube-controller-manager", "system:kube-controller-manager", bin, func(kubeconfig string) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=" + strings.Join(controllers, ","),
			"--leader-elect=false",
			"--secure-port=0",
			"--use-service-account-credentials=false",
			// Tests create and delete quickly; a short resync finds new CRDs soon.
			"--concurrent-gc-syncs=5",
			"--v=1",
		}
	})
}

// StartScheduler runs kube-scheduler (built from source by
// hack/tools-bins.sh scheduler) against the management apiserver, for
// tests with real nodes (test/node): envtest schedules nothing.
func (e *Environment) StartScheduler() (*ControllerManager, error) {
	dir, err := ToolsBinary("scheduler")
	if err != nil {
		return nil, err
	}
	return startComponent(e.env, "kube-scheduler", "system:kube-scheduler", filepath.Join(dir, "kube-scheduler"), func(kubeconfig string) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		}
	})
}

// startComponent runs a Kubernetes control-plane binary as a user of the
// system:masters group, with the arguments args makes from its kubeconfig.
func startComponent(env *crenvtest.Environment, name, userName, bin string, args func(kubeconfig string) []string) (*ControllerManager, error) {
	user, err := env.AddUser(crenvtest.User{Name: userName, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("creating the %s user: %w", name, err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, err
	}
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, args(kubeconfigPath)...) //nolint:gosec,noctx // A binary from the test cache; it runs until Stop, not until a context ends.
	// Its own process group, so a test binary killed by a timeout does not
	// leave it running with the apiserver gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	proc, err := process.Start(name, filepath.Join(dir, name+".log"), cmd)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// A component that exits at once has a flag or connection problem;
	// report it rather than let tests time out.
	select {
	case <-proc.Done():
		log := proc.Tail(maxLogBytes)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%s exited at start: %s", name, log)
	case <-time.After(time.Second):
	}
	return &ControllerManager{proc: proc, dir: dir}, nil
}

// maxLogBytes bounds the log Log returns.
const maxLogBytes = 1 << 20

// Log returns the end of what the controller-manager printed, for test
// failure output.
func (c *ControllerManager) Log() string { return c.proc.Tail(maxLogBytes) }

// Stop stops the controller-manager.
func (c *ControllerManager) Stop() {
	c.once.Do(func() {
		_ = c.proc.Stop(10 * time.Second)
		_ = os.RemoveAll(c.dir)
	})
}
