#!/usr/bin/env bash
# Builds kind (sigs.k8s.io/kind, pinned in hack/kind/go.mod) and a kind node
# image for its podman provider, here, without Docker or a registry:
# `kind build node-image` drives the docker CLI and pulls its base image and
# the control-plane images, so the image is assembled as that command would
# leave it, from
#
#   - kind's own base files (images/base/files in kind's module: the
#     entrypoint, /kind/bin, the containerd and kubelet units, containerd's
#     configuration) and the steps of its base Dockerfile, on a Debian
#     bookworm root (debootstrap minbase, then the Dockerfile's packages;
#     trixie's systemd refuses this machine's cgroup v1 hierarchy);
#   - containerd v2 (hack/node/bins.sh), Debian's runc and CNI plugins, and
#     kubelet, kubeadm and kubectl of the tests' release (hack/tools-bins.sh,
#     hack/tool.sh);
#   - the control-plane images (kube-apiserver, kube-controller-manager,
#     kube-scheduler, kube-proxy, etcd, CoreDNS, pause) written as OCI
#     archives from the same binaries (test/kindnode) under kvw.local, not
#     registry.k8s.io, and imported into the node's containerd store without
#     unpacking and pinned, as kind's build does (`ctr images import
#     --no-unpack` with the CRI's pinned label): the node's containerd
#     unpacks them when a Pod first runs one.
#
# It writes beside the image the kind cluster configuration that names
# those images for kubeadm (test/kindnode's ClusterConfig): single node,
# with the static bridge network the image carries in place of kindnet,
# which is not on the module proxy.
#
# Needs root (debootstrap, chroot, podman). Caches under
# ${KUBEVIRT_WORKERS_CACHE:-~/.cache/kubevirt-workers}/kind.
#
# Usage: hack/kind/node-image.sh [kind]
# Prints "kind=<binary>", "image=<name>" and "config=<cluster.yaml>" on
# stdout; with "kind", builds and prints only kind.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CACHE="${CACHE_ROOT}/kind"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.36.3}"
# kind's base Dockerfile's packages, less nfs-common and open-iscsi (no
# storage of those kinds here) and fuse-overlayfs (rootless only), plus
# Debian's runc and CNI plugins (kind builds both from source).
PACKAGES=(systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz
  e2fsprogs bash ca-certificates curl jq procps runc containernetworking-plugins)

log() { echo "kind-node: $*" >&2; }
# shellcheck source=hack/lib/debian.sh
source "${HERE}/../lib/debian.sh"

