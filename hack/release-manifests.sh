#!/usr/bin/env bash
# Writes the clusterctl release artefacts into an output folder:
# bootstrap-components.yaml, infrastructure-components.yaml, metadata.yaml
# the cluster templates (cluster-template*.yaml) and the ClusterClasses their
# topology flavors name (clusterclass-*.yaml); and, for hosters who run the
# VMs in a cluster of their own, infrastructure-cluster-role.yaml; and, for
# one cluster autoscaler per tenant namespace, its Role and RoleBinding
# (cluster-autoscaler-tenant-role.yaml, a clusterctl generate yaml input);
# and, for Cozystack, both providers as its cluster-api-operator packages
# install providers (cozystack-capi-providers.yaml).
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
#   RELEASE_VERSION       the release's version, vMAJOR.MINOR.PATCH with an
#                         optional lowercase pre-release (default: the first
#                         release of metadata.yaml's newest series); the
#                         Cozystack package's provider versions derive from it
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="${RELEASE_DIR:-out}"
level="${AVAILABILITY:-pod}"
bootstrap_image="${BOOTSTRAP_IMAGE:-ghcr.io/cozystack/kairos-bootstrap-controller:dev}"
infrastructure_image="${INFRASTRUCTURE_IMAGE:-ghcr.io/cozystack/kubevirt-workers-controller:dev}"
# The newest series of metadata.yaml, as v<major>.<minor>.0.
newest_series=$(awk '$1 == "-" && $2 == "major:" { major = $3 }
  $1 == "minor:" && (major > top_major || (major == top_major && $2 >= top_minor)) { top_major = major; top_minor = $2 }
  END { printf "v%d.%d.0", top_major, top_minor }' metadata.yaml)
version="${RELEASE_VERSION:-${newest_series}}"
# The version names ConfigMaps in the Cozystack package: lowercase only.
if [[ ! "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9a-z.-]+)?$ ]]; then
  echo "RELEASE_VERSION must be vMAJOR.MINOR.PATCH with an optional lowercase pre-release, not ${version}" >&2
  exit 2
fi
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

# cozystack_configmap prints a ConfigMap in the shape of Cozystack's
# packages/system/capi-providers-*/templates/configmaps.yaml (cozystack
# commit 6f25168a9, the Talos bootstrap provider beside kubeadm): named by
# the provider's version, labelled for its provider object's
# fetchConfig.selector, with the components gzipped into binaryData (the
# operator's compressed annotation) and metadata.yaml as text. $1 is the
# name, $2 the components file of this release, $3 and after the labels.
cozystack_configmap() {
  local name="$1" components="$2"
  shift 2
  echo "apiVersion: v1"
  echo "kind: ConfigMap"
  echo "metadata:"
  echo "  name: ${name}"
  echo "  labels:"
  local label
  for label in "$@"; do
    echo "    ${label%%=*}: ${label#*=}"
  done
  echo "  annotations:"
  echo "    provider.cluster.x-k8s.io/compressed: \"true\""
  echo "binaryData:"
  # -n: no name or time in the gzip header, so a release is reproducible.
  echo "  components: $(gzip -nc "${out}/${components}" | base64 -w0)"
  echo "data:"
  echo "  metadata: |"
  sed 's/^/    /' "${out}/metadata.yaml"
}

# cozystack_provider prints a provider object in the shape of Cozystack's
# templates/providers.yaml (same commit). $1 is the kind, $2 the name, $3
# the version (the ConfigMap's name), $4 and after the selector's labels.
cozystack_provider() {
  local kind="$1" name="$2" provider_version="$3"
  shift 3
  echo "apiVersion: operator.cluster.x-k8s.io/v1alpha2"
  echo "kind: ${kind}"
  echo "metadata:"
  echo "  name: ${name}"
  echo "spec:"
  echo "  # https://github.com/cozystack/cluster-api-workers"
  echo "  version: ${provider_version}"
  echo "  fetchConfig:"
  echo "    selector:"
  echo "      matchLabels:"
  local label
  for label in "$@"; do
    echo "        ${label%%=*}: ${label#*=}"
  done
}

# The Cozystack package: both providers as Cozystack installs Cluster API
# providers with the cluster-api-operator, from the components written
# above. No object names a namespace: like a Helm release of Cozystack's
# packages, it goes into the namespace the providers share
# (cozy-cluster-api). Provider versions and ConfigMap names carry a suffix,
# as Cozystack's do (v0.6.12-bootstrap-talos), so that they stay unique in
# that namespace. The bootstrap labels follow Cozystack's two bootstrap
# providers; the infrastructure label's value is not "cozy", because
# Cozystack's kubevirt InfrastructureProvider selects every ConfigMap with
# infraprovider-components=cozy, and the operator refuses a selector that
# matches two.
bootstrap_version="${version}-bootstrap-kairos-kubeadm"
infrastructure_version="${version}-infraprovider-kubevirt-workers"
bootstrap_labels=(bootstrap-components=cozy bootstrap-provider=kairos-kubeadm)
infrastructure_labels=(infraprovider-components=kubevirt-workers)
{
  echo "# Cozystack package of cluster-api-workers ${version}: apply into the"
  echo "# namespace Cozystack's Cluster API providers share (docs/packaging.md,"
  echo "# \"Adopting in Cozystack\")."
  cozystack_configmap "${bootstrap_version}" bootstrap-components.yaml "${bootstrap_labels[@]}"
  echo "---"
  cozystack_configmap "${infrastructure_version}" infrastructure-components.yaml "${infrastructure_labels[@]}"
  echo "---"
  cozystack_provider BootstrapProvider kairos-kubeadm "${bootstrap_version}" "${bootstrap_labels[@]}"
  echo "---"
  cozystack_provider InfrastructureProvider kubevirt-workers "${infrastructure_version}" "${infrastructure_labels[@]}"
} >"${out}/cozystack-capi-providers.yaml"
echo "release manifests (availability ${level}) written to ${out}" >&2
