#!/usr/bin/env bash
# Writes the clusterctl release artefacts into an output folder:
# bootstrap-components.yaml, infrastructure-components.yaml, metadata.yaml
# and the cluster templates.
#
# Environment: RELEASE_DIR (default out/), BOOTSTRAP_IMAGE and
# INFRASTRUCTURE_IMAGE (full references, tag or digest included),
# AVAILABILITY (none|pod|node|zone, default none).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="${RELEASE_DIR:-out}"
level="${AVAILABILITY:-none}"
bootstrap_image="${BOOTSTRAP_IMAGE:-ghcr.io/cozystack/kairos-bootstrap-controller:dev}"
infrastructure_image="${INFRASTRUCTURE_IMAGE:-ghcr.io/cozystack/kubevirt-workers-controller:dev}"
case "${level}" in none|pod|node|zone) ;; *) echo "AVAILABILITY must be none, pod, node or zone, not ${level}" >&2; exit 2 ;; esac

kustomize=$(hack/tool.sh kustomize)
mkdir -p "${out}"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT

# build renders one provider through a throw-away overlay that sets its image
# and availability level, so the checked-in kustomizations stay untouched.
build() {
  local provider="$1" image_name="$2" image="$3" target="$4"
  local dir="${work}/${provider}"
  mkdir -p "${dir}"
  local name="${image%@*}" digest="" tag=""
  if [[ "${image}" == *@* ]]; then
    digest="${image#*@}"
  elif [[ "${image##*/}" == *:* ]]; then
    tag="${image##*:}"
    name="${image%:*}"
  fi
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "- ${root}/config/${provider}/default"
    echo "components:"
    echo "- ${root}/config/components/availability/${level}"
    echo "images:"
    echo "- name: ${image_name}"
    echo "  newName: ${name}"
    [[ -n "${tag}" ]] && echo "  newTag: \"${tag}\""
    [[ -n "${digest}" ]] && echo "  digest: ${digest}"
  } >"${dir}/kustomization.yaml"
  "${kustomize}" build "${dir}" >"${out}/${target}"
}

build bootstrap ghcr.io/cozystack/kairos-bootstrap-controller "${bootstrap_image}" bootstrap-components.yaml
build infrastructure ghcr.io/cozystack/kubevirt-workers-controller "${infrastructure_image}" infrastructure-components.yaml
cp metadata.yaml "${out}/metadata.yaml"
cp templates/cluster-template*.yaml "${out}/"
echo "release manifests written to ${out}" >&2
