#!/usr/bin/env bash
# Scans the module with govulncheck against a pinned snapshot of the Go
# vulnerability database (hack/tool.sh vulndb), with the Go release the
# manager images are built with (the Dockerfiles' GO_VERSION, taken from the
# module proxy as a toolchain): a finding on a call path of our code fails,
# for a module as for the standard library.
set -euo pipefail
cd "$(dirname "$0")/.."

release_go=$(sed -n 's/^ARG GO_VERSION=//p' infrastructure/Dockerfile)
if [[ "${release_go}" != "$(sed -n 's/^ARG GO_VERSION=//p' bootstrap/Dockerfile)" ]]; then
  echo "vulncheck: the two Dockerfiles build with different Go releases" >&2
  exit 1
fi
export GOTOOLCHAIN="go${release_go}"
govulncheck=$(hack/tool.sh govulncheck)
db=$(hack/tool.sh vulndb)
echo "vulncheck: govulncheck with $(go env GOVERSION) against the vulnerability database in ${db}" >&2
"${govulncheck}" -db "file://${db}" ./...
