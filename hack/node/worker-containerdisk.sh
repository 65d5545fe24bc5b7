#!/usr/bin/env bash
# Wraps the real-guest worker disk (hack/worker-disk/build.sh: a raw ext4
# root file system booted with its own kernel and initramfs by QEMU's
# -kernel) as a disk KubeVirt can boot from a container disk: virt-launcher
# starts the guest through SeaBIOS, so the disk needs a partition table and
# a boot loader. Made without mounting anything:
#
#   - partition 1: a FAT file system (mkfs.vfat, mtools) with SYSLINUX
#     (`syslinux --install` writes to the unmounted image), the disk's own
#     kernel and initramfs, and a syslinux.cfg booting
#     root=LABEL=worker-root console=ttyS0;
#   - partition 2: the worker disk's ext4 file system unchanged but two files
#     written with debugfs: /etc/fstab names the root by its label (the
#     QEMU tier's /dev/vda is the whole disk there), and journald forwards to
#     ttyS0, the one serial port a KubeVirt guest has (the QEMU tier's guests
#     have a second one for the journal);
#   - SYSLINUX's MBR, partition 1 active; converted to qcow2 (no backing
#     file), the file layout KubeVirt's container-disk contract takes: one
#     disk image under /disk/, readable by the qemu user (107).
#
# With `kairos`, it packs the Kairos disk of hack/kairos-disk/build.sh
# instead: that one is bootable as it is (GPT, grub in its BIOS boot
# partition, as Kairos installs it), so it is only converted and laid out.
#
# Usage: hack/node/worker-containerdisk.sh [kairos]
# Prints the directory whose tree is the image's layer (disk/worker.qcow2),
# cached under ${KUBEVIRT_WORKERS_CACHE:-~/.cache/kubevirt-workers}/kubevirt-node
# by the disk and this script. Needs root (the disks' builds).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
BOOT_SIZE_MIB=64

log() { echo "worker-containerdisk: $*" >&2; }
# shellcheck source=hack/lib/debian.sh
source "${REPO}/hack/lib/debian.sh"
# shellcheck source=hack/lib/containerdisk.sh
source "${REPO}/hack/lib/containerdisk.sh"

