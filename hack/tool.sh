#!/usr/bin/env bash
# Installs a pinned Go tool into the cache outside the checkout and prints its
# path. Usage: hack/tool.sh controller-gen|golangci-lint|yip|clusterctl|kustomize
set -euo pipefail

CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CONTROLLER_TOOLS_VERSION="${CONTROLLER_TOOLS_VERSION:-v0.20.0}"
GOLANGCI_LINT_VERSION="${GOLANGCI_LINT_VERSION:-v2.15.0}"
YIP_VERSION="${YIP_VERSION:-v1.24.0}"
CLUSTER_API_VERSION="${CLUSTER_API_VERSION:-v1.14.2}"
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.0}"

install() {
  local name="$1" pkg="$2" version="$3"
  local dir="${CACHE_ROOT}/tools/${name}-${version}"
  if [[ ! -x "${dir}/${name}" ]]; then
    echo "tool: installing ${pkg}@${version}" >&2
    mkdir -p "${dir}"
    GOFLAGS=-mod=mod GOBIN="${dir}" go install "${pkg}@${version}" >&2
  fi
  echo "${dir}/${name}"
}

case "${1:-}" in
  controller-gen) install controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "${CONTROLLER_TOOLS_VERSION}" ;;
  golangci-lint) install golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "${GOLANGCI_LINT_VERSION}" ;;
  yip) install yip github.com/mudler/yip "${YIP_VERSION}" ;;
  clusterctl) install clusterctl sigs.k8s.io/cluster-api/cmd/clusterctl "${CLUSTER_API_VERSION}" ;;
  kustomize) install kustomize sigs.k8s.io/kustomize/kustomize/v5 "${KUSTOMIZE_VERSION}" ;;
  *) echo "usage: $0 controller-gen|golangci-lint|yip|clusterctl|kustomize" >&2; exit 2 ;;
esac
