#!/usr/bin/env bash
# Writes the workerclass command, whose `resolve --legacy` is the restore
# interface of a rollback (docs/workerclass.md), as static Linux binaries
# for amd64 and arm64 into an output folder, with their SHA-256 sums:
# workerclass-linux-amd64, workerclass-linux-arm64, workerclass-checksums.txt
# (sha256sum's format: sha256sum -c workerclass-checksums.txt).
#
# Environment:
#   RELEASE_DIR  output folder (default out/), created if missing
set -euo pipefail
cd "$(dirname "$0")/.."
out="${RELEASE_DIR:-out}"
mkdir -p "${out}"
binaries=()
for arch in amd64 arm64; do
  name="workerclass-linux-${arch}"
  echo "building ${name} (static, CGO off)" >&2
  # -trimpath and an empty build id: the same source gives the same bytes.
  CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build -trimpath -ldflags='-s -w -buildid=' -o "${out}/${name}" ./cmd/workerclass
  binaries+=("${name}")
done
(cd "${out}" && sha256sum "${binaries[@]}" >workerclass-checksums.txt)
echo "workerclass binaries and checksums written to ${out}" >&2