[[ $(id -u) -eq 0 ]] || { log "must run as root (debootstrap, chroot, podman)"; exit 1; }
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v podman >/dev/null || need+=(podman)
command -v jq >/dev/null || need+=(jq)
[[ ${#need[@]} -eq 0 ]] || apt_install "${need[@]}"
mkdir -p "${CACHE}"

# --- kind itself, from its pinned module.
kind_version=$(cd "${HERE}" && go list -m -f '{{.Version}}' sigs.k8s.io/kind)
kind_src=$(cd "${HERE}" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
[[ -d "${kind_src}" ]] || { (cd "${HERE}" && go mod download sigs.k8s.io/kind); kind_src=$(cd "${HERE}" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind); }
kind_bin="${CACHE}/kind-${kind_version}"
if [[ ! -x "${kind_bin}" ]]; then
  start=${SECONDS}
  (cd "${HERE}" && CGO_ENABLED=0 nice -n 19 go build -o "${kind_bin}.tmp" sigs.k8s.io/kind)
  mv "${kind_bin}.tmp" "${kind_bin}"
  log "built kind ${kind_version} in $((SECONDS - start))s"
fi
if [[ "${1:-}" == kind ]]; then
  echo "kind=${kind_bin}"
  exit 0
fi

# --- what goes into the node besides the root.
k8s_bin=$("${REPO}/hack/tools-bins.sh" envtest kubeadm controller-manager kubelet scheduler proxy coredns)
containerd_bin=$("${REPO}/hack/node/bins.sh")
kubectl=$("${REPO}/hack/tool.sh" kubectl)
etcd_version=$(sed -n 's/^etcd //p' "${k8s_bin}/VERSIONS")
coredns_version=$(sed -n 's/^coredns //p' "${k8s_bin}/VERSIONS")
[[ -n "${etcd_version}" && -n "${coredns_version}" ]] || { log "${k8s_bin}/VERSIONS names no etcd or CoreDNS release"; exit 1; }

# --- the root file system, keyed by what goes into it.
root_key=$( (printf '%s\n' "${SUITE}" "${PACKAGES[@]}" "${kind_version}"; sed -n '/^# --- the root file system/,/^# --- end of the root file system/p' "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)
root="${CACHE}/root-${root_key}"
if [[ ! -f "${root}/.done" ]]; then
  start=${SECONDS}
  rm -rf "${root}" "${root}.build"
  mkdir -p "${root}.build"
  r="${root}.build/rootfs"
  logfile="${root}.build/debootstrap.log"
  log "debootstrap ${SUITE} (2 to 8 minutes)"
  debootstrap_root "${r}" "${SUITE}" "${MIRROR}" "${logfile}" "${PACKAGES[@]}"
  # kind's base files with the modes its Dockerfile gives them.
  base="${kind_src}/images/base/files"
  install -D -m 0755 -t "${r}/usr/local/bin" "${base}"/usr/local/bin/*
  mkdir -p "${r}/kind/bin" "${r}/etc/systemd/system/kubelet.service.d" "${r}/etc/containerd" "${r}/etc/default" "${r}/etc/sysctl.d"
  install -m 0644 "${base}/kind/README.txt" "${r}/kind/"
  install -m 0755 -t "${r}/kind/bin" "${base}"/kind/bin/*
  install -m 0644 "${base}/etc/crictl.yaml" "${r}/etc/"
  install -m 0644 -t "${r}/etc/containerd" "${base}"/etc/containerd/*
  install -m 0644 -t "${r}/etc/default" "${base}"/etc/default/*
  install -m 0644 -t "${r}/etc/sysctl.d" "${base}"/etc/sysctl.d/*
  install -m 0644 -t "${r}/etc/systemd/system" "${base}"/etc/systemd/system/*.service "${base}"/etc/systemd/system/*.slice
  install -m 0644 -t "${r}/etc/systemd/system/kubelet.service.d" "${base}"/etc/systemd/system/kubelet.service.d/*
  # The Dockerfile's clean-up and units.
  find "${r}/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
  rm -f "${r}"/lib/systemd/system/multi-user.target.wants/* "${r}"/etc/systemd/system/*.wants/* \
    "${r}"/lib/systemd/system/local-fs.target.wants/* "${r}"/lib/systemd/system/sockets.target.wants/*udev* \
    "${r}"/lib/systemd/system/sockets.target.wants/*initctl* "${r}"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"${r}/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "${r}/sbin/init"
  in_chroot "${r}" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >>"${logfile}" 2>&1
  in_chroot "${r}" systemctl mask systemd-binfmt.service >>"${logfile}" 2>&1
  mkdir -p "${r}/etc/kubernetes/manifests"
  # kind's CNI plugins live in /opt/cni/bin; Debian's in /usr/lib/cni.
  mkdir -p "${r}/opt/cni/bin"
  for p in bridge host-local loopback portmap ptp; do
    ln -sf "/usr/lib/cni/${p}" "${r}/opt/cni/bin/${p}"
  done
  rm -rf "${r}/var/cache/apt/archives/"*.deb "${r}/var/lib/apt/lists/"* "${r}/usr/share/doc/"* "${r}/usr/share/man/"*
  {
    echo "debian ${SUITE} (debootstrap minbase): ${PACKAGES[*]}"
    echo "runc $(chroot "${r}" dpkg-query -W -f '${Version}' runc)"
    echo "containernetworking-plugins $(chroot "${r}" dpkg-query -W -f '${Version}' containernetworking-plugins)"
    echo "kind base files: sigs.k8s.io/kind ${kind_version}"
  } >"${root}.build/VERSIONS"
  mv "${root}.build" "${root}"
  touch "${root}/.done"
  log "made the root in $((SECONDS - start))s ($(du -sh "${root}/rootfs" | cut -f1))"
  find "${CACHE}" -maxdepth 1 -name 'root-*' ! -path "${root}" -exec rm -rf {} +
fi
# --- end of the root file system

# --- the control-plane images, from the binaries (kube-proxy's on the root,
# for its iptables).
images_key=$( (cd "${k8s_bin}" && sha256sum kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns
  echo "${root_key}"; cat "${REPO}"/test/kindnode/*.go "${REPO}"/test/ociimage/ociimage.go "${REPO}"/test/node/cmd/pause/*.go) | sha256sum | cut -c1-16)
images="${CACHE}/images-${images_key}"
if [[ ! -f "${images}/.done" ]]; then
  start=${SECONDS}
  rm -rf "${images}"
  mkdir -p "${images}"
  (cd "${REPO}" && CGO_ENABLED=0 go build -tags node -trimpath -ldflags "-s -w" -o "${images}/pause" ./test/node/cmd/pause)
  (cd "${REPO}" && go run ./test/kindnode/cmd/write-images -bin "${k8s_bin}" -pause "${images}/pause" \
    -iptables-root "${root}/rootfs" -kubernetes-version "${KUBERNETES_VERSION}" -etcd-version "${etcd_version}" \
    -coredns-version "${coredns_version}" -out "${images}") >"${images}/list"
  touch "${images}/.done"
  log "wrote $(wc -l <"${images}/list") image archives in $((SECONDS - start))s ($(du -sh "${images}" | cut -f1))"
  find "${CACHE}" -maxdepth 1 -name 'images-*' ! -path "${images}" -exec rm -rf {} +
fi

# --- the node image: the root, the binaries and the images in its
# containerd store, imported into podman.
node_key=$( (echo "${root_key} ${images_key}"; cat "${containerd_bin}/VERSIONS"; sha256sum "${kubectl}" "${k8s_bin}/kubelet" "${k8s_bin}/kubeadm"; sed -n '/^# --- the node image/,$p' "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)
image="localhost/kindest/node:${KUBERNETES_VERSION}-${node_key}"
config="${CACHE}/cluster-${node_key}.yaml"
if ! podman image exists "${image}" || [[ ! -f "${config}" ]]; then
  start=${SECONDS}
  work="${CACHE}/node.build"
  rm -rf "${work}"
  mkdir -p "${work}"
  n="${work}/rootfs"
  cp -a "${root}/rootfs" "${n}"
  install -m 0755 -t "${n}/usr/local/bin" "${containerd_bin}/containerd" "${containerd_bin}/containerd-shim-runc-v2" "${containerd_bin}/ctr"
  install -m 0755 -t "${n}/usr/bin" "${k8s_bin}/kubelet" "${k8s_bin}/kubeadm" "${kubectl}"
  echo "${KUBERNETES_VERSION}" >"${n}/kind/version"
  # The Dockerfile's runtime spec: ctr's default with kind's hook that
  # mounts the product files, without rlimits.
  "${containerd_bin}/ctr" oci spec |
    jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' >"${n}/etc/containerd/cri-base.json"
  # A static bridge network for a single-node cluster, in place of kindnet.
  mkdir -p "${n}/etc/cni/net.d"
  cat >"${n}/etc/cni/net.d/10-bridge.conflist" <<'CNI'
{
  "cniVersion": "1.0.0",
  "name": "kind-bridge",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
  # The images, into the node's store: a containerd of our own on the
  # node's /var/lib/containerd, its sockets and state in the work
  # directory, the CRI plugin off (nothing runs; only content is written).
  state="${work}/containerd"
  mkdir -p "${state}"
  cat >"${state}/config.toml" <<TOML
version = 3
root = "${n}/var/lib/containerd"
state = "${state}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"]
[grpc]
  address = "${state}/containerd.sock"
[ttrpc]
  address = "${state}/containerd.sock.ttrpc"
TOML
  "${containerd_bin}/containerd" --config "${state}/config.toml" >"${work}/containerd.log" 2>&1 &
  containerd_pid=$!
  trap 'kill ${containerd_pid} 2>/dev/null || true' EXIT
  for _ in $(seq 60); do
    [[ -S "${state}/containerd.sock" ]] && break
    sleep 0.5
  done
  while read -r archive _; do
    "${containerd_bin}/ctr" --address "${state}/containerd.sock" --namespace k8s.io images import \
      --label=io.cri-containerd.pinned=pinned --no-unpack --digests "${archive}" >>"${work}/import.log" 2>&1 ||
      { tail -20 "${work}/import.log" "${work}/containerd.log" >&2; exit 1; }
  done <"${images}/list"
  kill "${containerd_pid}"
  wait "${containerd_pid}" || true
  trap - EXIT
  rm -rf "${state}"
  log "imported $(wc -l <"${images}/list") images into the node's containerd"
  tar -C "${n}" --numeric-owner --xattrs --xattrs-include='security.capability' -cf - . |
    podman import --quiet \
      --change 'ENV container=docker' \
      --change 'STOPSIGNAL SIGRTMIN+3' \
      --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
      - "${image}" >/dev/null
  (cd "${REPO}" && go run ./test/kindnode/cmd/write-images -etcd-version "${etcd_version}" \
    -coredns-version "${coredns_version}" -node-image "${image}") >"${config}.tmp"
  mv "${config}.tmp" "${config}"
  rm -rf "${work}"
  log "made ${image} in $((SECONDS - start))s"
  # Node images of an earlier build (one a cluster still runs stays).
  podman images --format '{{.Repository}}:{{.Tag}}' localhost/kindest/node | grep -vxF "${image}" |
    xargs -r podman rmi >/dev/null 2>&1 || true
  find "${CACHE}" -maxdepth 1 -name 'cluster-*.yaml' ! -path "${config}" -delete
fi
echo "kind=${kind_bin}"
echo "image=${image}"
echo "config=${config}"
