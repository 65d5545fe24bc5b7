#!/usr/bin/env bash
# Creates or deletes a single-node kind cluster with kind's podman provider
# and the node image of hack/kind/node-image.sh (built first when missing).
#
# podman runs with a configuration of our own (CONTAINERS_CONF, in the
# cache) rather than the machine's: no pids limit (kind's nodes run whole
# clusters; podman's default is 2048), and ulimits no higher than podman's
# monitor has (podman's default nofile of 1048576 needs CAP_SYS_RESOURCE,
# which this machine's root lacks). kind
# bind-mounts /lib/modules, which a machine without modules lacks: it is
# created empty.
#
# Needs root (rootful podman).
#
# Usage: hack/kind/cluster.sh create NAME KUBECONFIG
#        hack/kind/cluster.sh delete NAME
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CACHE="${CACHE_ROOT}/kind"

log() { echo "kind-cluster: $*" >&2; }
usage() { log "usage: $0 create NAME KUBECONFIG | delete NAME"; exit 2; }

[[ $# -ge 2 ]] || usage
action="$1" name="$2"
[[ $(id -u) -eq 0 ]] || { log "must run as root (rootful podman)"; exit 1; }

if [[ "${action}" == create ]]; then
  built=$("${HERE}/node-image.sh")
else
  built=$("${HERE}/node-image.sh" kind)
fi
kind=$(sed -n 's/^kind=//p' <<<"${built}")
image=$(sed -n 's/^image=//p' <<<"${built}")
config=$(sed -n 's/^config=//p' <<<"${built}")

mkdir -p "${CACHE}" /lib/modules
conf="${CACHE}/containers.conf"
# The container's process inherits conmon's limits and cannot raise them;
# podman 4.3 starts conmon with this shell's open files and at most 32768
# processes (seen here: 96367 in the shell, 32768 in conmon).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[[ ${nproc} == unlimited || ${nproc} -gt 32768 ]] && nproc=32768
[[ ${nofile} == unlimited ]] && nofile=1048576
cat >"${conf}.tmp" <<EOF
[containers]
pids_limit = 0
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
EOF
mv "${conf}.tmp" "${conf}"
export CONTAINERS_CONF="${conf}" KIND_EXPERIMENTAL_PROVIDER=podman

case "${action}" in
  create)
    [[ $# -eq 3 ]] || usage
    start=${SECONDS}
    log "creating cluster ${name} from ${image}"
    "${kind}" create cluster --name "${name}" --config "${config}" --kubeconfig "$3" --wait 10m >&2
    log "cluster ${name} is up in $((SECONDS - start))s"
    ;;
  delete)
    "${kind}" delete cluster --name "${name}" >&2
    ;;
  *) usage ;;
esac
