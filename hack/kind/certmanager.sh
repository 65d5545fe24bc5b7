#!/usr/bin/env bash
# Installs cert-manager into a kind cluster of hack/kind/cluster.sh as its
# Helm chart does for the default values, from images built here: the
# controller and cainjector from cert-manager's Go module
# (hack/tools-bins.sh cert-manager, the module hack/certmanager), their
# CRDs from the module's deploy/crds, and their Deployments, ServiceAccounts,
# Services and RBAC rendered from the module's chart by Helm's engine
# (hack/certmanager/chart) in the namespace cert-manager, with the chart's
# imageRegistry set to kvw.local. Nothing is pulled: the images are loaded
# into the node under the names the chart gives them.
#
# Not installed: the webhook, which only validates and defaults
# cert-manager's own objects (the CRDs' schemas still apply), and the
# chart's startupapicheck Job, a Helm hook that waits for the webhook. The
# ACME HTTP01 solver's image, which the controller names in its arguments
# and runs only for ACME challenges, is not built.
#
# Needs root (podman). Usage: hack/kind/certmanager.sh NAME KUBECONFIG
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CACHE="${CACHE_ROOT}/kind"
MODULE="${REPO}/hack/certmanager"
NAMESPACE=cert-manager

log() { echo "kind-certmanager: $*" >&2; }
[[ $# -eq 2 ]] || { log "usage: $0 NAME KUBECONFIG"; exit 2; }
name="$1"
export KUBECONFIG="$2"
[[ $(id -u) -eq 0 ]] || { log "must run as root (podman)"; exit 1; }

kubectl=$("${REPO}/hack/tool.sh" kubectl)
start=${SECONDS}
bin=$("${REPO}/hack/tools-bins.sh" cert-manager)
version=$(awk '($1 == "github.com/cert-manager/cert-manager" && $2 ~ /^v/) { print $2; exit }' "${MODULE}/go.mod")
chart_module=$(cd "${MODULE}" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
log "cert-manager ${version} built in $((SECONDS - start))s"

# --- the images.
start=${SECONDS}
images="${CACHE}/certmanager-images-$( (cd "${bin}" && sha256sum cert-manager-controller cert-manager-cainjector; cat "${REPO}"/test/kindnode/*.go) | sha256sum | cut -c1-16)"
mkdir -p "${images}"
list=$(cd "${REPO}" && go run ./test/kindnode/cmd/certmanager-images -bin "${bin}" -version "${version}" -out "${images}")
find "${CACHE}" -maxdepth 1 -name 'certmanager-images-*' ! -path "${images}" -exec rm -rf {} +
mapfile -t archives < <(cut -d' ' -f1 <<<"${list}")
"${HERE}/load.sh" "${name}" "${archives[@]}"
log "images ready and loaded in $((SECONDS - start))s"

# --- the chart's objects, rendered by Helm's engine.
manifest="${CACHE}/cert-manager-$(cat "${MODULE}/go.mod" "${MODULE}/chart/go.mod" "${MODULE}/chart/go.sum" "${MODULE}/chart/main.go" | sha256sum | cut -c1-16).yaml"
if [[ ! -f "${manifest}" ]]; then
  start=${SECONDS}
  (cd "${MODULE}/chart" && go run . -chart "${chart_module}/deploy/charts/cert-manager" -version "${version}" \
    -registry kvw.local -namespace "${NAMESPACE}" -out "${manifest}.tmp")
  mv "${manifest}.tmp" "${manifest}"
  find "${CACHE}" -maxdepth 1 -name 'cert-manager-*.yaml' ! -path "${manifest}" -delete
  log "chart rendered in $((SECONDS - start))s"
fi

start=${SECONDS}
"${kubectl}" apply --server-side -f "${chart_module}/deploy/crds" >&2
"${kubectl}" wait -f "${chart_module}/deploy/crds" --for=condition=Established --timeout=2m >&2
"${kubectl}" create namespace "${NAMESPACE}" --dry-run=client -o yaml | "${kubectl}" apply --server-side -f - >&2
"${kubectl}" apply --server-side -f "${manifest}" >&2
log "waiting for the controller and cainjector to be Available"
"${kubectl}" -n "${NAMESPACE}" wait deployment/cert-manager deployment/cert-manager-cainjector --for=condition=Available --timeout=5m >&2
log "cert-manager is Available in $((SECONDS - start))s"
