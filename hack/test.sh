#!/usr/bin/env bash
# The project's test command (README: `make test`). Builds or reuses every
# binary the suites need (kube-apiserver, etcd, kubeadm, kube-controller-manager,
# virt-api, virt-controller, yip, clusterctl, kubectl, the Cluster API
# operator), then runs all Go tests, fuzz seed corpora included, with the race
# detector off to fit two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--mod=readonly}"

bins=$(hack/tools-bins.sh all)
export KUBEBUILDER_ASSETS="${bins}"
export KUBEADM_BIN="${bins}/kubeadm"
export KUBE_CONTROLLER_MANAGER_BIN="${bins}/kube-controller-manager"
YIP_BIN=$(hack/tool.sh yip)
export YIP_BIN
# Built once here: the packaging tests and the harness both run it, in
# parallel packages.
CLUSTERCTL_BIN=$(hack/tool.sh clusterctl)
export CLUSTERCTL_BIN
# The docs' recipes (test/packaging) pipe into kubectl.
KUBECTL_BIN=$(hack/tool.sh kubectl)
export KUBECTL_BIN
# The Cluster API operator (test/packaging's TestClusterAPIOperator), built
# here once rather than while the packages test in parallel.
hack/tool.sh cluster-api-operator >/dev/null

# TEST_PACKAGES narrows the run (make faults); every package by default.
go test -count=1 -timeout 45m "$@" ${TEST_PACKAGES:-./...}
