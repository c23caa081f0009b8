#!/usr/bin/env bash
# vm test (issue 37): the topology at run time, in the CXL guest. kvtierd has an idle buffer
# on the CXL node; the node's memory blocks are offlined (all but one, then all) and onlined
# again while it runs. The pages come back to node 0 (or the offline is refused), kvtierd
# reports the node gone within a step, moves nothing there while it is, demotes there again
# once it is back, does not restart, and no byte of the buffer changes
# (tests/vm/topology_guest.sh, check_topology.py).
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
source "$(dirname "$0")/lib.sh"
out=$(vm_run --cxl --timeout 600 "$@" -- sh /kvtier/tests/vm/topology_guest.sh)
printf '%s\n' "$out" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_topology.py"
