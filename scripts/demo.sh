#!/usr/bin/env bash
# kvtier's demo: installs and builds (scripts/setup.sh), then boots the
# tiered-memory guest (node 0 = CPUs + DRAM, node 1 = slower CPU-less memory,
# as CXL memory looks once online) and runs scripts/demo-guest.sh in it: the
# KV-cache simulator (bench/kvsim) on a real trace, and kvtierd moving its cold
# KV pages to node 1 while the hot ones stay on node 0.
# Usage: scripts/demo.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}

"$top/scripts/setup.sh"
echo
echo "demo: booting the tiered-memory guest (QEMU TCG) and running kvsim, the KV-cache"
echo "demo: simulator, on the Mooncake trace at real time while kvtierd moves its cold KV"
echo "demo: blocks to node 1 (about ${KVTIER_DEMO_SECONDS:-90} s of simulation, 2-3 minutes in all)"
exec "$top/scripts/vm/run" --timeout 900 -- env KVTIER_DEMO_SECONDS="${KVTIER_DEMO_SECONDS:-90}" \
  sh /kvtier/scripts/demo-guest.sh
