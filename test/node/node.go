//go:build node

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

package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/netns"
	"github.com/cozystack/cluster-api-workers/test/node/internal/initconfig"
	"github.com/cozystack/cluster-api-workers/test/ociimage"
	"github.com/cozystack/cluster-api-workers/test/process"
)

// PauseImage is the sandbox image every node imports and pins in
// containerd's configuration: built here from cmd/pause, never pulled.
const PauseImage = "kvw.local/pause:v1"

// ErrPrerequisite wraps what this machine lacks to run a node (not root,
// no unshare, a Debian package missing): tests skip on it.
var ErrPrerequisite = errors.New("node prerequisite missing")

// Options configure a node.
type Options struct {
	// Name is the Node's name (and the kubelet's --hostname-override).
	Name string
	// Config is how the kubelet authenticates to the apiserver: a client
	// certificate with CN=system:node:<Name> and O=system:nodes (see
	// envtest.Environment.AddUser). Its host must be a loopback address.
	Config *rest.Config
	// Images are imported into containerd besides the pause image.
	Images []ociimage.Image
	// Labels are the Node's labels (the kubelet's --node-labels).
	Labels map[string]string
	// NodeIP is the node's address inside its network namespace (on its
	// loopback device); default 10.254.0.1.
	NodeIP string
	// PodCIDR is the range the CNI bridge gives pods; default
	// 10.254.64.0/24. It exists only inside the node's network namespace.
	PodCIDR string
	// KubernetesServiceIP is the ClusterIP of the apiserver's `kubernetes`
	// Service, at which pods reach the apiserver (ServiceCA); default
	// 10.0.0.1, the first address of envtest's service range.
	KubernetesServiceIP string
	// ClusterDNS is the cluster DNS Service's address the kubelet gives
	// pods (nothing serves it until DeployDNS runs CoreDNS behind it);
	// default 10.0.0.10, in envtest's service range.
	ClusterDNS string
	// KubeProxy, when set, gives the node cluster Services as a cluster's
	// nodes have them: kube-proxy (hack/tools-bins.sh proxy) runs in the
	// node in iptables mode, authenticated by this client certificate
	// (CN=system:kube-proxy, which the apiserver's bootstrap binding
	// system:node-proxier authorizes; see envtest.Environment.AddUser), and
	// CoreDNS's image (hack/tools-bins.sh coredns) is imported for
	// DeployDNS. Its host must be Config's. kube-proxy then serves the
	// `kubernetes` Service too, from the apiserver's EndpointSlice: the node
	// answers at the address the apiserver advertises (the host's, which the
	// node's namespace does not reach) through the proxy of ServiceCA, and
	// KubernetesServiceIP is no longer an address of the node. The
	// Services' EndpointSlices come from kube-controller-manager's
	// endpointslice controller (envtest.EndpointSliceController), which the
	// caller runs. Nil: no kube-proxy; pods reach the kubernetes Service
	// alone.
	KubeProxy *rest.Config
	// Forwards map an address and port inside the node's network namespace
	// (on its loopback, which pods' default route leads to) to a host TCP
	// address: pods, and guests behind virt-launcher's NAT, reach a host
	// service there, such as a workload cluster's apiserver on the host's
	// loopback. Nothing else leaves the node.
	Forwards map[string]string
	// ArtifactsDir, when set, receives the node's logs (nodeinit,
	// containerd, kubelet) on Stop, and the pods' logs every few seconds
	// while the node runs, so that a Pod deleted before Stop (the launcher
	// Pod of a crashed instance) keeps its logs there.
	ArtifactsDir string
	// StartTimeout bounds the start up to a running kubelet; default 3
	// minutes.
	StartTimeout time.Duration
}

