#!/usr/bin/env bash
# Turns the output of capture-topology.sh (stdin) into DIR/sys/... for tests/fixtures.
set -euo pipefail
dest=${1:?usage: unpack-topology.sh DIR < stream}
out=""
while IFS= read -r line; do
  line=${line%$'\r'}
  if [[ $line == "=== end" ]]; then break; fi
  if [[ $line == "=== "* ]]; then
    out="$dest/sys/${line#=== }"
    mkdir -p "$(dirname "$out")"
    : > "$out"
    continue
  fi
  [[ -n $out ]] && printf '%s\n' "$line" >> "$out"
done
