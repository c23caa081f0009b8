#!/bin/sh
# Prints the sysfs files kvtier's topology reader uses, as a stream that
# scripts/unpack-topology.sh turns back into a fixture tree. POSIX sh, so it
# also runs in the guest's busybox: `scripts/vm/run -- /kvtier/scripts/capture-topology.sh`.
set -u
sys=${1:-/sys}
emit() {
  [ -f "$1" ] || return 0
  echo "=== ${1#"$sys"/}"
  cat "$1"
}
for f in online possible has_cpu has_memory; do emit "$sys/devices/system/node/$f"; done
for d in "$sys"/devices/system/node/node[0-9]*; do
  for f in cpulist meminfo distance; do emit "$d/$f"; done
  for f in read_latency write_latency read_bandwidth write_bandwidth; do
    emit "$d/access0/initiators/$f"
  done
done
for d in "$sys"/devices/virtual/memory_tiering/memory_tier*; do emit "$d/nodelist"; done
echo "=== end"
