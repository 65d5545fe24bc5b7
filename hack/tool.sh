#!/usr/bin/env bash
# Installs a pinned Go tool into the cache outside the checkout and prints its
# path. Usage: hack/tool.sh controller-gen|golangci-lint|yip|clusterctl|kubectl|kustomize|govulncheck|vulndb
set -euo pipefail

CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CONTROLLER_TOOLS_VERSION="${CONTROLLER_TOOLS_VERSION:-v0.20.0}"
GOLANGCI_LINT_VERSION="${GOLANGCI_LINT_VERSION:-v2.15.0}"
YIP_VERSION="${YIP_VERSION:-v1.25.1}"
CLUSTER_API_VERSION="${CLUSTER_API_VERSION:-v1.14.2}"
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.0}"
# kubectl of the Kubernetes release the tests run (k8s.io/kubectl v0.X.Y is
# Kubernetes v1.X.Y).
KUBECTL_VERSION="${KUBECTL_VERSION:-v0.36.3}"
GOVULNCHECK_VERSION="${GOVULNCHECK_VERSION:-v1.9.0}"
# The Cluster API operator Cozystack installs providers with. It pins its
# own Cluster API, controller-runtime and Kubernetes modules (v1.13,
# v0.23, v0.35), so it is built in a module of its own, never from ours.
CLUSTER_API_OPERATOR_VERSION="${CLUSTER_API_OPERATOR_VERSION:-v0.29.0}"
# The Go vulnerability database as a module: vuln.go.dev is not reachable
# from every machine, the module proxy is, and a pinned snapshot makes the
# scan's verdict depend on the commit alone. Bump it to learn of new
# vulnerabilities.
VULNDB_VERSION="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"

install() {
  local name="$1" pkg="$2" version="$3" variant="${4:-}"
  local dir="${CACHE_ROOT}/tools/${name}-${version}${variant:+-${variant}}"
  if [[ ! -x "${dir}/${name}" ]]; then
    echo "tool: installing ${pkg}@${version}" >&2
    mkdir -p "${dir}"
    GOFLAGS=-mod=mod GOBIN="${dir}" go install "${pkg}@${version}" >&2
  fi
  echo "${dir}/${name}"
}

# clusterctl cannot be `go install`ed: the cluster-api module's go.mod has a
# replace directive for its api module. Build it in a throw-away module that
# requires both modules at the pinned version, stamped with that version.
install_clusterctl() {
  local version="$1"
  local dir="${CACHE_ROOT}/tools/clusterctl-${version}"
  if [[ ! -x "${dir}/clusterctl" ]]; then
    echo "tool: building sigs.k8s.io/cluster-api/cmd/clusterctl@${version}" >&2
    local src="${CACHE_ROOT}/src/clusterctl-${version}"
    mkdir -p "${dir}" "${src}"
    printf 'module kubevirt-workers.local/clusterctl\n\ngo 1.26\n\nrequire (\n\tsigs.k8s.io/cluster-api %s\n\tsigs.k8s.io/cluster-api/api %s\n)\n' \
      "${version}" "${version}" >"${src}/go.mod"
    local v="${version#v}" pkg=sigs.k8s.io/cluster-api/version
    local ldflags="-X ${pkg}.gitMajor=${v%%.*} -X ${pkg}.gitMinor=$(cut -d. -f2 <<<"${v}") -X ${pkg}.gitVersion=${version} -X ${pkg}.gitTreeState=clean"
    (cd "${src}" && GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 \
      go build -trimpath -ldflags "${ldflags}" -o "${dir}/clusterctl.tmp" sigs.k8s.io/cluster-api/cmd/clusterctl >&2)
    mv "${dir}/clusterctl.tmp" "${dir}/clusterctl"
  fi
  echo "${dir}/clusterctl"
}

# build_in_module builds a tool from a throw-away module that requires it at
# the pinned version. `go install pkg@version` also reads the module's version
# list to report deprecations, and the proxy refuses that list for some
# modules (yip) even though it serves the pinned version.
build_in_module() {
  local name="$1" module="$2" pkg="$3" version="$4"
  local dir="${CACHE_ROOT}/tools/${name}-${version}"
  if [[ ! -x "${dir}/${name}" ]]; then
    echo "tool: building ${pkg}@${version}" >&2
    local src="${CACHE_ROOT}/src/${name}-${version}"
    rm -rf "${src}"
    mkdir -p "${dir}" "${src}"
    printf 'module kubevirt-workers.local/%s\n\ngo 1.26\n' "${name}" >"${src}/go.mod"
    (cd "${src}" && { GOFLAGS=-mod=mod GOWORK=off go get "${module}@${version}" >get.log 2>&1 || { cat get.log >&2; exit 1; }; } &&
      GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 go build -trimpath -o "${dir}/${name}.tmp" "${pkg}" >&2)
    mv "${dir}/${name}.tmp" "${dir}/${name}"
  fi
  echo "${dir}/${name}"
}

