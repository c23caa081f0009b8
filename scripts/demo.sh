#!/usr/bin/env bash
# kvtier's demo: installs and builds (scripts/setup.sh), then boots the
# tiered-memory guest (node 0 = CPUs + DRAM, node 1 = slower CPU-less memory,
# as CXL memory looks once online) and shows what kvtier makes of it.
# Usage: scripts/demo.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}

"$top/scripts/setup.sh"
echo
echo "demo: booting the tiered-memory guest (QEMU TCG, about 5 s) and running 'kvtierctl nodes'"
"$top/scripts/vm/run" -- kvtierctl nodes
