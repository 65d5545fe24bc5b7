#!/usr/bin/env bash
# Builds CDI's own components, for a later step that runs real CDI on the
# real node of test/node (make test-node) in place of the stand-in
# (test/sim/cdi), into the cache outside the checkout, reusing what is
# already there. Nothing here runs CDI.
#
#   - bin (the default): from kubevirt.io/containerized-data-importer at
#     the version hack/cdi/go.mod pins (that module repeats CDI's replace
#     block), static with CGO_ENABLED=0: cdi-operator, cdi-controller,
#     cdi-apiserver, cdi-uploadproxy, cdi-importer, cdi-cloner,
#     cdi-uploadserver, and the helpers CDI's controller runs from the
#     importer image (cdi-image-size-detection for host-assisted clones,
#     cdi-containerimage-server for registry imports by node pull,
#     cdi-source-update-poller for DataImportCron), and operator-rbac.yaml:
#     the roles and bindings CDI's operator gives cdi-controller and
#     cdi-apiserver, written by its own code (hack/cdi/operator-rbac). None
#     needs cgo:
#     libguestfs.org/libnbd, for VMware VDDK imports only, is not on the Go
#     module proxy and hack/cdi replaces it with a stand-in whose every
#     operation fails; the other cgo parts fall back without it:
#     containers/image's SQLite blob info cache (github.com/mattn/go-sqlite3)
#     becomes a memory one, and containers/storage's pkg/unshare loses a
#     constructor for rootless re-execution, which CDI does not do. Left
#     out: the oVirt and OpenStack populators of the importer image.
#   - rootfs: a Debian trixie root (debootstrap minbase, then apt-get in a
#     chroot) for the importer, cloner and uploadserver images, with what
#     they run: qemu-img (qemu-utils), nbdkit with its curl plugin and its
#     xz, gzip, tar, retry, readahead and cacheextents filters (all in
#     Debian's nbdkit package), tar and blockdev (minbase), and CA
#     certificates, also at the path CDI's images carry them
#     (/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem). CDI's images
#     (cmd/*/BUILD.bazel) put every binary in /usr/bin, the cloner's
#     cloner_startup.sh too, and run as user 1001 with no passwd entry (its
#     worker Pods set runAsUser and fsGroup 107); the image that a later
#     step writes takes the binaries from bin and the user from there.
#     88-248 s here (debootstrap most of it), 261 MB; needs root.
#
# Nothing is mounted outside a private mount namespace (unshare).
#
# Usage: hack/node/cdi.sh [bin|rootfs|all]...
# Prints "bin=<dir>" and, with rootfs or all, "rootfs=<dir>" on stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
MODULE="${REPO}/hack/cdi"
SUITE=trixie
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What CDI's importer, cloner and uploadserver bases carry that debootstrap's
# minbase lacks (rpm/BUILD.bazel names CentOS's).
PACKAGES=(qemu-utils nbdkit ca-certificates)
CMDS=(cdi-operator cdi-controller cdi-apiserver cdi-uploadproxy cdi-importer cdi-cloner cdi-uploadserver)
TOOLS=(cdi-image-size-detection cdi-containerimage-server cdi-source-update-poller)
# The namespace test/cdi runs CDI in (its Namespace), as the operator's
# default install does; named in the roles written below.
CDI_NAMESPACE=cdi

log() { echo "cdi: $*" >&2; }
# shellcheck source=hack/lib/go-build-progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib/go-build-progress.sh"
# shellcheck source=hack/lib/debian.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib/debian.sh"

want_bin=false want_rootfs=false
[[ $# -gt 0 ]] || set -- bin
for mode in "$@"; do
  case "${mode}" in
    bin) want_bin=true ;;
    rootfs) want_rootfs=true ;;
    all) want_bin=true want_rootfs=true ;;
    *) log "unknown mode ${mode}; want bin, rootfs or all"; exit 2 ;;
  esac
done

version=$(awk '($1 == "kubevirt.io/containerized-data-importer" && $2 ~ /^v/) { print $2; exit }' "${MODULE}/go.mod")
[[ -n "${version}" ]] || { log "no kubevirt.io/containerized-data-importer version in ${MODULE}/go.mod"; exit 1; }

# go_build WHAT PACKAGES... builds in the module with -v and, every 30
# seconds until it ends, logs how many packages it has compiled of the ones
# it may need: a cold build takes minutes and a line per half minute keeps
# CI logs short.
go_build() {
  local what="$1" out start=${SECONDS} total
  shift
  out=$(mktemp)
  # Lists the packages, fetching the modules an empty module cache lacks
  # (about 130, 40 s); their "go: downloading" lines are counted, not shown.
  if ! total=$(cd "${MODULE}" && GOFLAGS=-mod=readonly nice -n 19 go list -deps "$@" 2>"${out}" | wc -l) ||
    grep -q -v '^go: downloading' "${out}"; then
    tail -n 30 "${out}" >&2
    rm -f "${out}"
    return 1
  fi
  log "resolved ${total} packages in $((SECONDS - start))s ($(grep -c '^go: downloading' "${out}") modules fetched)"
  (cd "${MODULE}" && GOFLAGS=-mod=readonly CGO_ENABLED=0 nice -n 19 \
    go build -v -trimpath -ldflags "-s -w" -o "${bin}.tmp/" "$@") 2>"${out}" &
  wait_for_go_build $! "${out}" "${what}" "${total}" "${start}" || return
}

