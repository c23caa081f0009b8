#!/bin/sh
# Movers in the tiered guest: a live checksummed buffer (THP and small pages)
# moved to node 1 and back while it is rewritten; a process exiting mid-move;
# io_uring registered buffers reported pinned. One guest boot for the three.
set -eu
run=${KVTIER_VM_RUN:?set by ctest}
# NUMA balancing off: it would pull pages the workload touches back to node 0
# behind the mover's back and make the residency checks meaningless.
exec "$run" --timeout 600 -- sh -c '
  echo 0 > /proc/sys/kernel/numa_balancing &&
  kvtier_mover_vmtest integrity && kvtier_mover_vmtest gone && kvtier_mover_vmtest pinned'
