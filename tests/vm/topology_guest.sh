#!/bin/sh
# Guest side of vm.topology (issue 37), in the CXL guest (scripts/vm/run --cxl):
# kvtierd demotes an idle 16 MiB buffer to the CXL node; then that node's memory
# blocks are offlined, part and then all of them, and onlined again, while
# kvtierd runs. Prints KEY=VALUE lines that tests/vm/check_topology.py judges.
set -eu
# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
sys=/sys/devices/system/node
cpu_less_node
echo "CXL_NODE=$cxl"
echo "BLOCKS=$(echo $blocks)"

# How fast a process writes (and reads back) 32 MiB on the CXL node: printed, for the soak's sizes.
t0=$(cut -d' ' -f1 /proc/uptime)
kvtierctl launch --node "$cxl" -- kvtier_fill_check --mib 32 --seconds 0 > /dev/null
echo "FILL32_ON_CXL_S=$(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { print b - a }')"

placement_config topology '^kvtier_fill_che'
# The faults source alone, NUMA balancing off: the buffer is idle after it is
# written, so every page turns cold and stays so (as in vm.pinned).
printf '[sources]\nuse = ["faults"]\n' >> /tmp/kvtier.toml
fill_buffer 16 /tmp/fill.json
pid=$fill_pid start=$fill_start end=$fill_end fp=$fill_pid
kvtierd --config /tmp/kvtier.toml --foreground > /tmp/kvtierd.log 2>&1 &
kp=$!

# The buffer's bytes on node $1 (kvtier_page_nodes: {"nodes":{"N":bytes}}).
on() { kvtier_page_nodes "$pid" "$start" "$end" | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
# Waits (at most 600 s of the guest's clock) until all 16 MiB are on node $1.
wait_all_on() {
  t=0
  while [ "$(on "$1")" != $((16 << 20)) ] && [ $t -lt 600 ]; do
    t=$((t + 1))
    sleep 1
  done
  echo "$t"
}
status() { $ctl status --json | tr -d '\n '; }
moved() { status | sed -n 's/.*"moved_bytes_total":\([0-9]*\).*/\1/p'; }

echo "DEMOTED_WAIT_S=$(wait_all_on "$cxl")"
echo "TARGETS_START=$(demotion_targets)"

# 1. Part of the node offline: every block but the last. The kernel migrates the
# pages on them to another node (node 0) or refuses; kvtierd demotes on to what is left.
last=$(echo $blocks | awk '{ print $NF }')
part=$(echo $blocks | awk '{ $NF = ""; print }')
set_blocks 0 $part
echo "PART_STATES=$(for b in $blocks; do printf '%s:%s ' "$b" "$(cat "$sys/node$cxl/$b/state")"; done)"
echo "PART_NODES=$(kvtier_page_nodes "$pid" "$start" "$end" | tr -d '\n')"
echo "PART_MEMTOTAL=$(sed -n 's/.*MemTotal: *\([0-9]*\) kB/\1/p' "$sys/node$cxl/meminfo")"
echo "PART_REDEMOTED_WAIT_S=$(wait_all_on "$cxl")"
echo "TARGETS_PART=$(demotion_targets)"

# 2. All of it offline: the node has no memory; kvtierd reports it gone and
# moves nothing there.
s_off=$(steps)
set_blocks 0 $last
s_done=$(steps)
echo "ALL_STATES=$(for b in $blocks; do printf '%s:%s ' "$b" "$(cat "$sys/node$cxl/$b/state")"; done)"
echo "ALL_MEMTOTAL=$(sed -n 's/.*MemTotal: *\([0-9]*\) kB/\1/p' "$sys/node$cxl/meminfo")"
wait_targets "" > /dev/null
s_seen=$(steps)
echo "STEPS_OFFLINE=$s_off $s_done $s_seen"
echo "ALL_NODES=$(kvtier_page_nodes "$pid" "$start" "$end" | tr -d '\n')"
m0=$(moved)
s0=$(steps)
n=0
while [ "$(steps)" -lt $((s0 + 5)) ] && [ $n -lt 6000 ]; do
  n=$((n + 1))
  sleep 0.1
done
echo "MOVED_WHILE_GONE=$m0 $(moved) over $(($(steps) - s0)) steps"
echo "GONE_NODES=$(kvtier_page_nodes "$pid" "$start" "$end" | tr -d '\n')"
echo "GONE_STATUS=$(status)"
$ctl status >&2
echo "GONE_STATUS_TEXT=$($ctl status | grep -c "node $cxl is no longer a demotion target" || true)"
echo "GONE_DUMP=$($ctl dump --compact | tr -d '\n')"

# 3. Online again: kvtierd demotes there again, without a restart.
set_blocks 1 $blocks
wait_targets "$cxl" > /dev/null
echo "ONLINE_REDEMOTED_WAIT_S=$(wait_all_on "$cxl")"
echo "ONLINE_NODES=$(kvtier_page_nodes "$pid" "$start" "$end" | tr -d '\n')"
echo "ONLINE_STATUS=$(status)"

kill -0 "$kp" && echo "KVTIERD_ALIVE=1"
kill -TERM "$fp"
wait "$fp" && echo "FILL_STATUS=0" || echo "FILL_STATUS=$?"
echo "FILL=$(tail -n 1 /tmp/fill.json)"
kill -TERM "$kp"
wait "$kp" && echo "KVTIERD_STATUS=0" || echo "KVTIERD_STATUS=$?"
echo "LOG_LOST=$(grep -c "topology: node $cxl is no longer a demotion target" /tmp/kvtierd.log || true)"
echo "LOG_BACK=$(grep -c "topology: node $cxl is a demotion target again" /tmp/kvtierd.log || true)"
echo "LOG_PART=$(grep -c "topology: node $cxl: memory online" /tmp/kvtierd.log || true)"
echo "--- kvtierd log" >&2
cat /tmp/kvtierd.log >&2
