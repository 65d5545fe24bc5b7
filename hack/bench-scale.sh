#!/usr/bin/env bash
# The scale benchmark (`make bench-scale`; not part of CI). For each N it
# runs test/bench/cmd/bench-scale as its own process: side by side, the
# harness scales a MachineDeployment of Kairos machines (ours), the same
# pool reconciled by the contract-floor providers (test/bench/floor), then
# bootstrapped by Cluster API's kubeadm provider (the peer), from 0 to N,
# with the providers as separate processes, measures the floor, and how
# long Cluster API alone (providers stopped) takes to create the N
# Machines; it reports timings, CPU and peak RSS per provider, requests per
# machine, throttling, idle writes, the ratios ours/floor providers and
# ours/peer and the bounds it checks (see docs/benchmarks.md). Progress goes to stderr and
# scale-N.log; scale-N.partial.md and scale-N.json hold each stage's
# results as soon as it finished, so a run cut short keeps them.
#
# Knobs (environment):
#   N           machine counts, space-separated     (default "10 100")
#   BOOT_DELAY  simulated VM boot, a Go duration    (default 0: control plane alone)
#   IDLE        idle window after each run          (default 2m)
#   PEER_IDLE   the idle window of the floor providers and the peer; 0 skips it (default: IDLE)
#   TIMEOUT     bound on each scale-up              (default 15m)
#   SETTLE      how long controllers may still write after all Running (default 2m)
#   UPSTREAM    0 skips the Cluster API alone stage                     (default 1)
#   FLOOR_PROVIDERS 0 skips the contract-floor providers' run           (default 1)
#   PEER        0 skips the kubeadm peer's run                          (default 1)
#   OUT         directory for the reports           (default out/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--mod=readonly}"

N="${N:-10 100}"
BOOT_DELAY="${BOOT_DELAY:-0}"
IDLE="${IDLE:-2m}"
PEER_IDLE="${PEER_IDLE:-${IDLE}}"
TIMEOUT="${TIMEOUT:-15m}"
SETTLE="${SETTLE:-2m}"
UPSTREAM="${UPSTREAM:-1}"
skip_upstream=false
if [ "${UPSTREAM}" = "0" ]; then skip_upstream=true; fi
FLOOR_PROVIDERS="${FLOOR_PROVIDERS:-1}"
skip_floor_providers=false
if [ "${FLOOR_PROVIDERS}" = "0" ]; then skip_floor_providers=true; fi
PEER="${PEER:-1}"
skip_peer=false
if [ "${PEER}" = "0" ]; then skip_peer=true; fi
OUT="${OUT:-out/bench}"

bins=$(hack/tools-bins.sh all)
export KUBEBUILDER_ASSETS="${bins}"
export KUBEADM_BIN="${bins}/kubeadm"
export KUBE_CONTROLLER_MANAGER_BIN="${bins}/kube-controller-manager"

mkdir -p "${OUT}"
go build -o "${OUT}/bench-scale" ./test/bench/cmd/bench-scale

{
  echo "# Scale benchmark $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "Command: N=\"${N}\" BOOT_DELAY=${BOOT_DELAY} IDLE=${IDLE} PEER_IDLE=${PEER_IDLE} TIMEOUT=${TIMEOUT} SETTLE=${SETTLE} UPSTREAM=${UPSTREAM} FLOOR_PROVIDERS=${FLOOR_PROVIDERS} PEER=${PEER} hack/bench-scale.sh"
  echo "Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "Machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
  echo
} > "${OUT}/report.md"

for n in ${N}; do
  echo "bench-scale: N=${n}, boot delay ${BOOT_DELAY}, started $(date -u +%H:%M:%SZ), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "${OUT}/bench-scale" -machines "${n}" -boot-delay "${BOOT_DELAY}" -idle "${IDLE}" -peer-idle "${PEER_IDLE}" -timeout "${TIMEOUT}" -settle-timeout "${SETTLE}" -skip-upstream="${skip_upstream}" \
    -skip-floor-providers="${skip_floor_providers}" -skip-peer="${skip_peer}" \
    -process-logs "${OUT}/logs-${n}" -json "${OUT}/scale-${n}.json" -partial "${OUT}/scale-${n}.partial.md" \
    2> >(tee "${OUT}/scale-${n}.log" >&2) | tee -a "${OUT}/report.md"
  echo "Load average after N=${n}: $(cut -d' ' -f1-3 /proc/loadavg)" >> "${OUT}/report.md"
  echo >> "${OUT}/report.md"
done
echo "bench-scale: report in ${OUT}/report.md" >&2
