#!/usr/bin/env bash
# Generates CRDs, RBAC and webhook manifests for each provider with
# controller-gen.
# Usage: hack/generate-manifests.sh <controller-gen> [workerclass|bootstrap|infrastructure]...
set -euo pipefail
cg="$1"
cd "$(dirname "$0")/.."

gen() {
  local name="$1" apis="$2" code="$3"
  rm -rf "config/${name}/crd/bases"
  if compgen -G "${apis}/*.go" >/dev/null; then
    "${cg}" crd:crdVersions=v1 "paths=./${apis}/..." "output:crd:dir=./config/${name}/crd/bases"
  fi
  local paths=()
  for p in ${code}; do
    [[ -d "$p" ]] && paths+=("paths=./${p}/...")
  done
  if [[ ${#paths[@]} -gt 0 ]]; then
    "${cg}" rbac:roleName=manager-role webhook "${paths[@]}" \
      "output:rbac:dir=./config/${name}/rbac" "output:webhook:dir=./config/${name}/webhook"
  fi
}

targets=("${@:2}")
[[ ${#targets[@]} -gt 0 ]] || targets=(workerclass bootstrap infrastructure)
for t in "${targets[@]}"; do
  case "$t" in
    workerclass) gen workerclass exp/workerclass/api/v1alpha1 "exp/workerclass" ;;
    bootstrap) gen bootstrap bootstrap/api/v1alpha1 "bootstrap" ;;
    infrastructure)
      gen infrastructure infrastructure/api/v1alpha1 "infrastructure"
      # The role of the provider's identity in a remote infrastructure
      # cluster (--infrastructure-kubeconfig), from infracluster's markers.
      "${cg}" rbac:roleName=infrastructure-cluster-role "paths=./infrastructure/internal/infracluster/..." \
        "output:rbac:dir=./config/infrastructure/infrastructure-cluster"
      ;;
    *) echo "unknown target $t" >&2; exit 2 ;;
  esac
done
