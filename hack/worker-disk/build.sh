#!/usr/bin/env bash
# Builds the real-guest worker disk: a Debian bookworm test disk (NOT a Kairos
# image) that boots under QEMU, reads a NoCloud or ConfigDrive seed and runs
# its #cloud-config stages with yip, the stage runner Kairos uses. It carries
# containerd, runc, the CNI plugins and Debian's cloud kernel from Debian
# packages, and kubelet, kubeadm and yip built from their Go modules.
#
# Usage: hack/worker-disk/build.sh [base]
# With `base`, only the debootstrap root file system is made (it can run
# while the Kubernetes binaries build). Otherwise it prints the directory holding disk.img (raw ext4, no partition table),
# vmlinuz and initrd.img. Everything is cached outside the checkout under
# ${KUBEVIRT_WORKERS_CACHE:-~/.cache/kubevirt-workers}/worker-disk and
# rebuilt only when the package list, the binaries or the files under
# hack/worker-disk change. Needs root (debootstrap, file ownership in the
# image); the disk is made with `mke2fs -d`, nothing is mounted.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
SUITE="${WORKER_DISK_SUITE:-bookworm}"
MIRROR="${WORKER_DISK_MIRROR:-http://deb.debian.org/debian}"
DISK_SIZE="${WORKER_DISK_SIZE:-4G}"
PACKAGES=(
  systemd-sysv udev kmod dbus iproute2 iptables conntrack util-linux mount
  containerd runc containernetworking-plugins ca-certificates
  linux-image-cloud-amd64 initramfs-tools
)

log() { echo "worker-disk: $*" >&2; }
# shellcheck source=hack/lib/debian.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib/debian.sh"

[[ $(id -u) -eq 0 ]] || { log "must run as root (debootstrap and image file ownership)"; exit 1; }

# CI machines start without these tools: the disk build needs debootstrap
# and mke2fs, the test/qemu suite (which runs this script first) QEMU and
# xorriso for the seed images.
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v xorriso >/dev/null || need+=(xorriso)
[[ ${#need[@]} -eq 0 ]] || apt_install "${need[@]}"

# The base root file system depends only on the suite and the package list.
base_key=$(printf '%s\n' "${SUITE}" "${MIRROR}" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
base="${CACHE_ROOT}/worker-disk/base-${base_key}"
if [[ ! -f "${base}/.done" ]]; then
  log "debootstrap ${SUITE} (about 1.5 minutes)"
  rm -rf "${base}"
  mkdir -p "${base}"
  debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    "${SUITE}" "${base}/rootfs" "${MIRROR}" >"${base}/debootstrap.log" 2>&1 ||
    { tail -30 "${base}/debootstrap.log" >&2; exit 1; }
  touch "${base}/.done"
fi
[[ "${1:-}" != base ]] || exit 0

bins=$("${REPO}/hack/tools-bins.sh" kubelet kubeadm)
yip=$("${REPO}/hack/tool.sh" yip)

# The disk depends on the base, the binaries and the files shipped here.
disk_key=$( {
  echo "${base_key}" "${DISK_SIZE}"
  sha256sum "${bins}/kubelet" "${bins}/kubeadm" "${yip}" | cut -d' ' -f1
  (cd "${HERE}" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
} | sha256sum | cut -c1-16)
out="${CACHE_ROOT}/worker-disk/disk-${disk_key}"
if [[ -f "${out}/.done" ]]; then
  echo "${out}"
  exit 0
fi

log "assembling the disk in ${out}"
rm -rf "${out}"
mkdir -p "${out}"
rootfs="${out}/rootfs"
cp -a "${base}/rootfs" "${rootfs}"

install -m 0755 "${bins}/kubelet" "${bins}/kubeadm" "${yip}" "${rootfs}/usr/local/bin/"
# Configuration, units and the seed runner, owned by root.
(cd "${HERE}/rootfs" && find . -type f) | while read -r f; do
  mode=0644
  [[ "${f}" == ./usr/local/sbin/* ]] && mode=0755
  install -D -o root -g root -m "${mode}" "${HERE}/rootfs/${f}" "${rootfs}/${f#./}"
done
chroot "${rootfs}" systemctl enable --quiet systemd-networkd.service worker-cloud-config.service containerd.service
# kubelet stays disabled: the join enables it (the rendered stages enable it
# once /etc/kubernetes/kubelet.conf exists), as on a Kairos kubeadm disk.
# No login is needed to debug: the journal goes to the second serial port.
echo "worker" >"${rootfs}/etc/hostname"
printf '/dev/vda / ext4 defaults 0 1\n' >"${rootfs}/etc/fstab"
: >"${rootfs}/etc/machine-id"

kernel=$(cd "${rootfs}/boot" && ls vmlinuz-* | sort -V | tail -1)
cp "${rootfs}/boot/${kernel}" "${out}/vmlinuz"
cp "${rootfs}/boot/initrd.img-${kernel#vmlinuz-}" "${out}/initrd.img"

log "mke2fs -d (${DISK_SIZE})"
mke2fs -q -t ext4 -L worker-root -d "${rootfs}" "${out}/disk.img" "${DISK_SIZE}" >&2
rm -rf "${rootfs}"
{
  echo "suite ${SUITE}"
  echo "kernel ${kernel#vmlinuz-}"
  cat "${bins}/VERSIONS"
  echo "yip $(basename "$(dirname "${yip}")")"
} >"${out}/VERSIONS"
touch "${out}/.done"
# Older disks are superseded; a guest still running keeps its open file.
find "${CACHE_ROOT}/worker-disk" -mindepth 1 -maxdepth 1 -name 'disk-*' ! -name "disk-${disk_key}" -exec rm -rf {} +
echo "${out}"
