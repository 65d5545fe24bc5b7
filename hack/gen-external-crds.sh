#!/usr/bin/env bash
# Regenerates the KubeVirt and CDI CustomResourceDefinitions that envtest
# installs (test/crds/kubevirt, test/crds/cdi), and what virt-operator installs
# for KubeVirt's control plane (test/kubevirt/manifests: RBAC, virt-api's
# webhook configurations, admission policies, priority class, common
# instancetypes), from the upstream sources at the versions the main module
# pins, so tests validate our VirtualMachines and DataVolumes against the real
# schemas and run the real virt-api and virt-controller as a cluster would.
#
#   KubeVirt: hack/kubevirt/manifests, in a separate module that links
#             virt-operator's install strategy (kubevirt.io/kubevirt pins
#             older k8s.io modules).
#   CDI:      controller-gen on a writable copy of
#             kubevirt.io/containerized-data-importer-api (its kubebuilder
#             markers are the source of CDI's own CRDs).
#
# Usage: hack/gen-external-crds.sh [--verify]
#   --verify regenerates into a temporary directory and fails when the
#   committed files differ. The output is deterministic; builds are cached
#   outside the checkout (the KubeVirt generator takes minutes to build once).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
GEN_CACHE="${CACHE_ROOT}/crdgen"
mkdir -p "${GEN_CACHE}"
KUBEVIRT_GEN_DIR="${ROOT}/hack/kubevirt"
KUBEVIRT_OUT="test/crds/kubevirt"
KUBEVIRT_INSTALL_OUT="test/kubevirt/manifests"
CDI_OUT="test/crds/cdi"
# CDI kinds a VirtualMachine's disks use: DataVolume (import, clone) and the
# DataSource a golden image is cloned from; and the kinds virt-controller
# watches once the DataVolume API exists (CDI, CDIConfig, StorageProfile):
# its caches never sync without them; and the VolumeImportSource a claim
# names on the populator path (CSI storage classes).
CDI_CRDS=(cdi.kubevirt.io_datavolumes.yaml cdi.kubevirt.io_datasources.yaml cdi.kubevirt.io_cdis.yaml cdi.kubevirt.io_cdiconfigs.yaml cdi.kubevirt.io_storageprofiles.yaml cdi.kubevirt.io_volumeimportsources.yaml)
# The rest of CDI's kinds, which only CDI's own cdi-controller needs (it
# watches each and exits when one is missing): test/cdi installs them when
# it runs the controller; every other tier goes without.
CDI_CONTROLLER_OUT="test/crds/cdi-controller"
CDI_CONTROLLER_CRDS=(cdi.kubevirt.io_dataimportcrons.yaml cdi.kubevirt.io_objecttransfers.yaml cdi.kubevirt.io_volumeclonesources.yaml cdi.kubevirt.io_volumeuploadsources.yaml forklift.cdi.kubevirt.io_openstackvolumepopulators.yaml forklift.cdi.kubevirt.io_ovirtvolumepopulators.yaml)

log() { echo "gen-external-crds: $*" >&2; }
fail() { log "$*"; exit 1; }

verify=false
case "${1:-}" in
  "") ;;
  --verify) verify=true ;;
  *) echo "usage: $0 [--verify]" >&2; exit 2 ;;
esac

# required_version prints the version a go.mod requires for a module.
required_version() {
  local gomod="$1" module="$2" version
  version=$(awk -v m="${module}" '($1 == "require" && $2 == m) { print $3; exit } ($1 == m && $2 ~ /^v/) { print $2; exit }' "${gomod}")
  [[ -n "${version}" ]] || fail "${gomod} does not require ${module}"
  echo "${version}"
}

KUBEVIRT_VERSION=$(required_version "${KUBEVIRT_GEN_DIR}/go.mod" kubevirt.io/kubevirt)
KUBEVIRT_API_VERSION=$(required_version "${ROOT}/go.mod" kubevirt.io/api)
CDI_VERSION=$(required_version "${ROOT}/go.mod" kubevirt.io/containerized-data-importer-api)
# The schemas must describe the Go types the providers compile against.
[[ "${KUBEVIRT_VERSION}" == "${KUBEVIRT_API_VERSION}" ]] ||
  fail "hack/kubevirt/go.mod uses kubevirt.io/kubevirt ${KUBEVIRT_VERSION} but go.mod pins kubevirt.io/api ${KUBEVIRT_API_VERSION}; align them (and the kubevirt.io/api replace line there)"

