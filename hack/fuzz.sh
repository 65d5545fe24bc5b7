#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each.
set -euo pipefail
fuzztime="${1:-60s}"
cd "$(dirname "$0")/.."
status=0
while read -r pkg; do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz: ${pkg} ${target} for ${fuzztime}"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "${fuzztime}" "$pkg" || status=1
  done
done < <(go list ./...)
exit $status
