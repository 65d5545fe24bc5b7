#!/usr/bin/env bash
# Sourced by the scripts that install Debian packages on this machine or
# build Debian roots (hack/kind, hack/node, hack/worker-disk). They define
# log() first. hack/node/kubevirt.sh keeps its own copies: its root's cache
# key hashes the whole script, and rebuilding that root (virtqemud from
# Debian's source) is long.

# apt_install PACKAGE...: installs Debian packages on this machine (root),
# reading the package lists again when the first try fails: a fresh
# machine's lists may be stale or missing.
apt_install() {
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2; }
}

# in_chroot ROOT COMMAND...: runs a command in a root with /proc mounted in a
# private mount namespace (gone with the command).
in_chroot() {
  local root="$1"
  shift
  unshare --mount --fork sh -c 'mount -t proc proc "$1/proc" && shift && exec chroot "$@"' sh "${root}" "${root}" "$@"
}

# debootstrap_root ROOT SUITE MIRROR LOGFILE PACKAGE...: a minbase Debian
# root, then the packages with apt-get in it (debootstrap's --include cannot
# resolve every suite's dependencies), both at the lowest priority and
# logged to LOGFILE, whose end is shown on failure.
debootstrap_root() {
  local root="$1" suite="$2" mirror="$3" logfile="$4" start=${SECONDS}
  shift 4
  nice -n 19 debootstrap --variant=minbase "${suite}" "${root}" "${mirror}" >"${logfile}" 2>&1 ||
    { tail -30 "${logfile}" >&2; return 1; }
  log "debootstrap done in $((SECONDS - start))s; installing $*"
  in_chroot "${root}" nice -n 19 env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "$@" >>"${logfile}" 2>&1 ||
    { tail -30 "${logfile}" >&2; return 1; }
}
