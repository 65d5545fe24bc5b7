#!/usr/bin/env bash
# Loads OCI image archives into every node of a kind cluster of
# hack/kind/cluster.sh, as the real node of test/node imports them:
# `ctr images import` into the CRI's namespace, for the node's platform,
# under the names the archives give.
#
# Not `kind load image-archive`: it imports with `--digests`, which adds an
# `import-<date>@sha256:...` name for each manifest. For an image a Pod
# names by digest alone (a worker container disk pinned as a WorkerPlatform
# pins it), containerd's CRI then resolved the image to that extra name and
# the Pod failed with `image "docker.io/library/import-..." not found`
# until containerd restarted.
#
# Needs root (rootful podman). Usage: hack/kind/load.sh NAME ARCHIVE...
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CACHE="${CACHE_ROOT}/kind"

log() { echo "kind-load: $*" >&2; }
[[ $# -ge 2 ]] || { log "usage: $0 NAME ARCHIVE..."; exit 2; }
name="$1"
shift
[[ $(id -u) -eq 0 ]] || { log "must run as root (rootful podman)"; exit 1; }
# cluster.sh wrote podman's configuration when it created the cluster.
[[ -f "${CACHE}/containers.conf" ]] || { log "no ${CACHE}/containers.conf: create the cluster with hack/kind/cluster.sh"; exit 1; }
export CONTAINERS_CONF="${CACHE}/containers.conf" KIND_EXPERIMENTAL_PROVIDER=podman

kind=$("${HERE}/node-image.sh" kind | sed -n 's/^kind=//p')
mapfile -t nodes < <("${kind}" get nodes --name "${name}")
[[ ${#nodes[@]} -gt 0 ]] || { log "cluster ${name} has no nodes"; exit 1; }
for archive in "$@"; do
  for node in "${nodes[@]}"; do
    start=${SECONDS}
    podman exec -i "${node}" ctr --namespace k8s.io images import --platform linux/amd64 - <"${archive}" >&2
    log "loaded $(basename "$(dirname "${archive}")")/$(basename "${archive}") into ${node} in $((SECONDS - start))s"
  done
done