# kubevirt_generator builds the generator once per source state and prints its
# path.
kubevirt_generator() {
  local key bin
  key=$(cat "${KUBEVIRT_GEN_DIR}/go.mod" "${KUBEVIRT_GEN_DIR}/go.sum" "${KUBEVIRT_GEN_DIR}"/manifests/*.go <(go env GOVERSION) | sha256sum | cut -c1-16)
  bin="${GEN_CACHE}/bin/kubevirt-manifests-${KUBEVIRT_VERSION}-${key}"
  if [[ ! -x "${bin}" ]]; then
    log "building the KubeVirt manifest generator (${KUBEVIRT_VERSION}; a few minutes on two cores)"
    mkdir -p "$(dirname "${bin}")"
    (cd "${KUBEVIRT_GEN_DIR}" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -o "${bin}.tmp" ./manifests)
    mv "${bin}.tmp" "${bin}"
  fi
  echo "${bin}"
}

# cdi_source prints a writable copy of the CDI API module: controller-gen
# loads its packages, which resolves and records dependencies in go.sum.
cdi_source() {
  local src="${GEN_CACHE}/src/containerized-data-importer-api-${CDI_VERSION}" dir
  if [[ ! -f "${src}/.prepared" ]]; then
    dir=$(cd "${GEN_CACHE}" && GOFLAGS=-mod=mod go mod download -json "kubevirt.io/containerized-data-importer-api@${CDI_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [[ -n "${dir}" ]] || fail "could not download kubevirt.io/containerized-data-importer-api@${CDI_VERSION}"
    rm -rf "${src}"
    mkdir -p "$(dirname "${src}")"
    cp -r "${dir}" "${src}"
    chmod -R u+w "${src}"
    touch "${src}/.prepared"
  fi
  echo "${src}"
}

# with_header prefixes a generated file with where it came from.
with_header() {
  local file="$1" origin="$2" tmp
  tmp="${file}.tmp"
  { echo "# Code generated by hack/gen-external-crds.sh from ${origin}. DO NOT EDIT."; cat "${file}"; } >"${tmp}"
  mv "${tmp}" "${file}"
}

generate() {
  local out="$1" start=${SECONDS} gen cdi controller_gen controller_gen_version cdi_all
  mkdir -p "${out}/${KUBEVIRT_OUT}" "${out}/${KUBEVIRT_INSTALL_OUT}" "${out}/${CDI_OUT}" "${out}/${CDI_CONTROLLER_OUT}"

  gen=$(kubevirt_generator)
  "${gen}" -crds "${out}/${KUBEVIRT_OUT}" -install "${out}/${KUBEVIRT_INSTALL_OUT}"
  log "KubeVirt CRDs and install manifests ready after $((SECONDS - start))s"

  controller_gen=$("${ROOT}/hack/tool.sh" controller-gen)
  controller_gen_version=$("${controller_gen}" --version | awk '{ print $NF }')
  cdi=$(cdi_source)
  cdi_all="${out}/cdi-all"
  (cd "${cdi}" && GOFLAGS=-mod=mod "${controller_gen}" crd:crdVersions=v1 paths=./pkg/apis/core/... paths=./pkg/apis/forklift/... "output:crd:artifacts:config=${cdi_all}")
  for f in "${CDI_CRDS[@]}"; do
    [[ -f "${cdi_all}/${f}" ]] || fail "controller-gen produced no ${f}"
    cp "${cdi_all}/${f}" "${out}/${CDI_OUT}/${f}"
    with_header "${out}/${CDI_OUT}/${f}" "kubevirt.io/containerized-data-importer-api ${CDI_VERSION} (controller-gen ${controller_gen_version})"
  done
  for f in "${CDI_CONTROLLER_CRDS[@]}"; do
    [[ -f "${cdi_all}/${f}" ]] || fail "controller-gen produced no ${f}"
    cp "${cdi_all}/${f}" "${out}/${CDI_CONTROLLER_OUT}/${f}"
    with_header "${out}/${CDI_CONTROLLER_OUT}/${f}" "kubevirt.io/containerized-data-importer-api ${CDI_VERSION} (controller-gen ${controller_gen_version})"
  done
  rm -rf "${cdi_all}"
  log "CDI CRDs ready after $((SECONDS - start))s"
}

work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
generate "${work}"

if ${verify}; then
  status=0
  for d in "${KUBEVIRT_OUT}" "${KUBEVIRT_INSTALL_OUT}" "${CDI_OUT}" "${CDI_CONTROLLER_OUT}"; do
    diff -r "${ROOT}/${d}" "${work}/${d}" >&2 || status=1
  done
  [[ ${status} -eq 0 ]] || fail "committed CRDs differ from the upstream sources; run hack/gen-external-crds.sh"
  log "committed CRDs match ${KUBEVIRT_VERSION} (KubeVirt) and ${CDI_VERSION} (CDI)"
  exit 0
fi

# Replace whole directories so a removed kind does not linger and a failed
# run leaves the previous files intact.
for d in "${KUBEVIRT_OUT}" "${KUBEVIRT_INSTALL_OUT}" "${CDI_OUT}" "${CDI_CONTROLLER_OUT}"; do
  rm -rf "${ROOT:?}/${d}"
  mkdir -p "$(dirname "${ROOT}/${d}")"
  mv "${work}/${d}" "${ROOT}/${d}"
done
log "wrote ${KUBEVIRT_OUT} and ${KUBEVIRT_INSTALL_OUT} (KubeVirt ${KUBEVIRT_VERSION}) and ${CDI_OUT} and ${CDI_CONTROLLER_OUT} (CDI ${CDI_VERSION})"
