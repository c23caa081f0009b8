#!/usr/bin/env bash
# vm test (issue 37): the topology at run time, then the soak's short version, in one boot of
# the CXL guest (a boot saved: CI's guest time is counted).
# 1. kvtierd has an idle buffer on the CXL node; the node's memory blocks are offlined (all
#    but one, then all) and onlined again while it runs. The pages come back to node 0 (or the
#    offline is refused), kvtierd reports the node gone within a step, moves nothing there
#    while it is, demotes there again once it is back, does not restart, and no byte of the
#    buffer changes (tests/vm/topology_guest.sh, check_topology.py).
# 2. scripts/soak.sh's guest side for 150 s (KVTIER_SOAK_SECONDS) with a fault every 3 to 8 s,
#    each of the six kinds at least once, in the order of a fixed seed (37; KVTIER_SOAK_SEED
#    to change it): no corrupted byte, knobs, BPF programs and kdamonds as before, each
#    fault's log lines (tests/vm/soak_guest.sh, check_soak.py).
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
source "$(dirname "$0")/lib.sh"
seed=${KVTIER_SOAK_SEED:-37}
secs=${KVTIER_SOAK_SECONDS:-150}
echo "topology: the soak's seed $seed, ${secs} s (again: KVTIER_SOAK_SEED=$seed tests/vm/topology.sh)"
# As scripts/soak.sh: the node_full fault's fill of the CXL node takes no write (init_on_alloc=0).
export KVTIER_VM_APPEND="${KVTIER_VM_APPEND:+$KVTIER_VM_APPEND }init_on_alloc=0"
rc=0
out=$(vm_run --cxl --timeout 1200 "$@" -- sh -c \
  "sh /kvtier/tests/vm/topology_guest.sh; echo '--- soak'; sh /kvtier/tests/vm/soak_guest.sh ${secs}s $seed 3 8") ||
  rc=$?
topology=${out%%--- soak*}
soak=${out#*--- soak}
[[ $out == *"--- soak"* ]] || soak=
printf '%s\n' "$topology" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_topology.py" || rc=1
printf '%s\n' "$soak" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_soak.py" || rc=1
exit "$rc"
