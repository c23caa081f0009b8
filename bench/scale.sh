#!/usr/bin/env bash
# The scale benchmark of issue 33: kvtierd's whole step (discover, the sources' drain into the
# heat tables, residency, plan, dispatch, record and telemetry) at 16 GiB, 128 GiB, 1 TiB and
# 4 TiB of tracked memory, by build/bench/kvtier_scale_bench (bench/scale_bench.cpp says what
# it generates and what is real). Four parts:
#   1. the KV shape (3% of the blocks hot, 7% warm, the rest idle on the CXL node), 1 target;
#      then at 1 TiB with the kernel demoting elsewhere between steps (the residency check then
#      reads every page with evidence: agent/loop/residency_check.hpp);
#   2. the added memory cold: 1638 MiB hot and warm at every size (16 GiB's share);
#   3. 64 and 256 targets with 16 GiB between them, against 1 target;
#   4. real: a child with the largest anonymous mapping this machine holds now (MemAvailable
#      less 8 GiB for the other work, at most 16 GiB), the host's hotness sources, move_pages as
#      a query; the same size synthetic beside it. Root for the sources; without, it says why not.
# A size whose heat state would not fit in free memory is reported as such, with the
# extrapolation from the two sizes below it.
#
# Usage: bench/scale.sh [--short] [--out FILE]
#   --short  16 GiB synthetic only, 3 steps (CI runs this: ctest -R unit.bench_scale_short)
#   --out    also write everything printed to FILE
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
bin=$build/bench/kvtier_scale_bench
short=0
out=
while (($#)); do
  case $1 in
    --short) short=1 ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -x $bin ]] || { echo "scale.sh: $bin missing: build first (scripts/setup.sh)" >&2; exit 1; }
[[ -n $out ]] && exec > >(tee "$out")

if ((short)); then
  exec "$bin" --sizes 16GiB --steps 3
fi
echo "== 1. the KV shape, one target"
"$bin" --sizes 16GiB,128GiB,1TiB,4TiB
echo "== 1b. the KV shape, the kernel demoting elsewhere between steps"
"$bin" --sizes 1TiB --kernel-moves
echo "== 2. the added memory cold (hot and warm fixed at 1638 MiB)"
"$bin" --sizes 16GiB,128GiB,1TiB --hot-bytes 1638MiB
for n in 64 256; do
  echo "== 3. $n targets, 16 GiB between them"
  "$bin" --sizes 16GiB --targets "$n"
done
avail=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)
real=$((avail - 8))
((real > 16)) && real=16
if ((real < 1)); then
  echo "== 4. real: skipped: ${avail} GiB available, the run needs 8 GiB left for the other work"
  exit 0
fi
echo "== 4. real: ${real} GiB on this host, and the same synthetic"
"$bin" --sizes "${real}GiB" --real "${real}GiB"