// Node is a running node: containerd and a kubelet in mount, PID and
// network namespaces of their own, with their state in Dir.
type Node struct {
	Name   string
	Dir    string
	NodeIP string

	opts       Options
	kubeProxy  string
	dnsImage   ociimage.Image
	unshare    *process.Process
	initPID    int
	pidNS      string
	cgroupName string
	listener   net.Listener
	forwards   []net.Listener
	service    *http.Server
	serviceCA  []byte
	before     hostState
	stopOnce   sync.Once
	stopErr    error
	// keepingLogs ends the pods' logs copy (ArtifactsDir); keptLogs is
	// closed when it has.
	keepingLogs context.CancelFunc
	keptLogs    chan struct{}
}

// Prerequisites says what this machine lacks to run a node, wrapping
// ErrPrerequisite, or nil.
func Prerequisites() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (mount, PID and network namespaces, cgroups)")
	}
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" on the PATH")
		}
	}
	if _, err := os.Stat(runcPath); err != nil {
		missing = append(missing, runcPath+" (apt-get install runc)")
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p)+" (apt-get install containernetworking-plugins)")
		}
	}
	if len(cgroupV1Mounts()) == 0 && cgroupV2Mount() == "" {
		missing = append(missing, "a cgroup hierarchy")
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !bytes.Contains(fs, []byte("overlay")) {
		missing = append(missing, "overlayfs in the kernel")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrPrerequisite, strings.Join(missing, ", "))
	}
	return nil
}

const (
	runcPath  = "/usr/sbin/runc"
	cniBinDir = "/usr/lib/cni"
)

var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// kernelSettings are the sysctls the kubelet sets when they differ (see
// setupKernelTunables in pkg/kubelet/cm): the node's init shows it these
// values over /proc/sys so the host's stay as they are.
var kernelSettings = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Start builds what the node runs (containerd and the kubelet into the
// cache, once; nodeinit and the pause image each time, from the Go build
// cache), starts it, and returns once the kubelet runs. The Node object
// shows up when the kubelet registers; wait for its Ready condition.
// Stop ends it, whatever Start returned.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if err := Prerequisites(); err != nil {
		return nil, err
	}
	if !validName.MatchString(opts.Name) || len(opts.Name) > 40 {
		return nil, fmt.Errorf("node name %q: lower-case letters, digits and '-', at most 40", opts.Name)
	}
	if opts.Config == nil || len(opts.Config.CertData) == 0 || len(opts.Config.KeyData) == 0 {
		return nil, errors.New("options.Config must carry the kubelet's client certificate and key")
	}
	if opts.NodeIP == "" {
		opts.NodeIP = "10.254.0.1"
	}
	if opts.PodCIDR == "" {
		opts.PodCIDR = "10.254.64.0/24"
	}
	if opts.KubernetesServiceIP == "" {
		opts.KubernetesServiceIP = "10.0.0.1"
	}
	if opts.ClusterDNS == "" {
		opts.ClusterDNS = "10.0.0.10"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	apiURL, err := url.Parse(opts.Config.Host)
	if err != nil || apiURL.Port() == "" {
		return nil, fmt.Errorf("apiserver host %q: need scheme, host and port", opts.Config.Host)
	}
	if ip := net.ParseIP(apiURL.Hostname()); apiURL.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("apiserver host %q: only a loopback apiserver is reachable from the node", opts.Config.Host)
	}

	binDir, err := envtest.ToolsBinary("kubelet")
	if err != nil {
		return nil, fmt.Errorf("building the kubelet: %w", err)
	}
	kubeletBin := filepath.Join(binDir, "kubelet")
	containerdDir, err := containerdBinaries()
	if err != nil {
		return nil, err
	}
	var kubeProxyBin string
	var dnsImage ociimage.Image
	if opts.KubeProxy != nil {
		if opts.KubeProxy.Host != opts.Config.Host {
			return nil, fmt.Errorf("options.KubeProxy's host %q is not the kubelet's %q: the node reaches that apiserver alone", opts.KubeProxy.Host, opts.Config.Host)
		}
		if _, err := exec.LookPath("iptables-restore"); err != nil {
			return nil, fmt.Errorf("%w: iptables-restore on the PATH for kube-proxy (apt-get install iptables)", ErrPrerequisite)
		}
		dir, err := envtest.ToolsBinary("proxy")
		if err != nil {
			return nil, fmt.Errorf("building kube-proxy: %w", err)
		}
		kubeProxyBin = filepath.Join(dir, "kube-proxy")
		if dnsImage, err = corednsImage(); err != nil {
			return nil, err
		}
	}

	sweepLeftovers()
	dir, err := os.MkdirTemp("", "kvw-node-")
	if err != nil {
		return nil, err
	}
	n := &Node{Name: opts.Name, Dir: dir, NodeIP: opts.NodeIP, opts: opts, kubeProxy: kubeProxyBin, dnsImage: dnsImage,
		cgroupName: "kvw-node-" + opts.Name + "-" + filepath.Base(dir)[len("kvw-node-"):]}
	n.before = snapshotHost()
	if err := n.start(ctx, kubeletBin, containerdDir, apiURL); err != nil {
		if stopErr := n.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (and stopping: %v)", err, stopErr) //nolint:errorlint // The first error is the one to match.
		}
		return nil, err
	}
	if opts.ArtifactsDir != "" {
		n.keepPodLogs()
	}
	return n, nil
}

