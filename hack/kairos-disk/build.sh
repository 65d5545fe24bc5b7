#!/usr/bin/env bash
# Builds a Kairos worker disk from Kairos's own components, so that the
# bootstrap provider's cloud-config can one day be tested on a real Kairos
# system instead of the Debian test disk of hack/worker-disk (which only runs
# our stages with yip). Kairos publishes its images as containers and its
# binaries as GitHub releases; neither is reachable here, only the Go module
# proxy and the Debian mirror are, so the disk is made as kairos-init makes a
# Kairos image from a distribution root, with everything built locally:
#
#  1. kairos-agent and immucore built from the modules pinned in
#     hack/kairos-disk/go.mod (CGO_ENABLED=0), placed where kairos-init's
#     pkg/bundled embeds them (its Makefile downloads release binaries), and
#     kairos-init built from a writable copy of its pinned module's source;
#  2. a Debian bookworm root (debootstrap; kairos-init's CI converts Debian 12
#     and 13, and bookworm is what hack/worker-disk ships, so containerd, runc
#     and the CNI plugins are the same packages), converted by kairos-init in
#     a chroot: it installs Kairos's package set, the kernel and dracut,
#     writes immucore's dracut module and builds the initramfs with it; then
#     kubelet and kubeadm from hack/tools-bins.sh, as the Debian disk has them;
#  3. the disk laid out as Kairos's installer (kairos-agent's InstallAction)
#     lays it out for BIOS on GPT: a BIOS boot partition, COS_OEM, COS_STATE
#     holding the active image /cOS/active.img (an ext4 image of the root,
#     label COS_ACTIVE) and COS_PERSISTENT, each partition made with
#     `mke2fs -d` and written into a GPT disk at its offset (this machine's
#     kernel has no device-mapper, so no loop devices or kpartx);
#  4. grub2 for BIOS, from the image's own Debian packages (grub-pc-bin,
#     which kairos-init installs), as the installer's `grub-install
#     --target=i386-pc --boot-directory=<COS_STATE>` puts it: boot.img in the
#     protective MBR, core.img in the BIOS boot partition, the i386-pc modules
#     and the unicode font under COS_STATE's /grub, and kairos-init's
#     /etc/cos/grub.cfg copied to /grub/grub.cfg. Its first entry
#     loopback-mounts /cOS/active.img from COS_STATE, sources the image's
#     /etc/cos/bootargs.cfg for the command line and boots the image's
#     /boot/vmlinuz and /boot/initrd. SeaBIOS (QEMU's and KubeVirt's default
#     firmware) boots it.
#
# Where it differs from Kairos's installer:
#  - grub-install is not run (it needs a block device): the same steps are
#    done on the image file. core.img is made with grub-mkimage in a chroot
#    of the root, and written with its block list and boot.img's kernel
#    sector set as grub-bios-setup sets them. Its embedded configuration
#    finds COS_STATE by label, where grub-install embeds the file system's
#    UUID; either finds the same partition.
#  - No recovery partition (COS_RECOVERY and its image): the recovery, reset
#    and remote recovery entries of grub.cfg have nothing to boot, and
#    grub's fallback to them is never reached while the active image boots.
#    No EFI system partition either: KubeVirt boots container disks through
#    SeaBIOS unless a VM asks for EFI.
#  - The installer adds the terminal it runs on to the command line; there
#    is none here, so the guest gets bootargs.cfg's alone (console=ttyS0
#    console=tty1: systemd's messages go to tty1, the kernel's to both).
#
# Usage: hack/kairos-disk/build.sh [bins|base|root]
# `bins` only builds the three binaries, `base` only the debootstrap root
# (they can run at the same time), `root` stops after kairos-init.
# Otherwise it prints the directory holding disk.img, the bootable disk
# (the name test/qemu's Disk reads), and VERSIONS. Everything is cached under
# ${KUBEVIRT_WORKERS_CACHE:-~/.cache/kubevirt-workers}/kairos-disk, keyed by
# its inputs. Needs root (debootstrap, chroot, file ownership in the images).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CACHE="${CACHE_ROOT}/kairos-disk"
SUITE=bookworm
MIRROR="${KAIROS_DISK_MIRROR:-http://deb.debian.org/debian}"
# What the worker needs beyond Kairos's own package set (which kairos-init
# installs): the container runtime and the CNI plugins, as on the Debian disk.
PACKAGES=(
  systemd-sysv udev dbus kmod ca-certificates
  containerd runc containernetworking-plugins iptables conntrack
)
# The Kairos version written to /etc/kairos-release (kairos-init requires
# one); the agent reads it for upgrades, which this disk does not do.
KAIROS_VERSION="${KAIROS_DISK_VERSION:-v0.0.1}"
# Partition sizes (MiB). The state partition holds the active image and room
# for the passive one an upgrade would write; neither grows here.
# The BIOS boot partition holds core.img, 1 MiB as the installer makes it.
BIOS_MB=1
OEM_MB=64
PERSISTENT_MB=1024

