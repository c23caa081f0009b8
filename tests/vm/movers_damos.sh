#!/bin/sh
# DAMOS as kvtier's DamosMover sets it up (paddr, migrate_cold to node 1, memcg + young
# filters) on a 64 MiB buffer whose first 8 MiB stay hot, with a cold process outside the
# memory cgroup beside it. Asserted exactly: the scheme read back from sysfs, the kernel's
# applied bytes and the mover's counts, pages on node 1 only from the cgroup, no byte changed
# (see case_damos in tests/vm/mover_vmtest.cpp). How much of the hot set DAMOS keeps on node 0
# is printed, not asserted: it is the kernel's quality under TCG timing.
set -eu
run=${KVTIER_VM_RUN:?set by ctest}
# NUMA balancing off, so only DAMOS decides where pages go.
exec "$run" --timeout 600 -- sh -c '
  echo 0 > /proc/sys/kernel/numa_balancing &&
  { grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup; } &&
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control &&
  mkdir -p /sys/fs/cgroup/kvt &&
  exec kvtier_mover_vmtest damos 60 /sys/fs/cgroup/kvt'
