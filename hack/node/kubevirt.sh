#!/usr/bin/env bash
# Builds what KubeVirt's node side needs on the real node of test/node
# (make test-node), into the cache outside the checkout, reusing what is
# already there:
#
#   - bin: virt-handler, virt-chroot, virt-launcher, virt-launcher-monitor,
#     virt-probe, virt-tail and virt-freezer from kubevirt.io/kubevirt (the
#     version hack/kubevirt/go.mod pins) with cgo, as upstream builds them:
#     virt-handler's node labeller probes KVM through <linux/kvm.h> and
#     virt-launcher links libvirt (Debian's libvirt-dev, installed when
#     missing); and container-disk, KubeVirt's C helper, linked statically;
#   - rootfs: a Debian trixie root (debootstrap, then apt-get in a chroot)
#     with libvirt, QEMU and the tools virt-launcher and virt-handler run,
#     laid out as KubeVirt's launcher image is (the emulator at
#     /usr/libexec/qemu-kvm, the qemu user 107, KubeVirt's qemu.conf,
#     virtqemud.conf, nsswitch.conf, qemu hook and node-labeller.sh).
#     Debian ships only the monolithic libvirtd; virt-launcher runs
#     /usr/sbin/virtqemud, which Debian's build compiles and leaves out of
#     its packages, so it is built from Debian's own source package of the
#     same libvirt version in a throw-away build root (virtqemud loads the
#     packaged QEMU driver module and links the packaged libvirt.so.0).
#
# Needs root (debootstrap, chroot, file ownership). Nothing is mounted
# outside a private mount namespace (unshare), so nothing is left mounted.
#
# Usage: hack/node/kubevirt.sh
# Prints "bin=<dir>", "rootfs=<dir>" and "images=<dir>" on stdout: the last
# is where test/node keeps the image archives it assembles from the first
# two (named after both, so a new binary or root makes new archives).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
MODULE="${REPO}/hack/kubevirt"
SUITE=trixie
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the launcher image carries besides debootstrap's minbase: libvirt's
# QEMU driver and virsh (node-labeller.sh), QEMU, qemu-img, xorrisofs (the
# cloud-init disk), and the network tools virt-handler and virt-launcher run.
PACKAGES=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils xorriso
  iproute2 nftables iptables procps ca-certificates)

log() { echo "kubevirt-node: $*" >&2; }