log() { echo "kairos-disk: $*" >&2; }

[[ $(id -u) -eq 0 ]] || { log "must run as root (debootstrap, chroot, image file ownership)"; exit 1; }

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
command -v sfdisk >/dev/null || need+=(fdisk)
if [[ ${#need[@]} -gt 0 ]]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${need[@]}" >&2; }
fi
mkdir -p "${CACHE}"

# --- the Debian root (step 2 needs it; it does not need the binaries) ------------------------------------------------------
base_key=$(printf '%s\n' "${SUITE}" "${MIRROR}" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
base="${CACHE}/base-${base_key}"
if [[ "${1:-}" != bins && ! -f "${base}/.done" ]]; then
  start=${SECONDS}
  log "debootstrap ${SUITE}"
  rm -rf "${base}"
  mkdir -p "${base}"
  nice -n 19 debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    "${SUITE}" "${base}/rootfs" "${MIRROR}" >"${base}/debootstrap.log" 2>&1 ||
    { tail -30 "${base}/debootstrap.log" >&2; exit 1; }
  touch "${base}/.done"
  log "debootstrap took $((SECONDS - start))s"
fi
[[ "${1:-}" != base ]] || { echo "${base}"; exit 0; }

# --- 1. kairos-agent, immucore, kairos-init ---------------------------------
mod_version() { (cd "${HERE}" && go list -m -f '{{.Version}}' "$1"); }
mod_dir() { (cd "${HERE}" && GOFLAGS=-mod=mod go mod download -json "$1@$(mod_version "$1")" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); }
AGENT_VERSION=$(mod_version github.com/kairos-io/kairos-agent/v2)
IMMUCORE_VERSION=$(mod_version github.com/kairos-io/immucore)
INIT_VERSION=$(mod_version github.com/kairos-io/kairos-init)
bins_key=$( {
  go env GOVERSION
  sha256sum "${HERE}/go.mod" "${HERE}/go.sum" | cut -d' ' -f1
} | sha256sum | cut -c1-16)
bins="${CACHE}/bins-${bins_key}"
if [[ ! -f "${bins}/.done" ]]; then
  start=${SECONDS}
  rm -rf "${bins}"
  mkdir -p "${bins}"
  log "building kairos-agent ${AGENT_VERSION} and immucore ${IMMUCORE_VERSION} (CGO_ENABLED=0; several minutes on two cores)"
  # The version variables the projects' goreleaser sets, so that
  # `kairos-agent version` and immucore's log name the release built.
  (cd "${HERE}" && CGO_ENABLED=0 nice -n 19 go build -trimpath -o "${bins}/immucore" \
    -ldflags "-s -w -X github.com/kairos-io/immucore/internal/version.version=${IMMUCORE_VERSION}" \
    github.com/kairos-io/immucore)
  (cd "${HERE}" && CGO_ENABLED=0 nice -n 19 go build -trimpath -o "${bins}/kairos-agent" \
    -ldflags "-s -w -X github.com/kairos-io/kairos-agent/v2/internal/common.VERSION=${AGENT_VERSION}" \
    github.com/kairos-io/kairos-agent/v2)
  log "building kairos-init ${INIT_VERSION} with them embedded"
  src="${bins}/kairos-init-src"
  cp -r "$(mod_dir github.com/kairos-io/kairos-init)" "${src}"
  chmod -R u+w "${src}"
  b="${src}/pkg/bundled/binaries"
  mkdir -p "${b}/fips"
  cp "${bins}/kairos-agent" "${bins}/immucore" "${b}/"
  # The other embeds are for what this disk does not use: the kcrypt
  # discovery plugin (encrypted partitions with a remote KMS), the
  # provider-kairos and edgevpn binaries of the "standard" variant (a core
  # image installs neither), the interactive installer and the FIPS builds.
  # They are empty files so that the package compiles; kairos-init still
  # writes the challenger and installer (empty) into the image.
  for f in kcrypt-discovery-challenger provider-kairos kairos-installer edgevpn \
    fips/kairos-agent fips/immucore fips/kcrypt-discovery-challenger fips/provider-kairos; do
    : >"${b}/${f}"
  done
  printf 'kairos-agent: %s\nimmucore: %s\n' "${AGENT_VERSION}" "${IMMUCORE_VERSION}" >"${b}/version-info.yaml"
  (cd "${src}" && GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 19 go build -trimpath -o "${bins}/kairos-init" \
    -ldflags "-s -w -X github.com/kairos-io/kairos-init/pkg/values.version=${INIT_VERSION}" .)
  rm -rf "${src}"
  printf 'kairos-agent %s\nimmucore %s\nkairos-init %s\n' "${AGENT_VERSION}" "${IMMUCORE_VERSION}" "${INIT_VERSION}" >"${bins}/VERSIONS"
  touch "${bins}/.done"
  log "built the Kairos binaries in $((SECONDS - start))s"
fi
[[ "${1:-}" != bins ]] || { echo "${bins}"; exit 0; }


# --- 2. kairos-init on the Debian root, then the worker's binaries ---------
k8s=$("${REPO}/hack/tools-bins.sh" kubelet kubeadm)
# Files of the Debian test disk the worker needs as well: containerd with
# systemd cgroups, the bridge CNI configuration, the kubelet unit and
# kubeadm's drop-in, and the journal on the second serial port. Not its
# modules-load.d and sysctl.d files: the Kairos core image loads neither
# br_netfilter nor overlay and leaves ip_forward off, and it is the
# bootstrap provider's rendering that must set them, as on a real image.
WORKER_FILES=(
  etc/containerd/config.toml
  etc/cni/net.d/10-bridge.conflist
  etc/systemd/system/kubelet.service
  etc/systemd/system/kubelet.service.d/10-kubeadm.conf
  etc/systemd/journald.conf.d/debug-serial.conf
)
# The converted root (the long part: about a quarter of an hour on two
# busy cores, most of it the base packages and kairos-init's dracut run)
# is cached on its own, keyed by the base, the binaries and the version,
# so that a change to what follows does not redo it.
root_key=$(echo "${base_key}" "${bins_key}" "${KAIROS_VERSION}" | sha256sum | cut -c1-16)
root="${CACHE}/root-${root_key}"
# A run that was killed may have left the chroot's mounts behind: detach
# them first, and never let rm cross into a mount (/dev is the host's).
unmount_under() { grep -o " $1/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true; }
if [[ ! -f "${root}/.done" ]]; then
  unmount_under "${root}"
  rm -rf --one-file-system "${root}"
  mkdir -p "${root}"
  cp -a "${base}/rootfs" "${root}/rootfs"
  rootfs="${root}/rootfs"
  # kairos-init runs apt, systemctl, depmod and dracut, which need /proc,
  # /sys and /dev; they are bind mounts, unmounted however the script ends.
  mounted=()
  cleanup() {
    local m
    for ((m = ${#mounted[@]} - 1; m >= 0; m--)); do umount -l "${mounted[m]}" 2>/dev/null || true; done
    mounted=()
  }
  trap cleanup EXIT
  for m in proc sys dev; do
    mkdir -p "${rootfs}/${m}"
    mount --rbind "/${m}" "${rootfs}/${m}"
    mount --make-rslave "${rootfs}/${m}"
    mounted+=("${rootfs}/${m}")
  done
  # /run is a tmpfs of its own, so nothing written there stays in the image.
  # Once systemd-resolved is installed /etc/resolv.conf points into it, so
  # the host's resolver is put there too for apt.
  mount -t tmpfs tmpfs "${rootfs}/run"
  mounted+=("${rootfs}/run")
  mkdir -p "${rootfs}/run/systemd/resolve"
  cp /etc/resolv.conf "${rootfs}/run/systemd/resolve/stub-resolv.conf"
  cp /etc/resolv.conf "${rootfs}/run/systemd/resolve/resolv.conf"
  rm -f "${rootfs}/etc/resolv.conf"
  cp /etc/resolv.conf "${rootfs}/etc/resolv.conf"
  # Packages' maintainer scripts must not start daemons in the chroot.
  printf '#!/bin/sh\nexit 101\n' >"${rootfs}/usr/sbin/policy-rc.d"
  chmod 0755 "${rootfs}/usr/sbin/policy-rc.d"
  install -m 0755 "${bins}/kairos-init" "${rootfs}/kairos-init"
  start=${SECONDS}
  log "kairos-init ${INIT_VERSION} in the chroot: Kairos's packages, the kernel, dracut and the initramfs (log: ${root}/kairos-init.log)"
  # INITRD=No makes Debian's kernel hook (/etc/kernel/postinst.d/dracut)
  # skip the initramfs it builds for each kernel install and update; that
  # one is thrown away anyway (kairos-init removes every initrd, then
  # builds /boot/initrd with immucore's module).
  chroot "${rootfs}" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive INITRD=No \
    nice -n 19 /kairos-init --version "${KAIROS_VERSION}" >"${root}/kairos-init.log" 2>&1 &
  init_pid=$!
  # A progress line a minute: the stage kairos-init is in and the last
  # step it started (its log colours stripped).
  while kill -0 "${init_pid}" 2>/dev/null; do
    sleep 60
    kill -0 "${init_pid}" 2>/dev/null || break
    stage=$(sed 's/\x1b\[[0-9;]*m//g' "${root}/kairos-init.log" | grep -o 'Running stage: [^ ]*' | tail -1 || true)
    step=$(sed 's/\x1b\[[0-9;]*m//g' "${root}/kairos-init.log" | grep -o "Processing stage step '[^']*'" | tail -1 || true)
    log "kairos-init: $((SECONDS - start))s, ${stage:-starting}${step:+, ${step}}"
  done
  if ! wait "${init_pid}"; then
    tail -40 "${root}/kairos-init.log" >&2
    log "kairos-init failed after $((SECONDS - start))s"
    exit 1
  fi
  log "kairos-init took $((SECONDS - start))s"
  rm -f "${rootfs}/kairos-init" "${rootfs}/usr/sbin/policy-rc.d"
  cleanup
  touch "${root}/.done"
fi
[[ "${1:-}" != root ]] || { echo "${root}"; exit 0; }

disk_key=$( {
  echo "${root_key}"
  sha256sum "${k8s}/kubelet" "${k8s}/kubeadm" "${HERE}/build.sh" | cut -d' ' -f1
  (cd "${REPO}/hack/worker-disk/rootfs" && sha256sum "${WORKER_FILES[@]}")
} | sha256sum | cut -c1-16)
out="${CACHE}/disk-${disk_key}"
if [[ -f "${out}/.done" ]]; then
  echo "${out}"
  exit 0
fi
unmount_under "${out}"
rm -rf --one-file-system "${out}"
mkdir -p "${out}"
log "assembling the disk in ${out}"
rootfs="${out}/rootfs"
cp -a "${root}/rootfs" "${rootfs}"

# /usr/local is where Kairos mounts COS_PERSISTENT, hiding whatever the image
# has there: the binaries go to /usr/bin and the units name that path.
install -m 0755 "${k8s}/kubelet" "${k8s}/kubeadm" "${rootfs}/usr/bin/"
# A converted root cached by this script before it was cached apart
# (b9e9345) also holds the worker files of that time, among them the
# modules-load.d and sysctl.d files the disk must not have (see above).
rm -f "${rootfs}/etc/modules-load.d/kubernetes.conf" "${rootfs}/etc/sysctl.d/90-kubernetes.conf"
for f in "${WORKER_FILES[@]}"; do
  install -D -o root -g root -m 0644 "${REPO}/hack/worker-disk/rootfs/${f}" "${rootfs}/${f}"
done
sed -i 's#/usr/local/bin/kubelet#/usr/bin/kubelet#' \
  "${rootfs}/etc/systemd/system/kubelet.service" "${rootfs}/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
chroot "${rootfs}" systemctl enable --quiet containerd.service
# The host's resolver was only for apt: Kairos resolves with systemd-resolved.
rm -f "${rootfs}/etc/resolv.conf"
ln -sf ../run/systemd/resolve/stub-resolv.conf "${rootfs}/etc/resolv.conf"

# The kernel kairos-init linked as /boot/vmlinuz (grub loads it and
# /boot/initrd from the active image), for VERSIONS.
# The link is absolute: resolve it inside the root, not on the host.
kernel=$(readlink "${rootfs}/boot/vmlinuz" || echo /boot/vmlinuz)
[[ "${kernel}" == /* ]] || kernel="/boot/${kernel}"
kernel_version=$(file -bL "${rootfs}${kernel}" | sed -n 's/.*version \([^ ]*\).*/\1/p')

# --- 4. grub, from the image's own grub-pc-bin: its files first, since
# COS_STATE is made with them (step 3), then core.img and boot.img onto the
# disk once it is laid out.
# What grub-install puts on COS_STATE (its --boot-directory): the modules
# and their lists, the font grub.cfg loads, and kairos-init's grub.cfg.
grub_lib="${rootfs}/usr/lib/grub/i386-pc"
[[ -f "${grub_lib}/boot.img" && -f "${rootfs}/etc/cos/grub.cfg" && -f "${rootfs}/etc/cos/bootargs.cfg" ]] ||
  { log "the root has no grub-pc-bin or no /etc/cos/grub.cfg and bootargs.cfg (kairos-init installs them)"; exit 1; }
mkdir -p "${out}/state/grub/i386-pc" "${out}/state/grub/fonts"
cp "${grub_lib}"/*.mod "${grub_lib}"/*.lst "${out}/state/grub/i386-pc/"
cp "${rootfs}/usr/share/grub/unicode.pf2" "${out}/state/grub/fonts/"
install -m 0644 "${rootfs}/etc/cos/grub.cfg" "${out}/state/grub/grub.cfg"
cp "${grub_lib}/boot.img" "${out}/boot.img"
# core.img: the modules that reach COS_STATE (BIOS disks, GPT, ext4, the
# search command), and a configuration that finds it by its label and
# loads the rest from /grub there. Made by the image's grub-mkimage, in
# its /tmp, which is emptied before the active image is made.
cat >"${rootfs}/tmp/early.cfg" <<'EOF'
search --no-floppy --label --set=root COS_STATE
set prefix=($root)/grub
EOF
chroot "${rootfs}" grub-mkimage -O i386-pc -d /usr/lib/grub/i386-pc -p /grub -c /tmp/early.cfg \
  -o /tmp/core.img biosdisk part_gpt ext2 search
mv "${rootfs}/tmp/core.img" "${out}/core.img"
grub_version=$(chroot "${rootfs}" grub-mkimage --version | awk '{print $NF}')
rm -f "${rootfs}/tmp/early.cfg"
log "grub: core.img of $(stat -c %s "${out}/core.img") bytes, $(find "${out}/state/grub/i386-pc" -name '*.mod' | wc -l) modules"

# --- 3. the disk ---------------------------------------------------------------
# The active image: ext4 labelled COS_ACTIVE, which immucore loop-mounts
# read-only as the root. The root plus a quarter, in MiB.
# The mount points kairos-agent's installer creates in the image it writes
# (CreateDirStructure): the image is read-only at boot, so immucore cannot
# make /oem itself, and without it COS_OEM, the user data and every layout
# step after it fail.
install -d -m 0755 "${rootfs}/run" "${rootfs}/dev" "${rootfs}/boot" "${rootfs}/usr/local" "${rootfs}/oem"
install -d -m 0555 "${rootfs}/proc" "${rootfs}/sys"
install -d -m 1777 "${rootfs}/tmp"
root_mb=$(du -sm "${rootfs}" | cut -f1)
active_mb=$((root_mb + root_mb / 4 + 128))
log "active image: ${root_mb} MiB of root in a ${active_mb} MiB ext4 image"
mkdir -p "${out}/state/cOS"
mke2fs -q -t ext4 -L COS_ACTIVE -d "${rootfs}" "${out}/state/cOS/active.img" "${active_mb}M" >&2
rm -rf --one-file-system "${rootfs}"
# COS_STATE holds the active image and room for the passive one an upgrade
# would write; COS_OEM starts empty (the user data is cached there at boot);
# so does COS_PERSISTENT (immucore fills its bind-mounted paths).
state_mb=$((2 * active_mb + 256))
mke2fs -q -t ext4 -L COS_STATE -d "${out}/state" "${out}/state.part" "${state_mb}M" >&2
rm -rf "${out}/state"
mke2fs -q -t ext4 -L COS_OEM "${out}/oem.part" "${OEM_MB}M" >&2
mke2fs -q -t ext4 -L COS_PERSISTENT "${out}/persistent.part" "${PERSISTENT_MB}M" >&2
# GPT, 1 MiB aligned, in Kairos's order (bios, oem, state, persistent; the
# installer's recovery partition would come before state). Nothing is
# mounted or attached to a loop device: each partition is written at its
# offset.
bios_start=1
oem_start=$((bios_start + BIOS_MB))
state_start=$((oem_start + OEM_MB))
persistent_start=$((state_start + state_mb))
disk_mb=$((persistent_start + PERSISTENT_MB + 1))
rm -f "${out}/disk.img"
truncate -s "${disk_mb}M" "${out}/disk.img"
printf '%s\n' \
  "start=${bios_start}MiB, size=${BIOS_MB}MiB, type=21686148-6449-6E6F-744E-656564454649, name=bios" \
  "start=${oem_start}MiB, size=${OEM_MB}MiB, type=linux, name=oem" \
  "start=${state_start}MiB, size=${state_mb}MiB, type=linux, name=state" \
  "start=${persistent_start}MiB, size=${PERSISTENT_MB}MiB, type=linux, name=persistent" |
  sfdisk -q --label gpt "${out}/disk.img" >&2
for p in oem:${oem_start} state:${state_start} persistent:${persistent_start}; do
  dd if="${out}/${p%%:*}.part" of="${out}/disk.img" bs=1M seek="${p##*:}" conv=notrunc,sparse status=none
  rm -f "${out}/${p%%:*}.part"
done

# --- 4, continued: grub onto the disk --------------------------------------
# boot.img and core.img into the MBR and the BIOS boot partition, as
# grub-bios-setup writes them (util/setup.c) when it embeds core.img there:
#  - core.img's first sector (diskboot.img) ends with a block list of the
#    sectors that follow it: grub-mkimage writes their count and start 2
#    (core.img right after the MBR); the start becomes the sector after
#    core.img's first;
#  - boot.img's first 440 bytes replace the protective MBR's code (the disk
#    identifier and partition table after them stay), with the sector of
#    core.img at 0x5c, the boot drive 0xff at 0x64 (the one the BIOS passes)
#    and the check at 0x66 for BIOSes that pass a wrong drive made no-ops,
#    as for any hard disk.
# le64 N: N as eight little-endian bytes, in printf %b escapes.
le64() { local i; for ((i = 0; i < 8; i++)); do printf '\\x%02x' $(($1 >> (8 * i) & 255)); done; }
# le OFFSET COUNT FILE: the COUNT little-endian bytes of FILE at OFFSET.
le() { od -An -j "$1" -N "$2" -t "u$2" "$3" | tr -d ' '; }
core_sector=$((bios_start * 2048))
core_bytes=$(stat -c %s "${out}/core.img")
((core_bytes <= BIOS_MB * 1024 * 1024)) ||
  { log "core.img (${core_bytes} bytes) does not fit the ${BIOS_MB} MiB BIOS boot partition"; exit 1; }
[[ $(le 500 8 "${out}/core.img") == 2 && $(le 508 2 "${out}/core.img") == $(((core_bytes - 1) / 512)) ]] ||
  { log "core.img's block list is not grub-mkimage's (start 2, $(((core_bytes - 1) / 512)) sectors): not grub 2.06's layout"; exit 1; }
dd if="${out}/core.img" of="${out}/disk.img" bs=512 seek="${core_sector}" conv=notrunc status=none
printf '%b' "$(le64 $((core_sector + 1)))" | dd of="${out}/disk.img" bs=1 seek=$((core_sector * 512 + 500)) conv=notrunc status=none
dd if="${out}/boot.img" of="${out}/disk.img" bs=440 count=1 conv=notrunc status=none
printf '%b' "$(le64 "${core_sector}")" | dd of="${out}/disk.img" bs=1 seek=$((0x5c)) conv=notrunc status=none
printf '\xff' | dd of="${out}/disk.img" bs=1 seek=$((0x64)) conv=notrunc status=none
printf '\x90\x90' | dd of="${out}/disk.img" bs=1 seek=$((0x66)) conv=notrunc status=none
rm -f "${out}/core.img" "${out}/boot.img"
{
  echo "suite ${SUITE}"
  cat "${bins}/VERSIONS"
  cat "${k8s}/VERSIONS"
  echo "kernel ${kernel_version}"
  echo "grub ${grub_version}"
} >"${out}/VERSIONS"
touch "${out}/.done"
# Older disks are superseded; a guest still running keeps its open file.
find "${CACHE}" -mindepth 1 -maxdepth 1 -name 'disk-*' ! -name "disk-${disk_key}" -exec rm -rf --one-file-system {} +
echo "${out}"