# --- the binaries
bin="${CACHE_ROOT}/bin/cdi-${version}"
if ${want_bin}; then
  bin_stamp=$( (cat "${MODULE}/go.mod" "${MODULE}/go.sum" "${MODULE}"/libnbd/* "${MODULE}"/operator-rbac/*; go env GOVERSION; echo "${CMDS[*]} ${TOOLS[*]} ${CDI_NAMESPACE}") | sha256sum | cut -c1-16)
  if [[ "$(cat "${bin}/stamp" 2>/dev/null)" != "${bin_stamp}" ]]; then
    log "building CDI ${version}: ${CMDS[*]} ${TOOLS[*]} (static; about 15 minutes on two busy cores cold, under a minute with a warm Go build cache)"
    start=${SECONDS}
    rm -rf "${bin}.tmp"
    mkdir -p "${bin}.tmp"
    go_build "CDI ${version}" "${CMDS[@]/#/kubevirt.io/containerized-data-importer/cmd/}" \
      "${TOOLS[@]/#/kubevirt.io/containerized-data-importer/tools/}" ./operator-rbac
    # The roles and bindings the operator gives cdi-controller and
    # cdi-apiserver, written by its own resource factories.
    "${bin}.tmp/operator-rbac" "${CDI_NAMESPACE}" >"${bin}.tmp/operator-rbac.yaml"
    # The cloner image's entry point, which measures the source and runs
    # cdi-cloner; read from the module as the image build does.
    src=$(cd "${MODULE}" && go list -m -f '{{.Dir}}' kubevirt.io/containerized-data-importer)
    install -m 0755 "${src}/cmd/cdi-cloner/cloner_startup.sh" "${bin}.tmp/cloner_startup.sh"
    {
      echo "kubevirt.io/containerized-data-importer ${version}"
      echo "$(go env GOVERSION), CGO_ENABLED=0, libguestfs.org/libnbd replaced by hack/cdi/libnbd (no VDDK imports)"
    } >"${bin}.tmp/VERSIONS"
    echo "${bin_stamp}" >"${bin}.tmp/stamp"
    rm -rf "${bin}"
    mv "${bin}.tmp" "${bin}"
    log "built CDI ${version} in $((SECONDS - start))s ($(du -sh "${bin}" | cut -f1))"
  fi
  echo "bin=${bin}"
fi

${want_rootfs} || exit 0

[[ $(id -u) -eq 0 ]] || { log "the root file system needs root (debootstrap, chroot)"; exit 1; }
command -v debootstrap >/dev/null || apt_install debootstrap


# --- the root file system, keyed by what goes into it (not by the CDI
# version: the binaries are a separate layer).
rootfs_key=$( (printf '%s\n' "${SUITE}" "${PACKAGES[@]}"; sed -n '/^# --- the root file system/,$p' "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)
rootfs="${CACHE_ROOT}/cdi/rootfs-${rootfs_key}"
if [[ ! -f "${rootfs}/.done" ]]; then
  start=${SECONDS}
  rm -rf "${rootfs}" "${rootfs}.build"
  mkdir -p "${rootfs}.build"
  r="${rootfs}.build/rootfs"
  logfile="${rootfs}.build/debootstrap.log"
  log "debootstrap ${SUITE} with qemu-utils and nbdkit (1.5 to 4 minutes)"
  debootstrap_root "${r}" "${SUITE}" "${MIRROR}" "${logfile}" "${PACKAGES[@]}"
  # What the importer runs must be there: a missing tool, plugin or filter
  # only shows at the first import otherwise. nbdkit loads the curl plugin
  # with every filter CDI names (pkg/image/nbdkit.go) and fails on one it
  # cannot open.
  for f in /usr/bin/qemu-img /usr/bin/tar /usr/sbin/blockdev /etc/ssl/certs/ca-certificates.crt; do
    [[ -e "${r}${f}" ]] || { log "the root lacks ${f}"; exit 1; }
  done
  chroot "${r}" nbdkit --filter=xz --filter=gzip --filter=tar --filter=retry --filter=readahead \
    --filter=cacheextents curl --dump-plugin >>"${logfile}" 2>&1 ||
    { tail -10 "${logfile}" >&2; log "nbdkit cannot load its curl plugin and CDI's filters"; exit 1; }
  # CDI's importer image carries its CA bundle where CentOS keeps it.
  mkdir -p "${r}/etc/pki/ca-trust/extracted/pem"
  ln -sf /etc/ssl/certs/ca-certificates.crt "${r}/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"
  # The images' working directories (cdi-cloner's is its home).
  mkdir -p "${r}/home/cdi-cloner"
  rm -rf "${r}/var/cache/apt/archives/"*.deb "${r}/var/lib/apt/lists/"*
  {
    echo "debian ${SUITE} (debootstrap minbase): ${PACKAGES[*]}"
    echo "qemu-utils $(chroot "${r}" dpkg-query -W -f '${Version}' qemu-utils)"
    echo "nbdkit $(chroot "${r}" dpkg-query -W -f '${Version}' nbdkit)"
    echo "images: binaries in /usr/bin, user 1001 (CDI's BUILD.bazel); worker Pods run as 107"
  } >"${rootfs}.build/VERSIONS"
  mv "${rootfs}.build" "${rootfs}"
  touch "${rootfs}/.done"
  log "made the root file system in $((SECONDS - start))s ($(du -sh "${rootfs}/rootfs" | cut -f1))"
  # Roots of an earlier package list or script.
  find "${CACHE_ROOT}/cdi" -maxdepth 1 -name 'rootfs-*' ! -path "${rootfs}" -exec rm -rf {} +
fi
echo "rootfs=${rootfs}/rootfs"