[[ $(id -u) -eq 0 ]] || { log "must run as root (debootstrap, chroot)"; exit 1; }

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
[[ -f /usr/include/libvirt/libvirt.h ]] || need+=(libvirt-dev)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || need+=(libc6-dev)
if [[ ${#need[@]} -gt 0 ]]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${need[@]}" >&2; }
fi

version=$(awk '($1 == "kubevirt.io/kubevirt" && $2 ~ /^v/) { print $2; exit }' "${MODULE}/go.mod")
src=$(cd "${MODULE}" && go list -m -f '{{.Dir}}' kubevirt.io/kubevirt)
[[ -d "${src}" ]] || { log "kubevirt.io/kubevirt ${version} is not in the module cache"; exit 1; }

# --- the binaries
bin="${CACHE_ROOT}/bin/kubevirt-node-${version}"
cmds=(virt-handler virt-chroot virt-launcher virt-launcher-monitor virt-probe virt-tail virt-freezer)
bin_stamp=$( (cat "${MODULE}/go.mod" "${MODULE}/go.sum"; go env GOVERSION; echo "${cmds[*]} container-disk") | sha256sum | cut -c1-16)
if [[ "$(cat "${bin}/stamp" 2>/dev/null)" != "${bin_stamp}" ]]; then
  log "building virt-handler, virt-launcher and their helpers ${version} with cgo (about 6 minutes on two cores, cold)"
  start=${SECONDS}
  rm -rf "${bin}.tmp"
  mkdir -p "${bin}.tmp"
  (cd "${MODULE}" && GOFLAGS=-mod=readonly CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "${bin}.tmp/" \
    "${cmds[@]/#/kubevirt.io/kubevirt/cmd/}")
  gcc -static -O2 -o "${bin}.tmp/container-disk" "${src}/cmd/container-disk-v2alpha/main.c"
  {
    echo "kubevirt.io/kubevirt ${version}"
    echo "$(go env GOVERSION), cgo, libvirt-dev $(dpkg-query -W -f '${Version}' libvirt-dev)"
  } >"${bin}.tmp/VERSIONS"
  echo "${bin_stamp}" >"${bin}.tmp/stamp"
  rm -rf "${bin}"
  mv "${bin}.tmp" "${bin}"
  log "built the binaries in $((SECONDS - start))s"
fi

# in_chroot runs a command in a root with /proc mounted in a private mount
# namespace (gone with the command).
in_chroot() {
  local root="$1"
  shift
  unshare --mount --fork sh -c 'mount -t proc proc "$1/proc" && shift && exec chroot "$@"' sh "${root}" "${root}" "$@"
}

# debootstrap_root makes a minbase trixie root and installs packages into it
# with apt-get (bookworm's debootstrap cannot --include trixie's systemd
# dependencies: "systemd pre-depends on libsystemd-shared").
debootstrap_root() {
  local root="$1" logfile="$2"
  shift 2
  debootstrap --variant=minbase "${SUITE}" "${root}" "${MIRROR}" >"${logfile}" 2>&1 ||
    { tail -30 "${logfile}" >&2; return 1; }
  in_chroot "${root}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"${logfile}" 2>&1 ||
    { tail -30 "${logfile}" >&2; return 1; }
}

# --- the root file system
rootfs_key=$( (printf '%s\n' "${SUITE}" "${PACKAGES[@]}" "${version}"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)
rootfs="${CACHE_ROOT}/kubevirt-node/rootfs-${rootfs_key}"
if [[ ! -f "${rootfs}/.done" ]]; then
  start=${SECONDS}
  rm -rf "${rootfs}" "${rootfs}.build"
  mkdir -p "${rootfs}.build"
  log "debootstrap ${SUITE} with libvirt and QEMU (about 4 minutes)"
  debootstrap_root "${rootfs}.build/rootfs" "${rootfs}.build/debootstrap.log" "${PACKAGES[@]}"
  r="${rootfs}.build/rootfs"
  libvirt_version=$(chroot "${r}" dpkg-query -W -f '${Version}' libvirt-daemon)

  # virtqemud from Debian's source package of the same version, built in a
  # copy of the root with the build dependencies added, cached by version.
  virtqemud="${CACHE_ROOT}/kubevirt-node/virtqemud-${libvirt_version}/virtqemud"
  if [[ ! -x "${virtqemud}" ]]; then
    b="${rootfs}.build/virtqemud"
    log "building virtqemud from Debian's libvirt ${libvirt_version} source (build dependencies, configure, one daemon)"
    cp -a "${r}" "${b}"
    echo "deb-src ${MIRROR} ${SUITE} main" >>"${b}/etc/apt/sources.list"
    in_chroot "${b}" sh -ec '
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q
      apt-get build-dep -y -q --no-install-recommends "libvirt='"${libvirt_version}"'"
      apt-get install -y -q --no-install-recommends dpkg-dev
      ver="'"${libvirt_version}"'"
      upstream="${ver%-*}"
      mkdir -p /src && cd /src
      # The mirror serves the tarballs but not the .dsc (404), so apt-get
      # source fetches them and cannot unpack; they are unpacked here and
      # Debian'"'"'s patch series applied, as dpkg-source would.
      apt-get source -q --download-only "libvirt=${ver}" || true
      tar xf "libvirt_${upstream}.orig.tar.xz"
      cd "libvirt-${upstream}"
      tar xf "../libvirt_${ver}.debian.tar.xz"
      for p in $(grep -v "^#" debian/patches/series); do patch -p1 -s <"debian/patches/${p}"; done
      # Debian'"'"'s own meson configuration (debian/rules), then only the daemon.
      debian/rules override_dh_auto_configure
      ninja -C obj-x86_64-linux-gnu src/virtqemud
    ' >"${rootfs}.build/virtqemud.log" 2>&1 || { tail -40 "${rootfs}.build/virtqemud.log" >&2; exit 1; }
    mkdir -p "$(dirname "${virtqemud}")"
    install -m 0755 "${b}/src/libvirt-${libvirt_version%-*}/obj-x86_64-linux-gnu/src/virtqemud" "${virtqemud}.tmp"
    mv "${virtqemud}.tmp" "${virtqemud}"
    rm -rf "${b}"
  fi
  install -m 0755 "${virtqemud}" "${r}/usr/sbin/virtqemud"

  # KubeVirt's launcher image layout (cmd/virt-launcher/BUILD.bazel).
  ln -sf /usr/bin/qemu-system-x86_64 "${r}/usr/libexec/qemu-kvm"
  mkdir -p "${r}/usr/lib64/qemu-kvm" "${r}/etc/libvirt/hooks" "${r}/home/qemu"
  in_chroot "${r}" sh -ec 'groupadd -g 107 qemu && useradd -u 107 -g 107 -d /home/qemu -s /bin/bash qemu'
  chown 107:107 "${r}/home/qemu"
  install -m 0644 "${src}/cmd/virt-launcher/qemu.conf" "${src}/cmd/virt-launcher/virtqemud.conf" "${r}/etc/libvirt/"
  install -m 0644 "${src}/cmd/virt-launcher/nsswitch.conf" "${r}/etc/nsswitch.conf"
  install -m 0755 "${src}/cmd/virt-launcher/qemu" "${r}/etc/libvirt/hooks/qemu"
  install -m 0755 "${src}/cmd/virt-launcher/node-labeller/node-labeller.sh" "${r}/usr/bin/node-labeller.sh"
  # Debian builds its client for the monolithic libvirtd
  # (-Dremote_default_mode=legacy) and virsh without a URI then finds no
  # daemon ("No URI is provided and cannot identify any listening daemon
  # socket path"); node-labeller.sh runs virsh without one. The client talks
  # to virtqemud directly, as KubeVirt's image does.
  printf '%s\n' 'remote_mode = "direct"' 'uri_default = "qemu:///system"' >>"${r}/etc/libvirt/libvirt.conf"
  rm -rf "${r}/var/cache/apt/archives/"*.deb "${r}/var/lib/apt/lists/"*
  {
    echo "debian ${SUITE} (debootstrap minbase): ${PACKAGES[*]}"
    echo "libvirt ${libvirt_version}, virtqemud built from its Debian source"
    echo "qemu $(chroot "${r}" dpkg-query -W -f '${Version}' qemu-system-x86)"
  } >"${rootfs}.build/VERSIONS"
  mv "${rootfs}.build" "${rootfs}"
  touch "${rootfs}/.done"
  log "made the root file system in $((SECONDS - start))s ($(du -sh "${rootfs}/rootfs" | cut -f1))"
fi

echo "bin=${bin}"
echo "rootfs=${rootfs}/rootfs"
images="${CACHE_ROOT}/kubevirt-node/images-$(printf '%s %s' "${bin_stamp}" "${rootfs_key}" | sha256sum | cut -c1-16)"
mkdir -p "${images}"
# Archives of older binaries or roots.
find "${CACHE_ROOT}/kubevirt-node" -maxdepth 1 -name 'images-*' ! -path "${images}" -exec rm -rf {} +
echo "images=${images}"
