#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run (kube-apiserver, etcd, kubeadm,
# kube-controller-manager), KubeVirt's control plane (virt-api,
# virt-controller) and the real node's cluster DNS (CoreDNS) from their Go
# modules into a cache outside the checkout. Nothing is downloaded as a prebuilt binary: this machine and CI
# reach only the Go module proxy.
#
# Usage: hack/tools-bins.sh [envtest|kubeadm|controller-manager|kubevirt|kubevirt-operator|cert-manager|kubelet|scheduler|proxy|coredns|all]...
# (kubelet, scheduler, proxy and coredns are only for the real guests and
# the real node, kubevirt-operator and cert-manager for the kind clusters,
# so `all` leaves them out.)
# Prints the cache directory on stdout. Reuses binaries already built.
set -euo pipefail

KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.13.1}"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
BIN_DIR="${CACHE_ROOT}/bin/k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}"
# The module that builds KubeVirt's control plane (and its manifests).
KUBEVIRT_MODULE="$(cd "$(dirname "$0")" && pwd)/kubevirt"
# The module that builds cert-manager's controller and cainjector.
CERTMANAGER_MODULE="$(cd "$(dirname "$0")" && pwd)/certmanager"
mkdir -p "${BIN_DIR}"

log() { echo "tools-bins: $*" >&2; }
# shellcheck source=hack/lib/go-build-progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/go-build-progress.sh"

# go_build DIR WHAT PACKAGES BUILD_FLAGS...: runs go build -v in DIR and,
# every 30 seconds until it ends, logs how many packages it has compiled of
# the ones it may need, and the time spent: a first run on an empty cache
# builds for many minutes, and one line per half minute keeps CI logs short.
go_build() {
  local dir="$1" what="$2" packages="$3"
  shift 3
  local total out start=${SECONDS}
  # shellcheck disable=SC2086 # a list of package patterns
  total=$(cd "${dir}" && go list -deps ${packages} 2>/dev/null | wc -l)
  out=$(mktemp)
  # shellcheck disable=SC2086
  (cd "${dir}" && go build -v "$@" ${packages}) 2>"${out}" &
  wait_for_go_build $! "${out}" "${what}" "${total}" "${start}" || return
  log "built ${what} in $((SECONDS - start))s"
}

# staging_tree prepares a writable copy of k8s.io/kubernetes whose staging
# replace lines point at the published k8s.io/* modules of the same release.
staging_tree() {
  local src="${CACHE_ROOT}/src/kubernetes-${KUBERNETES_VERSION}"
  if [[ -f "${src}/.prepared" ]]; then
    echo "${src}"
    return
  fi
  local dir
  log "downloading k8s.io/kubernetes ${KUBERNETES_VERSION} and its modules"
  dir=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n "${dir}" ]] || { log "could not download k8s.io/kubernetes@${KUBERNETES_VERSION}"; exit 1; }
  rm -rf "${src}"
  mkdir -p "$(dirname "${src}")"
  cp -r "${dir}" "${src}"
  chmod -R u+w "${src}"
  rm -f "${src}/go.work" "${src}/go.work.sum"
  rm -rf "${src}/vendor"
  local staging_version="v0${KUBERNETES_VERSION#v1}"
  sed -i -E "s#^(\s*k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+#\1 => \1 ${staging_version}#" "${src}/go.mod"
  (cd "${src}" && GOFLAGS=-mod=mod go mod download >/dev/null 2>&1 || true)
  touch "${src}/.prepared"
  echo "${src}"
}

kube_ldflags() {
  local minor="${KUBERNETES_VERSION#v1.}"
  minor="${minor%%.*}"
  echo "-s -w -X k8s.io/component-base/version.gitVersion=${KUBERNETES_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=${KUBERNETES_VERSION}"
}

build_kube() {
  local name="$1"
  if [[ -x "${BIN_DIR}/${name}" ]]; then
    return
  fi
  local src
  src=$(staging_tree)
  log "building ${name} ${KUBERNETES_VERSION} (several minutes on two cores)"
  GOFLAGS=-mod=mod CGO_ENABLED=0 go_build "${src}" "${name}" "./cmd/${name}" -trimpath -ldflags "$(kube_ldflags)" -o "${BIN_DIR}/${name}.tmp"
  mv "${BIN_DIR}/${name}.tmp" "${BIN_DIR}/${name}"
}

