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
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// writeConfigs writes containerd's, the CNI network's and the kubelet's
// configuration and the kubelet's kubeconfig into the node's directory.
func (n *Node) writeConfigs() error {
	containerd := fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
# opt writes /opt/containerd on the host; NRI is not used.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]

[plugins.'io.containerd.server.v1.grpc']
  address = %[3]q

[plugins.'io.containerd.server.v1.ttrpc']
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  # Nothing is ever pulled: the sandbox image is imported and pinned.
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Without CAP_SYS_RESOURCE (this machine) runc cannot lower a container's
  # oom_score_adj below containerd's (the kubelet asks -998 for sandboxes):
  # "nsexec: failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[6]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
`, n.path("containerd", "root"), n.path("containerd", "state"), n.path("containerd", "containerd.sock"),
		n.path("containerd", "containerd.sock.ttrpc"), PauseImage, runcPath, cniBinDir, n.path("cni", "net.d"))
	if err := os.WriteFile(n.path("containerd.toml"), []byte(containerd), 0o600); err != nil {
		return err
	}

	// A bridge inside the node's network namespace; no masquerading (pods
	// reach nothing beyond the node), so no iptables rule either. The
	// bridge is the pods' default route: the kubernetes Service's address
	// is one of the node's.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kvw-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "kvw0",
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.opts.PodCIDR, n.path("cni", "ipam"))
	if err := os.WriteFile(n.path("cni", "net.d", "10-kvw-node.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}

	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These cgroups are v1 plus a v2 mount (hybrid), which kubelet 1.36 refuses
# unless told (KEP-5573); PID 1 is not systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
failSwapOn: false
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
podLogsDir: /var/log/pods
volumePluginDir: %[4]s
resolvConf: ""
# A cluster's DNS Service and domain, as every cluster's kubelets have them
# (CoreDNS answers there once DeployDNS ran, on a node with kube-proxy).
# Without them the kubelet gives pods "search .", and virt-launcher's DHCP
# server then panics: "failed to run DHCP Server: Search domain is not
# valid: '.'".
clusterDomain: cluster.local
clusterDNS: [%[5]s]
registerNode: true
serializeImagePulls: false
# Every image is imported, none can be pulled: one the image garbage
# collector removes never comes back. On the shared machine the disk once
# passed the default 85 %% and the kubelet removed the worker disk's and
# CDI's cloner and upload server images before a clone needed them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
`, n.cgroupName, n.path("containerd", "containerd.sock"), n.NodeIP, n.path("volume-plugins"), n.opts.ClusterDNS)
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(kubelet), 0o600); err != nil {
		return err
	}
	if n.kubeProxy != "" {
		if err := n.writeKubeProxyConfig(); err != nil {
			return err
		}
	}
	return envtest.WriteKubeconfig(n.path("kubelet.kubeconfig"), n.Name, n.opts.Config)
}

type cgroupMount struct {
	dir     string
	options string
}

// cgroupMounts lists this machine's cgroup hierarchies (v1) and the cgroup2
// mount, if any.
func cgroupMounts() (v1 []cgroupMount, v2 string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, ""
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 {
			continue
		}
		switch fields[sep+1] {
		case "cgroup":
			v1 = append(v1, cgroupMount{dir: unescapeMount(fields[4]), options: fields[sep+3]})
		case "cgroup2":
			v2 = unescapeMount(fields[4])
		}
	}
	return v1, v2
}

func cgroupV1Mounts() []cgroupMount { v1, _ := cgroupMounts(); return v1 }
func cgroupV2Mount() string         { _, v2 := cgroupMounts(); return v2 }

