#!/usr/bin/env bash
# vm test: kvtierd, started from its config in the tiered-memory guest, demotes
# the cold part of a real process to node 1 and keeps its hot part on node 0;
# kvtierctl shows it; SIGTERM leaves no kdamond on and no socket behind.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
source "$(dirname "$0")/lib.sh"
out=$(vm_run --timeout 600 -- sh /kvtier/tests/vm/daemon_guest.sh)
printf '%s\n' "$out" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_daemon.py"
