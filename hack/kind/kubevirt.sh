#!/usr/bin/env bash
# Installs KubeVirt into a kind cluster of hack/kind/cluster.sh as its
# release does (virt-operator's manifest, then a KubeVirt CR), from images
# built here: virt-operator, virt-api and virt-controller from their
# modules (hack/tools-bins.sh), virt-handler and virt-launcher as the real
# node of test/node builds them (hack/node/kubevirt.sh). virt-operator's
# manifest is written by KubeVirt's own generator code
# (hack/kubevirt/manifests -operator). Nothing is pulled: the images are
# loaded into the node under the quay.io/kubevirt names virt-operator
# derives from its own image.
#
# The KubeVirt CR turns on emulation: this machine's nested KVM hangs
# guests, and kind nodes rarely have /dev/kvm.
#
# Needs root (podman). Usage: hack/kind/kubevirt.sh NAME KUBECONFIG
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
CACHE_ROOT="${KUBEVIRT_WORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-workers}"
CACHE="${CACHE_ROOT}/kind"

log() { echo "kind-kubevirt: $*" >&2; }
[[ $# -eq 2 ]] || { log "usage: $0 NAME KUBECONFIG"; exit 2; }
name="$1"
export KUBECONFIG="$2"
[[ $(id -u) -eq 0 ]] || { log "must run as root (podman)"; exit 1; }

kubectl=$("${REPO}/hack/tool.sh" kubectl)
bin=$("${REPO}/hack/tools-bins.sh" kubevirt kubevirt-operator)

# --- the images.
start=${SECONDS}
images="${CACHE}/kubevirt-images-$( (cd "${bin}" && sha256sum virt-operator virt-api virt-controller; cat "${REPO}"/test/kindnode/*.go) | sha256sum | cut -c1-16)"
mkdir -p "${images}"
list=$(cd "${REPO}" && go run -tags node ./test/kindnode/cmd/kubevirt-images -bin "${bin}" -out "${images}")
find "${CACHE}" -maxdepth 1 -name 'kubevirt-images-*' ! -path "${images}" -exec rm -rf {} +
mapfile -t archives < <(cut -d' ' -f1 <<<"${list}")
"${HERE}/load.sh" "${name}" "${archives[@]}"
log "images ready and loaded in $((SECONDS - start))s"

# --- virt-operator's manifest, by KubeVirt's generator.
manifest="${CACHE}/kubevirt-operator-$(cat "${REPO}/hack/kubevirt/go.mod" "${REPO}/hack/kubevirt/go.sum" "${REPO}/hack/kubevirt/manifests/main.go" | sha256sum | cut -c1-16).yaml"
if [[ ! -f "${manifest}" ]]; then
  (cd "${REPO}/hack/kubevirt" && go run ./manifests -operator "${manifest}.tmp")
  mv "${manifest}.tmp" "${manifest}"
  find "${CACHE}" -maxdepth 1 -name 'kubevirt-operator-*.yaml' ! -path "${manifest}" -delete
fi

start=${SECONDS}
"${kubectl}" apply --server-side -f "${manifest}" >&2
"${kubectl}" wait crd/kubevirts.kubevirt.io --for=condition=Established --timeout=2m >&2
"${kubectl}" apply --server-side -f - >&2 <<'EOF'
apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata:
  name: kubevirt
  namespace: kubevirt
spec:
  imagePullPolicy: IfNotPresent
  configuration:
    developerConfiguration:
      useEmulation: true
EOF
log "waiting for KubeVirt to be Available"
"${kubectl}" -n kubevirt wait kubevirt/kubevirt --for=condition=Available --timeout=20m >&2
log "KubeVirt is Available in $((SECONDS - start))s"