// createCgroups makes the kubelet's cgroup root in every v1 hierarchy (the
// kubelet checks it exists); everything it and runc create sits below it.
func (n *Node) createCgroups() error {
	for _, m := range cgroupV1Mounts() {
		dir := filepath.Join(m.dir, n.cgroupName)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) { //nolint:gosec // A cgroup, as the kubelet makes them.
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if strings.Contains(","+m.options+",", ",cpuset,") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(m.dir, f)) //nolint:gosec // cgroupfs.
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil { //nolint:gosec // cgroupfs files.
					return fmt.Errorf("writing %s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// cgroupsLeft lists the node's cgroups in every hierarchy.
func (n *Node) cgroupsLeft() []string {
	v1, v2 := cgroupMounts()
	dirs := make([]string, 0, len(v1)+1)
	for _, m := range v1 {
		dirs = append(dirs, m.dir)
	}
	if v2 != "" {
		dirs = append(dirs, v2)
	}
	var left []string
	for _, d := range dirs {
		root := filepath.Join(d, n.cgroupName)
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				left = append(left, p)
			}
			return nil
		})
	}
	return left
}

// removeCgroups removes the node's cgroups, deepest first; the ones still
// holding a process stay and are reported.
func (n *Node) removeCgroups() error {
	left := n.cgroupsLeft()
	sort.Slice(left, func(i, j int) bool { return len(left[i]) > len(left[j]) })
	for _, d := range left {
		_ = os.Remove(d)
	}
	if left := n.cgroupsLeft(); len(left) > 0 {
		return fmt.Errorf("cgroups left: %v", left)
	}
	return nil
}

// processes lists the node's processes (host PIDs): those in its PID
// namespace, their descendants (containers run in PID namespaces of their
// own) and any process in one of its cgroups.
func (n *Node) processes() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	mine := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil { //nolint:gosec // procfs.
			// pid (comm) state ppid ...: comm may hold spaces and parentheses.
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
		if n.pidNS != "" {
			if link, err := os.Readlink(filepath.Join(dir, "ns", "pid")); err == nil && link == n.pidNS {
				mine[pid] = true
			}
		}
		if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil && bytes.Contains(cg, []byte("/"+n.cgroupName+"/")) { //nolint:gosec // procfs.
			mine[pid] = true
		}
	}
	var pids []int
	for pid := range parent {
		for p, hops := pid, 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if mine[p] || (n.initPID != 0 && p == n.initPID) {
				pids = append(pids, pid)
				break
			}
		}
	}
	sort.Ints(pids)
	return pids
}

// mountsUnder lists this mount namespace's mounts at or below dir.
func mountsUnder(dir string) []string { return mountsIn("/proc/self/mountinfo", dir) }

// mountsIn lists the mounts of a mountinfo file at or below dir.
func mountsIn(mountinfo, dir string) []string {
	raw, err := os.ReadFile(mountinfo) //nolint:gosec // procfs.
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMount(fields[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// hostState is what a node must leave as it found it on the host.
type hostState struct {
	iptables string
	paths    map[string]bool
	links    string
	sysctls  map[string]string
}

// hostPaths are where containerd, the kubelet and CNI write by default;
// inside the node they are the node's own directories.
var hostPaths = []string{"/run/containerd", "/run/netns", "/var/run/netns", "/var/lib/kubelet", "/var/lib/containerd",
	"/var/lib/cni", "/var/log/containers", "/var/log/pods", "/opt/containerd", "/etc/cni", "/etc/containerd",
	"/usr/libexec/kubernetes", "/run/nri", "/var/run/nri"}

func snapshotHost() hostState {
	s := hostState{paths: map[string]bool{}, sysctls: map[string]string{}}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		out, err := exec.Command(save).Output() //nolint:noctx,gosec // iptables-save or ip6tables-save; ends on its own.
		if err != nil {
			s.iptables += save + ": " + err.Error() + "\n"
			continue
		}
		// Counters and the generation comments change on their own.
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			if i := strings.Index(line, " ["); strings.HasPrefix(line, ":") && i > 0 {
				line = line[:i]
			}
			s.iptables += line + "\n"
		}
	}
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		s.paths[p] = err == nil
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil { //nolint:noctx // Ends on its own.
		var names []string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				names = append(names, strings.TrimSuffix(f[1], ":"))
			}
		}
		s.links = strings.Join(names, " ")
	}
	for _, k := range append(slices.Collect(maps.Keys(kernelSettings)), hostKernelSettings...) {
		v, _ := os.ReadFile("/proc/sys/" + k) //nolint:gosec // procfs.
		s.sysctls[k] = strings.TrimSpace(string(v))
	}
	return s
}