build_etcd() {
  if [[ -x "${BIN_DIR}/etcd" ]]; then
    return
  fi
  log "building etcd ${ETCD_VERSION}"
  local mod
  mod=$(mktemp -d)
  cat >"${mod}/main.go" <<'EOF'
// Command etcd runs the etcd server from its Go module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  (cd "${mod}" && go mod init local/etcd >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
  CGO_ENABLED=0 go_build "${mod}" etcd . -trimpath -ldflags "-s -w" -o "${BIN_DIR}/etcd.tmp"
  mv "${BIN_DIR}/etcd.tmp" "${BIN_DIR}/etcd"
  rm -rf "${mod}"
}

# build_coredns builds CoreDNS from github.com/coredns/coredns with the
# plugins of kubeadm's Corefile (which the kind nodes of hack/kind run
# unchanged) and log (the real node's Corefile, test/node/dns.go): a main
# of its own importing them (what a plugin.cfg listing only those
# generates) compiles about half the packages of the full command (no
# cloud DNS providers' SDKs, no tracing). The module's requirements pick every version, as in
# CoreDNS's own build. A stamp of the version and the plugins rebuilds it
# when either changes.
build_coredns() {
  local plugins=(cache errors forward health kubernetes loadbalance log loop metrics ready reload)
  local stamp mod p
  stamp=$(echo "${COREDNS_VERSION} ${plugins[*]} $(go env GOVERSION)" | sha256sum | cut -c1-16)
  if [[ -x "${BIN_DIR}/coredns" && "$(cat "${BIN_DIR}/coredns.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    return
  fi
  log "building coredns ${COREDNS_VERSION} with ${plugins[*]}"
  mod=$(mktemp -d)
  {
    echo '// Command coredns runs CoreDNS with the plugins of kubeadm'"'"'s Corefile and log.'
    echo 'package main'
    echo
    echo 'import ('
    for p in "${plugins[@]}"; do
      echo "	_ \"github.com/coredns/coredns/plugin/${p}\""
    done
    echo
    echo '	"github.com/coredns/coredns/coremain"'
    echo ')'
    echo
    echo 'func main() { coremain.Run() }'
  } >"${mod}/main.go"
  (cd "${mod}" && go mod init local/coredns >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go get "github.com/coredns/coredns@${COREDNS_VERSION}" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
  GOFLAGS=-mod=readonly CGO_ENABLED=0 go_build "${mod}" coredns . -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-proxy" -o "${BIN_DIR}/coredns.tmp"
  mv "${BIN_DIR}/coredns.tmp" "${BIN_DIR}/coredns"
  echo "${stamp}" >"${BIN_DIR}/coredns.stamp"
  rm -rf "${mod}"
}

# build_kubevirt builds virt-api and virt-controller from kubevirt.io/kubevirt
# in hack/kubevirt, the module that repeats kubevirt's replace block (its
# go.mod names both commands as tools), and kubevirt-cloudinit, which writes
# a guest's cloud-init disk with KubeVirt's own package as virt-launcher
# does (hack/kubevirt/cloudinit). CGO is off: none links libvirt. A stamp of
# that module's go.mod, go.sum and command source rebuilds them when it
# changes.
build_kubevirt() {
  local mod="${KUBEVIRT_MODULE}" stamp
  stamp=$(cat "${mod}/go.mod" "${mod}/go.sum" "${mod}/cloudinit/main.go" <(go env GOVERSION) | sha256sum | cut -c1-16)
  if [[ -x "${BIN_DIR}/virt-api" && -x "${BIN_DIR}/virt-controller" && -x "${BIN_DIR}/kubevirt-cloudinit" &&
    "$(cat "${BIN_DIR}/kubevirt.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    return
  fi
  log "building virt-api, virt-controller and kubevirt-cloudinit $(kubevirt_version "${mod}") (about 4 minutes on two cores)"
  GOFLAGS=-mod=readonly CGO_ENABLED=0 go_build "${mod}" "virt-api, virt-controller and kubevirt-cloudinit" \
    "kubevirt.io/kubevirt/cmd/virt-api kubevirt.io/kubevirt/cmd/virt-controller ./cloudinit" -trimpath -ldflags "-s -w" -o "${BIN_DIR}/kubevirt.tmp/"
  mv "${BIN_DIR}/kubevirt.tmp/virt-api" "${BIN_DIR}/kubevirt.tmp/virt-controller" "${BIN_DIR}/"
  mv "${BIN_DIR}/kubevirt.tmp/cloudinit" "${BIN_DIR}/kubevirt-cloudinit"
  rmdir "${BIN_DIR}/kubevirt.tmp"
  echo "${stamp}" >"${BIN_DIR}/kubevirt.stamp"
}

# build_kubevirt_operator builds virt-operator from the same module, for the
# kind clusters of hack/kind (the other tiers run virt-api and
# virt-controller without it).
build_kubevirt_operator() {
  local mod="${KUBEVIRT_MODULE}" stamp
  stamp=$(cat "${mod}/go.mod" "${mod}/go.sum" <(go env GOVERSION) | sha256sum | cut -c1-16)
  if [[ -x "${BIN_DIR}/virt-operator" && "$(cat "${BIN_DIR}/kubevirt-operator.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    return
  fi
  GOFLAGS=-mod=readonly CGO_ENABLED=0 go_build "${mod}" virt-operator kubevirt.io/kubevirt/cmd/virt-operator \
    -trimpath -ldflags "-s -w" -o "${BIN_DIR}/virt-operator.tmp"
  mv "${BIN_DIR}/virt-operator.tmp" "${BIN_DIR}/virt-operator"
  echo "${stamp}" >"${BIN_DIR}/kubevirt-operator.stamp"
}

# build_certmanager builds cert-manager's controller and cainjector for the
# kind clusters of hack/kind (hack/kind/certmanager.sh) in hack/certmanager,
# a module under cert-manager's own path so that its mains may import
# cert-manager's internal packages as upstream's commands do. CGO is off,
# as in cert-manager's release builds. A stamp of that module's go.mod,
# go.sum and mains rebuilds them when it changes.
build_certmanager() {
  local mod="${CERTMANAGER_MODULE}" stamp version
  stamp=$(cat "${mod}/go.mod" "${mod}/go.sum" "${mod}/cainjector/main.go" "${mod}/controller/main.go" <(go env GOVERSION) | sha256sum | cut -c1-16)
  if [[ -x "${BIN_DIR}/cert-manager-controller" && -x "${BIN_DIR}/cert-manager-cainjector" &&
    "$(cat "${BIN_DIR}/cert-manager.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    return
  fi
  version=$(certmanager_version "${mod}")
  log "building cert-manager's controller and cainjector ${version} (about 10 minutes on two cores the first time)"
  GOFLAGS=-mod=readonly CGO_ENABLED=0 go_build "${mod}" "cert-manager's controller and cainjector" "./controller ./cainjector" \
    -trimpath -ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=${version}" -o "${BIN_DIR}/cert-manager.tmp/"
  mv "${BIN_DIR}/cert-manager.tmp/controller" "${BIN_DIR}/cert-manager-controller"
  mv "${BIN_DIR}/cert-manager.tmp/cainjector" "${BIN_DIR}/cert-manager-cainjector"
  rmdir "${BIN_DIR}/cert-manager.tmp"
  echo "${stamp}" >"${BIN_DIR}/cert-manager.stamp"
}

certmanager_version() {
  awk '($1 == "github.com/cert-manager/cert-manager" && $2 ~ /^v/) { print $2; exit }' "$1/go.mod"
}

kubevirt_version() {
  awk '($1 == "kubevirt.io/kubevirt" && $2 ~ /^v/) { print $2; exit }' "$1/go.mod"
}

record_versions() {
  {
    echo "kubernetes ${KUBERNETES_VERSION}"
    echo "etcd ${ETCD_VERSION}"
    echo "go $(go env GOVERSION)"
    [[ -x "${BIN_DIR}/virt-api" ]] && echo "kubevirt $(kubevirt_version "${KUBEVIRT_MODULE}")"
    [[ -x "${BIN_DIR}/coredns" ]] && echo "coredns ${COREDNS_VERSION}"
    [[ -x "${BIN_DIR}/cert-manager-controller" ]] && echo "cert-manager $(certmanager_version "${CERTMANAGER_MODULE}")"
    for b in "${BIN_DIR}"/*; do
      if [[ -x "$b" ]]; then echo "binary $(basename "$b")"; fi
    done
  } >"${BIN_DIR}/VERSIONS"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(envtest)
for t in "${targets[@]}"; do
  case "$t" in
    envtest) build_etcd; build_kube kube-apiserver ;;
    kubeadm) build_kube kubeadm ;;
    controller-manager) build_kube kube-controller-manager ;;
    kubevirt) build_kubevirt ;;
    kubevirt-operator) build_kubevirt_operator ;;
    cert-manager) build_certmanager ;;
    kubelet) build_kube kubelet ;;
    scheduler) build_kube kube-scheduler ;;
    proxy) build_kube kube-proxy ;;
    coredns) build_coredns ;;
    all) build_etcd; build_kube kube-apiserver; build_kube kubeadm; build_kube kube-controller-manager; build_kubevirt ;;
    *) log "unknown target $t"; exit 2 ;;
  esac
done
record_versions
echo "${BIN_DIR}"