// keepPodLogs copies the pods' logs to the artifacts directory every two
// seconds until Stop: the kubelet removes a Pod's logs once the Pod is
// deleted, and a launcher Pod's are the only record of why its instance
// ended.
func (n *Node) keepPodLogs() {
	ctx, cancel := context.WithCancel(context.Background())
	n.keepingLogs, n.keptLogs = cancel, make(chan struct{})
	go func() {
		defer close(n.keptLogs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
			// A Pod deleted during the copy ends that copy; the next one
			// goes on from the Pods left.
			_ = n.copyPodLogs()
		}
	}()
}

// copyPodLogs copies the pods' logs as the kubelet wrote them (CRI
// format: each line with its time),
// /var/log/pods/<namespace>_<pod>_<uid>/<container>/, to the artifacts
// directory.
func (n *Node) copyPodLogs() error {
	return copyTree(n.HostPath("/var/log/pods"), filepath.Join(n.opts.ArtifactsDir, "pods"))
}

func (n *Node) path(parts ...string) string {
	return filepath.Join(append([]string{n.Dir}, parts...)...)
}

func (n *Node) start(ctx context.Context, kubeletBin, containerdDir string, apiURL *url.URL) error {
	for _, d := range []string{"bin", "images", "logs", "sysctl", "private/run", "private/var-lib", "private/var-log",
		"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "volume-plugins"} {
		if err := os.MkdirAll(n.path(d), 0o700); err != nil {
			return err
		}
	}
	// Built each time (seconds with a warm Go build cache): nodeinit, and the
	// pause binary of the sandbox image.
	for _, cmd := range []string{"nodeinit", "pause"} {
		if err := GoBuild("./test/node/cmd/"+cmd, n.path("bin", cmd)); err != nil {
			return err
		}
	}
	images := append([]ociimage.Image{{Ref: PauseImage, Files: map[string]string{"/pause": n.path("bin", "pause")}, Entrypoint: []string{"/pause"}}}, n.opts.Images...)
	if n.dnsImage.Ref != "" {
		images = append(images, n.dnsImage)
	}
	var archives []string
	for i, img := range images {
		if img.Archive != "" {
			archives = append(archives, img.Archive)
			continue
		}
		archive := n.path("images", fmt.Sprintf("%d.tar", i))
		if err := img.WriteArchive(archive); err != nil {
			return err
		}
		archives = append(archives, archive)
	}
	if err := n.createCgroups(); err != nil {
		return err
	}
	if err := n.writeConfigs(); err != nil {
		return err
	}
	// The host side of the apiserver forwarder.
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", n.path("api.sock"))
	if err != nil {
		return err
	}
	n.listener = l
	upstream := apiURL.Host
	go netns.Forward(l, upstream)
	if err := n.serveKubernetesService(ctx, apiURL); err != nil {
		return err
	}
	var forwards []initconfig.Forward
	serviceListen := net.JoinHostPort(n.opts.KubernetesServiceIP, "443")
	if n.opts.KubeProxy != nil {
		// kube-proxy sends the kubernetes Service's connections to the
		// apiserver's endpoints: the node answers there, and the Service's
		// address is kube-proxy's alone, as on a cluster's node.
		endpoints, err := apiserverEndpoints(ctx, n.opts.KubeProxy)
		if err != nil {
			return err
		}
		serviceListen = ""
		for _, ep := range endpoints {
			forwards = append(forwards, initconfig.Forward{Listen: ep, Socket: n.path("service.sock")})
		}
	}
	for _, listen := range slices.Sorted(maps.Keys(n.opts.Forwards)) {
		if _, _, err := net.SplitHostPort(listen); err != nil {
			return fmt.Errorf("forward %s: %w", listen, err)
		}
		socket := n.path(fmt.Sprintf("forward-%d.sock", len(forwards)))
		l, err := (&net.ListenConfig{}).Listen(ctx, "unix", socket)
		if err != nil {
			return err
		}
		n.forwards = append(n.forwards, l)
		go netns.Forward(l, n.opts.Forwards[listen])
		forwards = append(forwards, initconfig.Forward{Listen: listen, Socket: socket})
	}

	kubeletArgs := []string{kubeletBin,
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + n.path("kubelet.kubeconfig"),
		// The usual paths inside the node (virt-handler mounts
		// /var/lib/kubelet), the node's directory on the host.
		"--root-dir=/var/lib/kubelet",
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.NodeIP,
		"--v=2",
	}
	if len(n.opts.Labels) > 0 {
		var labels []string
		for k, v := range n.opts.Labels {
			labels = append(labels, k+"="+v)
		}
		kubeletArgs = append(kubeletArgs, "--node-labels="+strings.Join(labels, ","))
	}
	socket := n.path("containerd", "containerd.sock")
	cfg := initconfig.Config{
		Dir:              n.Dir,
		PrivateDirs:      privateDirs(n.Dir),
		Sysctls:          kernelSettings,
		NodeIP:           n.NodeIP,
		APIListen:        apiURL.Host,
		APISocket:        n.path("api.sock"),
		ServiceListen:    serviceListen,
		ServiceSocket:    n.path("service.sock"),
		Forwards:         forwards,
		Path:             containerdDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		Containerd:       []string{filepath.Join(containerdDir, "containerd"), "--config", n.path("containerd.toml")},
		ContainerdSocket: socket,
		Ctr:              filepath.Join(containerdDir, "ctr"),
		Images:           archives,
		Kubelet:          kubeletArgs,
		KubeProxy:        n.kubeProxyArgs(),
		LogDir:           n.path("logs"),
		PhaseFile:        n.path("phase"),
	}
	if apiURL.Hostname() == "localhost" {
		cfg.APIListen = net.JoinHostPort("127.0.0.1", apiURL.Port())
	}
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.path("nodeinit.json"), raw, 0o600); err != nil {
		return err
	}
	// --kill-child=SIGTERM: when unshare dies (it dies with this process,
	// Pdeathsig), nodeinit stops the node as Stop would.
	//nolint:gosec,noctx // Our own command line; Stop ends it.
	n.unshare, err = process.Start("unshare", n.path("logs", "nodeinit.log"), exec.Command("unshare", "--mount", "--pid", "--net", "--fork", "--mount-proc", "--propagation", "private",
		"--kill-child=SIGTERM", n.path("bin", "nodeinit"), n.path("nodeinit.json")))
	if err != nil {
		return err
	}
	if err := n.findInit(); err != nil {
		return err
	}
	deadline := time.NewTimer(n.opts.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		phases, _ := os.ReadFile(n.path("phase"))
		for _, line := range strings.Split(string(phases), "\n") {
			if strings.HasPrefix(line, "failed: ") || strings.Contains(line, " exited: ") {
				return fmt.Errorf("node %s: %s\n%s", n.Name, line, n.LogTails())
			}
			if line == "kubelet" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.unshare.Done():
			return fmt.Errorf("node %s: nodeinit exited while starting\n%s", n.Name, n.LogTails())
		case <-deadline.C:
			return fmt.Errorf("node %s: the kubelet did not start within %s (phases: %q)\n%s", n.Name, n.opts.StartTimeout, phases, n.LogTails())
		case <-tick.C:
		}
	}
}