// hostKernelSettings are kernel settings that are the host's whichever
// namespace writes them, which a node must leave: conntrack's table size,
// which kube-proxy sets unless told not to.
var hostKernelSettings = []string{"net/netfilter/nf_conntrack_max"}

func (s hostState) compare(now hostState) []error {
	var errs []error
	if s.iptables != now.iptables {
		errs = append(errs, fmt.Errorf("host iptables rules changed:\nbefore:\n%s\nafter:\n%s", s.iptables, now.iptables))
	}
	for p, was := range s.paths {
		if !was && now.paths[p] {
			errs = append(errs, fmt.Errorf("host path %s left behind", p))
		}
	}
	if s.links != now.links {
		errs = append(errs, fmt.Errorf("host network links changed: before %q, after %q", s.links, now.links))
	}
	for k, v := range s.sysctls {
		if now.sysctls[k] != v {
			errs = append(errs, fmt.Errorf("host sysctl %s changed from %s to %s", k, v, now.sysctls[k]))
		}
	}
	return errs
}

// sweepLeftovers removes what nodes of earlier runs left when their test
// process was killed before Stop (a go test timeout, say): their
// directories under the temporary directory and their cgroups, once no
// process runs from such a directory. A cgroup that still holds a process
// cannot be removed and stays.
func sweepLeftovers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "kvw-node-*"))
	live := map[string]bool{}
	for _, d := range dirs {
		if processMentions(d) || len(mountsUnder(d)) > 0 {
			live[filepath.Base(d)] = true
			continue
		}
		_ = os.RemoveAll(d)
	}
	v1, v2 := cgroupMounts()
	roots := make([]string, 0, len(v1)+1)
	for _, m := range v1 {
		roots = append(roots, m.dir)
	}
	if v2 != "" {
		roots = append(roots, v2)
	}
	for _, root := range roots {
		groups, _ := filepath.Glob(filepath.Join(root, "kvw-node-*"))
		for _, g := range groups {
			// kvw-node-<name>-<suffix of the node's directory>
			suffix := g[strings.LastIndex(g, "-")+1:]
			if live["kvw-node-"+suffix] {
				continue
			}
			var all []string
			_ = filepath.WalkDir(g, func(p string, e fs.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
			for _, d := range all {
				_ = os.Remove(d)
			}
		}
	}
}

// processMentions says whether a process's command line names dir.
func processMentions(dir string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(raw), dir+"/") {
			return true
		}
	}
	return false
}

// PodMemoryPeak is the peak memory use (bytes) of a pod's cgroup on this
// node, as the cgroup v1 memory controller counts it
// (memory.max_usage_in_bytes: page cache included), or 0 when the pod has
// no memory cgroup (yet).
func (n *Node) PodMemoryPeak(uid types.UID) int64 {
	v1, _ := cgroupMounts()
	for _, m := range v1 {
		if !strings.Contains(","+m.options+",", ",memory,") {
			continue
		}
		var peak int64
		_ = filepath.WalkDir(filepath.Join(m.dir, n.cgroupName), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil //nolint:nilerr // A cgroup gone while walking: the walk goes on.
			}
			if !e.IsDir() || filepath.Base(p) != "pod"+string(uid) {
				return nil
			}
			raw, err := os.ReadFile(filepath.Join(p, "memory.max_usage_in_bytes")) //nolint:gosec // The node's own cgroup.
			if err == nil {
				_, _ = fmt.Sscan(string(raw), &peak)
			}
			return filepath.SkipDir
		})
		return peak
	}
	return 0
}
