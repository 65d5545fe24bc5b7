#!/usr/bin/env bash
# Sourced by the scripts that build Go binaries from modules (hack/tools-bins.sh,
# hack/node/cdi.sh); they define log() first.

# wait_for_go_build PID OUT WHAT TOTAL START: waits for a `go build -v` running
# as PID with its output in OUT and, every 30 seconds until it ends, logs how
# many of the TOTAL packages it may need it has compiled and the time since
# START (a SECONDS value): a cold build takes minutes, and a line per half
# minute keeps CI logs short. On failure it shows the output's end. It
# removes OUT and returns the build's status.
wait_for_go_build() {
  local pid="$1" out="$2" what="$3" total="$4" start="$5" rc=0 i
  while kill -0 "${pid}" 2>/dev/null; do
    for ((i = 0; i < 30; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 1
    done
    if kill -0 "${pid}" 2>/dev/null; then
      log "building ${what}: $(grep -c -v '^#' "${out}") of at most ${total} packages compiled, $((SECONDS - start))s so far"
    fi
  done
  wait "${pid}" || rc=$?
  if ((rc != 0)); then
    tail -n 60 "${out}" >&2
    log "building ${what} failed after $((SECONDS - start))s"
  fi
  rm -f "${out}"
  return "${rc}"
}
