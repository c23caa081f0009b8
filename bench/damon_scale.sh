#!/usr/bin/env bash
# DAMON at size (issue 33, item 3): kvtierd's DAMON source watching one process's sparse
# anonymous mapping of 1 GiB to 4 TiB (MAP_NORESERVE: DAMON vaddr monitors virtual ranges, so a
# mapping far larger than the guest's RAM is a fair tracked size), 64 MiB of it resident in
# 64 KiB blocks spread over it and one block in 16 kept hot, in the tiered guest (6.12, one
# vCPU, -icount: CPU counted in instructions whatever the host runs). Prints per size the sizing
# kvtierd chose, the regions DAMON ends at, the kdamond thread's CPU and kvtierd's DAMON-side CPU
# per step, then the growth exponents (build/bench/kvtier_damon_scale, bench/damon_scale.cpp).
#
# Usage: bench/damon_scale.sh [--sizes-gib 1,4,16,64,256,1024,4096] [--seconds S]
#                             [--hot spread|clustered] [--out FILE]
#   --sizes-gib  ascending sizes of the mapping (default 1,4,16,64,256,1024,4096)
#   --seconds    measured per size after a 10 s warm-up (default 40: 8 steps of 5 s)
#   --hot        the hot blocks spread evenly with the others (default), or side by side in the
#                middle of the mapping (one hot stretch: what DAMON's regions can find at size)
#   --out        also write everything printed to FILE
# Needs KVTIER_VM_LOCK like every guest run, and the build in $KVTIER_BUILD_DIR (default build/).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}
export KVTIER_VM_BINS=kvtier_damon_scale
sizes=1,4,16,64,256,1024,4096
seconds=40
hot=spread
out=
while (($#)); do
  case $1 in
    --sizes-gib) sizes=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --hot) hot=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "damon_scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
bin=$KVTIER_BUILD_DIR/bench/kvtier_damon_scale
[[ -x $bin ]] || { echo "damon_scale.sh: $bin missing: build first (scripts/setup.sh)" >&2; exit 1; }
[[ -n $out ]] && exec > >(tee "$out")
n=$(tr ',' '\n' <<<"$sizes" | grep -c .)
# A size takes the warm-up, the window and the set-up; TCG and a loaded host take longer.
timeout=$((300 + n * (seconds + 10 + 30) * 3))
echo "damon_scale: sizes ${sizes} GiB, ${seconds} s each, hot blocks ${hot}, guest timeout ${timeout} s"
"$top/scripts/vm/run" --vcpus 1 --icount shift=0,sleep=on --timeout "$timeout" -- \
  kvtier_damon_scale --sizes-gib "$sizes" --seconds "$seconds" --warmup-s 10 --step-s 5 --hot "$hot"
