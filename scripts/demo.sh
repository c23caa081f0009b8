#!/usr/bin/env bash
# kvtier's demo: installs and builds (scripts/setup.sh), then boots the
# tiered-memory guest (node 0 = CPUs + DRAM, node 1 = slower CPU-less memory,
# as CXL memory looks once online) and runs scripts/demo-guest.sh in it: the
# KV-cache simulator (bench/kvsim) on a real trace, and kvtierd moving its cold
# KV pages to node 1 while the hot ones stay on node 0. Every 15 s it prints the
# share of kvsim's reads DRAM served and where the pool is; at the end, one line
# of the benchmark's columns for the run (bench/report.py --line).
# Usage: scripts/demo.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}

# The packages, then only what the demo runs (target kvtier_demo_programs: kvtierd, kvtierctl,
# kvsim and the residency probe; no tests, no other benchmarks), while the guest kernel downloads
# beside the build (scripts/vm/kernel.sh; cached in the build dir, as scripts/vm/run wants it).
"$top/scripts/setup.sh" --no-build
mkdir -p "$KVTIER_BUILD_DIR"
"$top/scripts/vm/kernel.sh" >"$KVTIER_BUILD_DIR/demo-kernel.log" 2>&1 &
kernel=$!
start=$SECONDS
"$top/scripts/setup.sh" --target kvtier_demo_programs
built=$((SECONDS - start))
wait "$kernel" || { echo "demo: the guest kernel could not be fetched:" >&2; cat "$KVTIER_BUILD_DIR/demo-kernel.log" >&2; exit 1; }
echo "demo: build ${built} s; the guest kernel ready $((SECONDS - start)) s after the build started"
echo
echo "demo: booting the tiered-memory guest (QEMU TCG) and running kvsim, the KV-cache"
echo "demo: simulator, on the Mooncake trace at real time while kvtierd moves its cold KV"
echo "demo: blocks to node 1 (about ${KVTIER_DEMO_SECONDS:-90} s of simulation, 2-3 minutes in all)"
out=$KVTIER_BUILD_DIR/demo
mkdir -p "$out"
rc=0
# The guest's measurement lines ({"src":...}) go to a file; everything else to the screen.
"$top/scripts/vm/run" --timeout 900 -- env KVTIER_DEMO_SECONDS="${KVTIER_DEMO_SECONDS:-90}" \
  sh /kvtier/scripts/demo-guest.sh >"$out/guest.out" || rc=$?
grep -v '^{"src":' "$out/guest.out" || true
grep '^{"src":' "$out/guest.out" >"$out/demo.jsonl" || true
if [[ -s $out/demo.jsonl ]]; then
  echo
  echo "== the run in the benchmark's columns (scripts/bench.sh, docs/benchmarks.md):"
  python3 "$top/bench/report.py" --line "$out/demo.jsonl" --mode kvtier || rc=1
fi
exit "$rc"