// findInit finds nodeinit, unshare's only child and PID 1 of the node's PID
// namespace, and records that namespace.
func (n *Node) findInit() error {
	pid := n.unshare.PID()
	for range 200 {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err == nil {
			if fields := strings.Fields(string(raw)); len(fields) > 0 {
				var child int
				if _, err := fmt.Sscan(fields[0], &child); err == nil {
					ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", child))
					if err == nil {
						own, _ := os.Readlink("/proc/self/ns/pid")
						if ns != own {
							n.initPID, n.pidNS = child, ns
							return nil
						}
					}
				}
			}
		}
		select {
		case <-n.unshare.Done():
			return fmt.Errorf("unshare exited at once\n%s", n.LogTails())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("could not find the node's init process under unshare")
}

// Stop stops the kubelet, then containerd (SIGTERM, through nodeinit), and
// with the node's init the PID namespace ends: every shim and container in
// it is killed by the kernel, and the mount and network namespaces (pod
// sandboxes' mounts, the CNI bridge, any iptables rules there) go with it.
// Then it removes the node's cgroups and directory and checks that nothing
// is left: mounts under the directory, cgroups named for the node,
// processes of its PID namespace, host iptables rules or paths that were
// not there before. It returns what it found left, if anything.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	var errs []error
	if n.keepingLogs != nil {
		n.keepingLogs()
		<-n.keptLogs
	}
	if n.unshare != nil {
		if n.initPID != 0 {
			_ = syscall.Kill(n.initPID, syscall.SIGTERM)
		} else {
			_ = n.unshare.Signal(syscall.SIGTERM)
		}
		select {
		case <-n.unshare.Done():
		case <-time.After(45 * time.Second):
			errs = append(errs, errors.New("the node did not stop within 45s: killed"))
			if n.initPID != 0 {
				_ = syscall.Kill(n.initPID, syscall.SIGKILL)
			}
			_ = n.unshare.Kill()
		}
	}
	if n.listener != nil {
		_ = n.listener.Close()
	}
	for _, l := range n.forwards {
		_ = l.Close()
	}
	if n.service != nil {
		_ = n.service.Close()
	}
	if n.pidNS != "" {
		if err := waitFor(30*time.Second, func() error {
			if pids := n.processes(); len(pids) > 0 {
				return fmt.Errorf("processes left in the node's PID namespace: %v", pids)
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := waitFor(30*time.Second, n.removeCgroups); err != nil {
		errs = append(errs, err)
	}
	if n.opts.ArtifactsDir != "" {
		if err := copyDir(n.path("logs"), n.opts.ArtifactsDir); err != nil {
			errs = append(errs, fmt.Errorf("keeping the logs: %w", err))
		}
		if err := n.copyPodLogs(); err != nil {
			errs = append(errs, fmt.Errorf("keeping the pods' logs: %w", err))
		}
	}
	if err := waitFor(10*time.Second, func() error {
		if mounts := mountsUnder(n.Dir); len(mounts) > 0 {
			return fmt.Errorf("mounts left under %s: %v", n.Dir, mounts)
		}
		return nil
	}); err != nil {
		errs = append(errs, err)
	} else if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, n.before.compare(snapshotHost())...)
	return errors.Join(errs...)
}

func waitFor(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ContainerLog returns what a container of a pod on this node wrote, read
// from the kubelet's log file (CRI format, the timestamp, stream and tag of
// each line stripped).
func (n *Node) ContainerLog(namespace, pod, container string) (string, error) {
	lines, err := n.ContainerLogLines(namespace, pod, container)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, l := range lines {
		out.WriteString(l.Text)
		if !l.Partial {
			out.WriteString("\n")
		}
	}
	return out.String(), nil
}

// LogLine is one line of a container's log as the kubelet wrote it.
type LogLine struct {
	// Time is when the runtime read the line from the container.
	Time time.Time
	Text string
	// Partial: the container's line goes on in the next LogLine.
	Partial bool
}

// ContainerLogLines returns a container's log lines with the time the
// runtime read each (a guest's console through virt-tail: when the guest
// wrote it, give or take the tail's polling).
func (n *Node) ContainerLogLines(namespace, pod, container string) ([]LogLine, error) {
	logs := n.HostPath("/var/log/pods")
	files, err := filepath.Glob(filepath.Join(logs, namespace+"_"+pod+"_*", container, "*.log"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no log file for %s/%s container %s under %s", namespace, pod, container, logs)
	}
	raw, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		return nil, err
	}
	var out []LogLine
	for _, line := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		// "<RFC3339Nano> <stdout|stderr> <F|P> <text>"
		parts := strings.SplitN(line, " ", 4)
		if len(parts) != 4 {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			continue
		}
		out = append(out, LogLine{Time: t, Text: parts[3], Partial: parts[2] == "P"})
	}
	return out, nil
}

// LogTails returns the end of each log of the node.
func (n *Node) LogTails() string {
	var b strings.Builder
	names := []string{"nodeinit", "containerd", "kubelet"}
	if n.kubeProxy != "" {
		names = append(names, "kube-proxy")
	}
	for _, name := range names {
		fmt.Fprintf(&b, "--- %s.log\n%s\n", name, process.Tail(n.path("logs", name+".log"), 4<<10))
	}
	return b.String()
}

// LogPath is the file a component of the node (nodeinit, containerd,
// kubelet, kube-proxy) logs to, while the node runs.
func (n *Node) LogPath(component string) string { return n.path("logs", component+".log") }

// GoBuild builds a package of this repository, statically (CGO off), with
// the node build tag.
func GoBuild(pkg, out string) error {
	cmd := exec.Command("go", "build", "-tags", "node", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg) //nolint:gosec,noctx // Our own command line; it ends on its own.
	cmd.Dir = envtest.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, out)
	}
	return nil
}

// containerdBinaries runs hack/node/bins.sh, which builds containerd, its
// runc shim and ctr into the cache on first use.
func containerdBinaries() (string, error) {
	cmd := exec.Command("bash", filepath.Join(envtest.RepoRoot(), "hack", "node", "bins.sh")) //nolint:gosec,noctx // Our own script; it ends on its own.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, os.Stderr)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/node/bins.sh: %w: %s", err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

func copyDir(from, to string) error {
	if err := os.MkdirAll(to, 0o750); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(from, e.Name())) //nolint:gosec // The node's log directory.
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), raw, 0o600); err != nil { //nolint:gosec // The caller's artifacts directory.
			return err
		}
	}
	return nil
}

