#!/usr/bin/env bash
# Sourced by the scripts that build Debian roots (hack/node/cdi.sh,
# hack/kind/node-image.sh; hack/node/kubevirt.sh keeps its own copy: its
# root's cache key hashes the whole script, and rebuilding that root (virtqemud from Debian's source) is long).

# in_chroot ROOT COMMAND...: runs a command in a root with /proc mounted in a
# private mount namespace (gone with the command).
in_chroot() {
  local root="$1"
  shift
  unshare --mount --fork sh -c 'mount -t proc proc "$1/proc" && shift && exec chroot "$@"' sh "${root}" "${root}" "$@"
}
