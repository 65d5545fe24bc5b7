#!/usr/bin/env bash
# Sourced by hack/node/worker-containerdisk.sh, which defines log() first:
# packs a bootable raw disk as KubeVirt's container-disk contract takes it.

# pack_containerdisk RAW QCOW2: converts the raw disk RAW (an MBR or GPT
# disk; its MBR's disk identifier is changed) to the qcow2 file QCOW2 (no
# backing file), in a directory of its own under the image's /disk/,
# readable by the qemu user (107) that virt-launcher runs QEMU as.
#
# KubeVirt v1.7.0's virt-handler writes the CRC-32 of a container disk's
# file into the instance's status (volumeStatus[].containerDiskVolume.checksum,
# a uint32), which the VirtualMachineInstance CRD declares int32 and
# kube-apiserver v1.36 range-checks: for a file whose CRC-32 is 2^31 or more
# every status update of the instance is refused and it stays Scheduled
# (docs/testing.md). The MBR's disk identifier (bytes 440-443; nothing
# reads it: the partitions are found by label, and a GPT disk's own
# identifier is in its header) is counted up until the qcow2 file's CRC-32,
# read from gzip's trailer, is below 2^31: about two tries.
pack_containerdisk() {
  local raw="$1" qcow2="$2" id crc
  crc32() { gzip -1 -c "$1" | tail -c 8 | head -c 4 | od -An -tu4 | tr -d ' '; }
  for ((id = 0; ; id++)); do
    printf '%b' "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((id & 255)) $((id >> 8 & 255)) $((id >> 16 & 255)) $((id >> 24 & 255)))" |
      dd of="${raw}" bs=1 seek=440 count=4 conv=notrunc status=none
    qemu-img convert -f raw -O qcow2 "${raw}" "${qcow2}"
    crc=$(crc32 "${qcow2}")
    ((crc < 2147483648)) && break
    ((id < 64)) || { log "no disk identifier up to ${id} gave a CRC-32 below 2^31"; return 1; }
  done
  log "disk identifier 0x$(printf %08x "${id}"), CRC-32 ${crc}"
  chown 107:107 "$(dirname "${qcow2}")" "${qcow2}"
  chmod 0555 "$(dirname "${qcow2}")"
  chmod 0444 "${qcow2}"
}
