#!/bin/sh
# Node 1 booted with 256 MiB, a 384 MiB buffer demoted to it: ENOMEM latches
# the node full (with a warning), every byte survives, promotion brings all back.
set -eu
run=${KVTIER_VM_RUN:?set by ctest}
exec "$run" --mem1 256 --timeout 600 -- sh -c '
  echo 0 > /proc/sys/kernel/numa_balancing && exec kvtier_mover_vmtest full'
