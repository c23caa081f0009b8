#!/usr/bin/env bash
# vm test: runs tests/vm/sources_guest.sh damon in the guest and checks its
# output on the host (tests/vm/check_sources.py damon).
set -euo pipefail
src=${KVTIER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
run=${KVTIER_VM_RUN:-$src/scripts/vm/run}
out=$("$run" --timeout 300 -- sh /kvtier/tests/vm/sources_guest.sh damon)
printf '%s\n' "$out" | python3 "$src/tests/vm/check_sources.py" damon
