#!/bin/sh
# DAMOS migrate_cold (paddr, memcg + young filters) demotes the cold 56 MiB of
# a 64 MiB buffer whose first 8 MiB stay hot, and leaves the hot set on node 0.
set -eu
run=${KVTIER_VM_RUN:?set by ctest}
# NUMA balancing off, so only DAMOS decides where pages go.
exec "$run" --timeout 600 -- sh -c '
  echo 0 > /proc/sys/kernel/numa_balancing &&
  { grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup; } &&
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control &&
  mkdir -p /sys/fs/cgroup/kvt && echo $$ > /sys/fs/cgroup/kvt/cgroup.procs &&
  exec kvtier_mover_vmtest damos 90'