need=()
command -v syslinux >/dev/null || need+=(syslinux)
[[ -f /usr/lib/syslinux/mbr/mbr.bin ]] || need+=(syslinux-common)
command -v mcopy >/dev/null || need+=(mtools)
command -v mkfs.vfat >/dev/null || need+=(dosfstools)
command -v sfdisk >/dev/null || need+=(fdisk)
command -v debugfs >/dev/null || need+=(e2fsprogs)
command -v qemu-img >/dev/null || need+=(qemu-utils)
[[ ${#need[@]} -eq 0 ]] || apt_install "${need[@]}"

if [[ "${1:-}" == kairos ]]; then
  disk=$("${REPO}/hack/kairos-disk/build.sh")
  key=$( (basename "${disk}"; cat "${BASH_SOURCE[0]}" "${REPO}/hack/lib/containerdisk.sh") | sha256sum | cut -c1-16)
  out="${CACHE_ROOT}/kubevirt-node/kairos-containerdisk-${key}"
  if [[ ! -f "${out}/.done" ]]; then
    start=${SECONDS}
    log "packing the Kairos disk ${disk}"
    rm -rf "${out}"
    mkdir -p "${out}/work" "${out}/layer/disk"
    cp --sparse=always "${disk}/disk.img" "${out}/work/disk.raw"
    pack_containerdisk "${out}/work/disk.raw" "${out}/layer/disk/worker.qcow2"
    rm -rf "${out}/work"
    cp "${disk}/VERSIONS" "${out}/VERSIONS"
    touch "${out}/.done"
    log "made $(du -h "${out}/layer/disk/worker.qcow2" | cut -f1) in $((SECONDS - start))s"
    find "${CACHE_ROOT}/kubevirt-node" -mindepth 1 -maxdepth 1 -name 'kairos-containerdisk-*' ! -name "kairos-containerdisk-${key}" -exec rm -rf {} +
  fi
  echo "${out}/layer"
  exit 0
fi

disk=$("${REPO}/hack/worker-disk/build.sh")
key=$( (basename "${disk}"; cat "${BASH_SOURCE[0]}" "${REPO}/hack/lib/containerdisk.sh") | sha256sum | cut -c1-16)
out="${CACHE_ROOT}/kubevirt-node/worker-containerdisk-${key}"
if [[ -f "${out}/.done" ]]; then
  echo "${out}/layer"
  exit 0
fi

start=${SECONDS}
log "making a bootable disk from ${disk}"
rm -rf "${out}"
mkdir -p "${out}/work" "${out}/layer/disk"
w="${out}/work"

# The root partition: the worker disk's file system with its fstab and
# journald's serial port changed.
cp --sparse=always "${disk}/disk.img" "${w}/root.img"
printf 'LABEL=worker-root / ext4 defaults 0 1\n' >"${w}/fstab"
printf '%s\n' '# The journal goes to the one serial port a KubeVirt guest has.' \
  '[Journal]' 'ForwardToConsole=yes' 'TTYPath=/dev/ttyS0' 'MaxLevelConsole=info' >"${w}/debug-serial.conf"
debugfs -w -f - "${w}/root.img" >"${w}/debugfs.log" 2>&1 <<EOF
rm /etc/fstab
write ${w}/fstab /etc/fstab
rm /etc/systemd/journald.conf.d/debug-serial.conf
write ${w}/debug-serial.conf /etc/systemd/journald.conf.d/debug-serial.conf
EOF
for f in /etc/fstab /etc/systemd/journald.conf.d/debug-serial.conf; do
  debugfs -R "cat ${f}" "${w}/root.img" 2>/dev/null | grep -q . ||
    { cat "${w}/debugfs.log" >&2; log "debugfs did not write ${f}"; exit 1; }
done

# The boot partition.
cat >"${w}/syslinux.cfg" <<'EOF'
DEFAULT worker
PROMPT 0
TIMEOUT 0
SERIAL 0 115200
LABEL worker
  KERNEL /vmlinuz
  INITRD /initrd.img
  APPEND root=LABEL=worker-root rw console=ttyS0 panic=-1
EOF
mkfs.vfat -n WORKERBOOT -C "${w}/boot.img" $((BOOT_SIZE_MIB * 1024)) >/dev/null
syslinux --install "${w}/boot.img"
mcopy -i "${w}/boot.img" "${disk}/vmlinuz" "${disk}/initrd.img" "${w}/syslinux.cfg" ::/

# The whole disk: MBR, 1 MiB gap, boot, root.
root_bytes=$(stat -c %s "${w}/root.img")
total=$(( (1 + BOOT_SIZE_MIB) * 1024 * 1024 + root_bytes ))
truncate -s "${total}" "${w}/disk.raw"
sfdisk --quiet "${w}/disk.raw" <<EOF
label: dos
start=2048, size=$((BOOT_SIZE_MIB * 2048)), type=c, bootable
start=$(( (1 + BOOT_SIZE_MIB) * 2048 )), type=83
EOF
dd if=/usr/lib/syslinux/mbr/mbr.bin of="${w}/disk.raw" bs=440 count=1 conv=notrunc status=none
dd if="${w}/boot.img" of="${w}/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="${w}/root.img" of="${w}/disk.raw" bs=1M seek=$((1 + BOOT_SIZE_MIB)) conv=notrunc,sparse status=none
pack_containerdisk "${w}/disk.raw" "${out}/layer/disk/worker.qcow2"
rm -rf "${w}"
cp "${disk}/VERSIONS" "${out}/VERSIONS"
touch "${out}/.done"
log "made $(du -h "${out}/layer/disk/worker.qcow2" | cut -f1) in $((SECONDS - start))s"
# Older wrappings are superseded.
find "${CACHE_ROOT}/kubevirt-node" -mindepth 1 -maxdepth 1 -name 'worker-containerdisk-*' ! -name "worker-containerdisk-${key}" -exec rm -rf {} +
echo "${out}/layer"
