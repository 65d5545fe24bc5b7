#!/usr/bin/env bash
# Writes the clusterctl release artefacts into an output folder:
# bootstrap-components.yaml, infrastructure-components.yaml, metadata.yaml
# the cluster templates (cluster-template*.yaml) and the ClusterClasses their
# topology flavors name (clusterclass-*.yaml); and, for hosters who run the
# VMs in a cluster of their own, infrastructure-cluster-role.yaml; and, for
# one cluster autoscaler per tenant namespace, its Role and RoleBinding
# (cluster-autoscaler-tenant-role.yaml, a clusterctl generate yaml input).
#
# Environment:
#   RELEASE_DIR           output folder (default out/), created if missing
#   BOOTSTRAP_IMAGE       bootstrap manager image, tag or digest included
#                         (default ghcr.io/cozystack/kairos-bootstrap-controller:dev)
#   INFRASTRUCTURE_IMAGE  infrastructure manager image, tag or digest included
#                         (default ghcr.io/cozystack/kubevirt-workers-controller:dev)
#   KUSTOMIZE_BIN         kustomize to use (default: hack/tool.sh kustomize)
#   AVAILABILITY          none|pod|node|zone (default pod): the managers'
#                         replicas, disruption budget and spread
#                         (config/components/availability)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="${RELEASE_DIR:-out}"
level="${AVAILABILITY:-pod}"
bootstrap_image="${BOOTSTRAP_IMAGE:-ghcr.io/cozystack/kairos-bootstrap-controller:dev}"
infrastructure_image="${INFRASTRUCTURE_IMAGE:-ghcr.io/cozystack/kubevirt-workers-controller:dev}"
case "${level}" in
  none | pod | node | zone) ;;
  *) echo "AVAILABILITY must be none, pod, node or zone, not ${level}" >&2; exit 2 ;;
esac

kustomize="${KUSTOMIZE_BIN:-$(hack/tool.sh kustomize)}"
mkdir -p "${out}"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT

# image_fields prints the kustomize `images` fields that replace the
# manager image by the reference $1: newName plus newTag or digest.
image_fields() {
  local image="$1" name tag="" digest=""
  name="${image%@*}"
  if [[ "${image}" == *@* ]]; then
    digest="${image#*@}"
  fi
  # A tag is a colon in the last path element (a registry port is not).
  if [[ "${name##*/}" == *:* ]]; then
    tag="${name##*:}"
    name="${name%:*}"
  fi
  if [[ -z "${name}" || "${name}" == */ || ( -z "${tag}" && -z "${digest}" ) ]]; then
    echo "image ${image} must be a full reference with a tag or a digest" >&2
    return 1
  fi
  echo "  newName: ${name}"
  # A digest pins the bytes; a tag beside it would only be decoration.
  if [[ -n "${digest}" ]]; then
    echo "  digest: ${digest}"
  else
    echo "  newTag: \"${tag}\""
  fi
}

# build renders one provider through a throw-away overlay that adds the
# availability level and sets the image, so the checked-in kustomizations
# stay untouched. kustomize refuses absolute paths, hence the relative ones.
build() {
  local provider="$1" kustomization="$2" image_name="$3" image="$4" target="$5"
  local dir="${work}/${provider}"
  mkdir -p "${dir}"
  local fields
  fields=$(image_fields "${image}")
  cat >"${dir}/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="${dir}" "${root}/config/${provider}/${kustomization}")
components:
- $(realpath --relative-to="${dir}" "${root}/config/components/availability/${level}")
images:
- name: ${image_name}
${fields}
EOF
  "${kustomize}" build "${dir}" >"${out}/${target}"
}

build bootstrap default ghcr.io/cozystack/kairos-bootstrap-controller "${bootstrap_image}" bootstrap-components.yaml
# The released infrastructure provider always carries the WorkerClass API
# with its gate on: its webhooks fail closed, so they ship only together with
# the manager flag that serves them, and class-based templates are what the
# provider is for. config/infrastructure/default (classless) serves Tilt.
build infrastructure with-workerclass ghcr.io/cozystack/kubevirt-workers-controller "${infrastructure_image}" infrastructure-components.yaml
# Not a clusterctl artefact: the role a hoster applies in a remote
# infrastructure cluster (--infrastructure-kubeconfig).
"${kustomize}" build config/infrastructure/infrastructure-cluster >"${out}/infrastructure-cluster-role.yaml"
cp config/infrastructure/autoscaler-tenant/cluster-autoscaler-tenant-role.yaml "${out}/"
cp metadata.yaml "${out}/metadata.yaml"
cp templates/cluster-template*.yaml templates/clusterclass-*.yaml "${out}/"
echo "release manifests (availability ${level}) written to ${out}" >&2
