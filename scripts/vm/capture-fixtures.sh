#!/usr/bin/env bash
# Regenerates tests/fixtures/topology/{hmat,cxl}-guest from the real guests:
# capture-topology.sh runs inside scripts/vm/run, unpack-topology.sh on the host.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
for variant in hmat cxl; do
  flags=()
  [[ $variant == cxl ]] && flags=(--cxl)
  stream=$(mktemp)
  trap 'rm -f "$stream"' EXIT
  "$top/scripts/vm/run" "${flags[@]}" -- /kvtier/scripts/capture-topology.sh >"$stream"
  grep -qx '=== end' "$stream" || { echo "capture-fixtures: $variant capture is incomplete" >&2; exit 1; }
  dest=$top/tests/fixtures/topology/$variant-guest
  rm -rf "$dest"
  "$top/scripts/unpack-topology.sh" "$dest" <"$stream"
  echo "capture-fixtures: wrote $dest"
done
