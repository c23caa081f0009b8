#!/usr/bin/env bash
# vm test: kvtierd's DAMON source on a 1 TiB sparse mapping (bench/damon_scale.cpp, one size,
# a short window) and its output checked on the host (tests/vm/check_damon_at_size.py): the
# sizing and the regions kvtierd wrote, exactly; the kernel's regions inside the bounds and
# the mapping. The costs are the benchmark's (bench/damon_scale.sh), never asserted here.
set -euo pipefail
src=${KVTIER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
run=${KVTIER_VM_RUN:-$src/scripts/vm/run}
out=$("$run" --vcpus 1 --timeout 600 -- \
  kvtier_damon_scale --sizes-gib 1024 --seconds 10 --warmup-s 10 --step-s 5)
printf '%s\n' "$out" | python3 "$src/tests/vm/check_damon_at_size.py"
