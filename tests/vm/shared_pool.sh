#!/usr/bin/env bash
# vm test (issue 37): a 64 MiB KV pool in one memfd, mapped by two processes at
# different addresses, each reading a hot 4 MiB of it. kvtierd tracks the pool
# once (its owner, the lower pid), merges what both processes' reads show, moves
# its cold part to node 1 with MPOL_MF_MOVE_ALL and keeps both hot parts on
# node 0; no byte of the pool changes.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
source "$(dirname "$0")/lib.sh"
out=$(vm_run --timeout 600 -- sh /kvtier/tests/vm/shared_pool_guest.sh)
printf '%s\n' "$out" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_shared_pool.py"
