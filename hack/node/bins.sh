#!/usr/bin/env bash
# Builds what the real node of test/node runs besides the kubelet (which
# hack/tools-bins.sh builds): containerd v2, its runc shim and ctr, from the
# github.com/containerd/containerd/v2 module on the Go module proxy, into the
# cache outside the checkout. Debian bookworm's containerd is 1.6, which
# kubelet 1.36 no longer serves (it needs a CRI runtime of containerd >= 2.0).
#
# CGO is off; the snapshotters that need cgo or kernel features this node does
# not use (btrfs, devmapper, zfs) and tracing are left out by build tags:
# the node uses overlayfs.
#
# Usage: hack/node/bins.sh
# Prints the directory holding containerd, containerd-shim-runc-v2 and ctr on
# stdout. Reuses binaries already built.
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
BIN_DIR="${CACHE_ROOT}/bin/containerd-${CONTAINERD_VERSION}"
BINARIES=(containerd containerd-shim-runc-v2 ctr)

log() { echo "node-bins: $*" >&2; }
# shellcheck source=hack/lib/debian.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib/debian.sh"

# Debian's runc and CNI plugins, installed when missing and when this runs
# as root (a fresh machine has neither; test/node skips with the reason
# when they are still missing).
need=()
[[ -x /usr/sbin/runc ]] || need+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
if [[ ${#need[@]} -gt 0 && $(id -u) -eq 0 ]]; then
  apt_install "${need[@]}"
fi

have_all() {
  local b
  for b in "${BINARIES[@]}"; do
    [[ -x "${BIN_DIR}/${b}" ]] || return 1
  done
}

if ! have_all; then
  mkdir -p "${BIN_DIR}"
  log "downloading github.com/containerd/containerd/v2@${CONTAINERD_VERSION}"
  src=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "github.com/containerd/containerd/v2@${CONTAINERD_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n "${src}" ]] || { log "could not download containerd ${CONTAINERD_VERSION}"; exit 1; }
  log "building ${BINARIES[*]} ${CONTAINERD_VERSION} (a few minutes on two cores)"
  start=${SECONDS}
  out=$(mktemp -d)
  pkgs=()
  for b in "${BINARIES[@]}"; do pkgs+=("./cmd/${b}"); done
  (cd "${src}" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath \
    -tags "no_btrfs no_devmapper no_zfs no_tracing" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION} -X github.com/containerd/containerd/v2/version.Revision=module-proxy" \
    -o "${out}/" "${pkgs[@]}")
  for b in "${BINARIES[@]}"; do mv "${out}/${b}" "${BIN_DIR}/${b}"; done
  rmdir "${out}"
  {
    echo "containerd ${CONTAINERD_VERSION}"
    echo "go $(go env GOVERSION)"
    echo "cgo 0, tags no_btrfs no_devmapper no_zfs no_tracing"
  } >"${BIN_DIR}/VERSIONS"
  log "built ${BINARIES[*]} in $((SECONDS - start))s"
fi
echo "${BIN_DIR}"