// copyTree copies the regular files under from to the same paths under to
// (a missing from copies nothing).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == from {
			return nil
		}
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		raw, err := os.ReadFile(p) //nolint:gosec // A file of the node's directory.
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(to, filepath.Dir(rel)), 0o750); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), raw, 0o600) //nolint:gosec // The caller's artifacts directory.
	})
}

// Processes lists the node's processes (host PIDs): everything in its PID
// namespace, nodeinit, containerd, the kubelet, shims and containers.
//
// Containers run in PID namespaces of their own below the node's, so a
// process counts when it is in the node's PID namespace, descends from
// nodeinit, or sits in one of the node's cgroups.
func (n *Node) Processes() []int {
	return n.processes()
}

// Cgroups lists the node's cgroups in every hierarchy: its cgroup root and
// what the kubelet and runc made below it.
func (n *Node) Cgroups() []string { return n.cgroupsLeft() }

// Mounts lists the mounts under the node's directory as the node sees
// them (its own mount namespace): containers' root filesystems, sandboxes'
// network namespaces, the kubelet's volumes. The host sees none of them.
func (n *Node) Mounts() []string {
	if n.initPID == 0 {
		return nil
	}
	return mountsIn(fmt.Sprintf("/proc/%d/mountinfo", n.initPID), n.Dir)
}