# install_operator builds the Cluster API operator's manager and copies its
# module's config/ (CRDs, RBAC, webhook configurations) beside it, so a test
# installs the operator from the same module version it runs.
install_operator() {
  local version="$1"
  local dir="${CACHE_ROOT}/tools/cluster-api-operator-${version}"
  if [[ ! -x "${dir}/cluster-api-operator" || ! -d "${dir}/config" ]]; then
    build_in_module cluster-api-operator sigs.k8s.io/cluster-api-operator sigs.k8s.io/cluster-api-operator/cmd "${version}" >/dev/null
    local mod
    mod=$(cd "${CACHE_ROOT}/src/cluster-api-operator-${version}" && GOFLAGS=-mod=mod GOWORK=off go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api-operator)
    rm -rf "${dir}/config.tmp"
    cp -r "${mod}/config" "${dir}/config.tmp"
    chmod -R u+w "${dir}/config.tmp"
    rm -rf "${dir}/config"
    mv "${dir}/config.tmp" "${dir}/config"
  fi
  echo "${dir}/cluster-api-operator"
}

# kubectl's main package lives in k8s.io/kubernetes (cmd/kubectl); the
# command itself is k8s.io/kubectl's. Build that same main in a throw-away
# module requiring k8s.io/kubectl at the pinned version, stamped with the
# matching Kubernetes version.
install_kubectl() {
  local version="$1"
  local dir="${CACHE_ROOT}/tools/kubectl-${version}"
  if [[ ! -x "${dir}/kubectl" ]]; then
    echo "tool: building kubectl from k8s.io/kubectl@${version} (a few minutes on two cores)" >&2
    local src="${CACHE_ROOT}/src/kubectl-${version}"
    rm -rf "${src}"
    mkdir -p "${dir}" "${src}"
    printf 'module kubevirt-workers.local/kubectl\n\ngo 1.26\n' >"${src}/go.mod"
    printf '%s\n' '// Command kubectl is Kubernetes'"'"' cmd/kubectl.' 'package main' '' 'import (' \
      '	"k8s.io/component-base/cli"' '	"k8s.io/kubectl/pkg/cmd"' '	"k8s.io/kubectl/pkg/cmd/util"' ')' '' \
      'func main() {' '	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {' '		util.CheckErr(err)' '	}' '}' >"${src}/main.go"
    local kube="v1${version#v0}" minor
    minor=$(cut -d. -f2 <<<"${kube}")
    local ldflags="-s -w -X k8s.io/client-go/pkg/version.gitVersion=${kube} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor} -X k8s.io/component-base/version.gitVersion=${kube} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
    (cd "${src}" && { { GOFLAGS=-mod=mod GOWORK=off go get "k8s.io/kubectl@${version}" && GOFLAGS=-mod=mod GOWORK=off go mod tidy; } >get.log 2>&1 || { cat get.log >&2; exit 1; }; } &&
      GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${dir}/kubectl.tmp" . >&2)
    mv "${dir}/kubectl.tmp" "${dir}/kubectl"
  fi
  echo "${dir}/kubectl"
}

case "${1:-}" in
  controller-gen) install controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "${CONTROLLER_TOOLS_VERSION}" ;;
  golangci-lint) install golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "${GOLANGCI_LINT_VERSION}" ;;
  yip) build_in_module yip github.com/mudler/yip github.com/mudler/yip "${YIP_VERSION}" ;;
  clusterctl) install_clusterctl "${CLUSTER_API_VERSION}" ;;
  kubectl) install_kubectl "${KUBECTL_VERSION}" ;;
  cluster-api-operator) install_operator "${CLUSTER_API_OPERATOR_VERSION}" ;;
  kustomize) install kustomize sigs.k8s.io/kustomize/kustomize/v5 "${KUSTOMIZE_VERSION}" ;;
  # govulncheck type-checks with the go/types it was built with, so it is
  # built by the Go release it scans with (GOTOOLCHAIN).
  govulncheck) install govulncheck golang.org/x/vuln/cmd/govulncheck "${GOVULNCHECK_VERSION}" "$(go env GOVERSION)" ;;
  # Builds the vulnerability database's index from the OSV files of the
  # pinned snapshot (vulndb's own cmd/indexdb) and prints its directory.
  vulndb)
    db="${CACHE_ROOT}/vulndb/${VULNDB_VERSION}"
    if [[ ! -f "${db}/index/db.json" ]]; then
      indexdb=$(build_in_module indexdb golang.org/x/vulndb golang.org/x/vulndb/cmd/indexdb "${VULNDB_VERSION}")
      src=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod GOWORK=off go mod download -json "golang.org/x/vulndb@${VULNDB_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
      [[ -d "${src}/data/osv" ]] || { echo "tool: golang.org/x/vulndb@${VULNDB_VERSION} has no data/osv" >&2; exit 1; }
      rm -rf "${db}.tmp"
      "${indexdb}" -vulns "${src}/data/osv" -out "${db}.tmp" >&2
      rm -rf "${db}"
      mv "${db}.tmp" "${db}"
    fi
    echo "${db}"
    ;;
  *) echo "usage: $0 controller-gen|golangci-lint|yip|clusterctl|kubectl|kustomize|govulncheck|vulndb|cluster-api-operator" >&2; exit 2 ;;
esac
