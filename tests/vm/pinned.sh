#!/usr/bin/env bash
# vm test (issue 34): a process pins part of its memory with io_uring; kvtierd
# reports it pinned, spends no move on it and moves the rest to node 1. Also
# records where a buffer on node 1 is once pinned.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
source "$(dirname "$0")/lib.sh"
out=$(vm_run --timeout 900 "$@" -- sh /kvtier/tests/vm/pinned_guest.sh)
printf '%s\n' "$out" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_pinned.py"