// privateDirs are the host directories the node sees as its own, each
// backed by a directory of the node: the fixed paths containerd and the
// kubelet use whatever their configuration says (/run/containerd/s for shim
// sockets, /var/run/netns, /var/lib/kubelet/device-plugins,
// /var/log/containers, the CNI cache under /var/lib/cni), and the kubelet's
// root /var/lib/kubelet and pod logs /var/log/pods.
func privateDirs(dir string) map[string]string {
	return map[string]string{
		"/run":     filepath.Join(dir, "private", "run"),
		"/var/lib": filepath.Join(dir, "private", "var-lib"),
		"/var/log": filepath.Join(dir, "private", "var-log"),
	}
}

// HostPath returns where a path inside the node (/var/lib/kubelet/...,
// /var/log/pods/..., /run/...) is on the host, while the node runs.
func (n *Node) HostPath(nodePath string) string {
	for inside, host := range privateDirs(n.Dir) {
		if nodePath == inside || strings.HasPrefix(nodePath, inside+"/") {
			return host + strings.TrimPrefix(nodePath, inside)
		}
	}
	return nodePath
}

// CommandLines are the command lines (arguments joined by spaces) of the
// node's processes whose executable's base name is one of names: QEMU's,
// say.
func (n *Node) CommandLines(names ...string) []string {
	named := n.named(names)
	out := make([]string, 0, len(named))
	for _, p := range named {
		out = append(out, strings.Join(p.args, " "))
	}
	return out
}

