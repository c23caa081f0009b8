#!/usr/bin/env bash
# vm test (issue 37 part 4): the kernel refuses kvtierd a mechanism. Another DAMON user
# holds the only kdamond: kvtierd says DAMON is busy (one log line, status's degraded line
# and refused_sources), leaves that kdamond alone and demotes an idle buffer with the other
# sources. Then, where the guest kernel has the lockdown LSM, lockdown=confidentiality: the
# sources whose BPF programs read kernel memory are refused with that reason, and kvtierd
# runs on.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
source "$(dirname "$0")/lib.sh"
out=$(vm_run --timeout 900 -- sh /kvtier/tests/vm/kernel_refuses_guest.sh)
printf '%s\n' "$out" | python3 "$KVTIER_SOURCE_DIR/tests/vm/check_kernel_refuses.py"
