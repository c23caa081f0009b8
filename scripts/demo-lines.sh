#!/bin/sh
# The demo's readers of kvsim's and the probe's JSON lines (sourced by scripts/demo-guest.sh,
# and by tests/unit/demo_lines_test.sh against a recorded kvsim output). POSIX sh and sed only:
# the busybox guest has no JSON tool.

# The value of "KEY":N in the line on stdin (the first line that has it).
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" | head -n 1; }

# "TOTAL DRAM": the bytes kvsim's sampled reads came to (read_nodes.sampled_read_bytes) and
# those node 0 served (read_nodes.by_node."0"), from one kvsim stats line on stdin. The key is
# matched whole ([{,] before it), so late_by_node, which follows it, is not taken for it.
read_counters() {
  line=$(cat)
  total=$(printf '%s\n' "$line" | sed 's/.*"read_nodes"://' | field sampled_read_bytes)
  dram=$(printf '%s\n' "$line" | sed -n 's/.*"read_nodes":{.*[{,]"by_node":{\([^}]*\)}.*/{\1}/p' | field 0)
  echo "${total:-0} ${dram:-0}"
}

# "NODE0 NODE1": the pool's bytes on each node, from one probe sample line on stdin.
pool_counters() {
  nodes=$(sed -n 's/.*"bytes_by_node":{\([^}]*\)}.*/{\1}/p')
  n0=$(printf '%s\n' "$nodes" | field 0)
  n1=$(printf '%s\n' "$nodes" | field 1)
  echo "${n0:-0} ${n1:-0}"
}