// CPUTime is the CPU time (user and system) used so far by the node's
// processes whose executable's base name is one of names: with the wall
// time they ran, it says whether a guest's QEMU was busy or starved.
func (n *Node) CPUTime(names ...string) time.Duration {
	var ticks int64
	for _, p := range n.named(names) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
		if err != nil {
			continue
		}
		// The fields after the command's parenthesis start at the state
		// (field 3); utime and stime are fields 14 and 15 (proc(5)).
		_, rest, ok := strings.Cut(string(raw), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 13 {
			continue
		}
		var utime, stime int64
		if _, err := fmt.Sscan(fields[11]+" "+fields[12], &utime, &stime); err == nil {
			ticks += utime + stime
		}
	}
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(ticks) * 10 * time.Millisecond
}

// Kill sends SIGKILL to the node's processes whose executable's base name
// is one of names (QEMU, to crash a guest) and returns their host PIDs.
func (n *Node) Kill(names ...string) []int {
	var pids []int
	for _, p := range n.named(names) {
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err == nil {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

type namedProcess struct {
	pid  int
	args []string
}

func (n *Node) named(names []string) []namedProcess {
	var out []namedProcess
	for _, pid := range n.processes() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if slices.Contains(names, filepath.Base(args[0])) {
			out = append(out, namedProcess{pid: pid, args: args})
		}
	}
	return out
}
