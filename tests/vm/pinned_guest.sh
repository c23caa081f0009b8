#!/bin/sh
# Guest side of vm.pinned (issue 34). Prints KEY=VALUE lines that
# tests/vm/check_pinned.py judges.
#  1. Where a buffer written on node 1 is once io_uring pins it (FOLL_LONGTERM
#     migrates pages out of ZONE_MOVABLE first), with node 1's zones: bound there
#     by the program itself (mbind), and by kvtierctl launch --node 1.
#  2. kvtierd against a process that pinned 18 of its 32 MiB: it reports the
#     pinned bytes, never asks move_pages for them, and moves the other 14 MiB
#     to node 1.
set -eu
echo 0 > /proc/sys/kernel/numa_balancing
echo "KERNEL=$(uname -r)"
# Node 1's zones with memory: "Normal:PAGES Movable:PAGES".
echo "NODE1_ZONES=$(awk '/^Node 1, zone/ { z = $4 } /^ +managed/ && z != "" { if ($2 > 0) printf "%s:%s ", z, $2; z = "" }' /proc/zoneinfo)"
echo "ON_NODE1=$(kvtier_pin_hold --total-mib 8 --pin-mib 4 --pin-offset-mib 2 --pin-node1 1 --seconds 0)"
# The same buffer, unchanged program, placed by kvtierctl launch (MPOL_BIND to node 1) before the pin.
echo "LAUNCHED=$(kvtierctl launch --node 1 -- kvtier_pin_hold --total-mib 8 --pin-mib 4 --pin-offset-mib 2 --seconds 0)"

# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
placement_config pinned '^kvtier_pin_hold$'
# The faults source alone (first touches, NUMA balancing off): the process is idle
# after it wrote its buffer, so every page turns cold and stays so. The test
# asserts kvtier's own mechanics, not a source's view (with damon and dirty too the
# demoted pages were seen accessed and promoted again in an earlier run).
printf '[sources]\nuse = ["faults"]\n' >> /tmp/kvtier.toml
kvtierd --check-config --config /tmp/kvtier.toml
kvtier_pin_hold --total-mib 32 --pin-mib 18 --pin-offset-mib 8 --seconds 900 > /tmp/pin.json &
hp=$!
n=0
while [ ! -s /tmp/pin.json ] && [ $n -lt 600 ]; do
  n=$((n + 1))
  sleep 0.1
done
echo "HOLD=$(cat /tmp/pin.json)"
echo "FDINFO_BUFS=$(for f in /proc/$hp/fd/*; do
  [ "$(readlink "$f")" = "anon_inode:[io_uring]" ] && sed -n '/^UserBufs/,/^[A-Z]/p' "/proc/$hp/fdinfo/${f##*/}"
done | tr '\n\t' '  ')"
echo "VMPIN=$(sed -n 's/^VmPin:[[:space:]]*//p' /proc/$hp/status)"
kvtierd --config /tmp/kvtier.toml --foreground > /tmp/kvtierd.log 2>&1 &
kp=$!
set -- $(sed 's/"[a-z_]*_before".*//; s/[^0-9 ]/ /g' /tmp/pin.json)
# pid start end pin_start pin_end
pid=$1 start=$2 end=$3 pin_start=$4 pin_end=$5
# Until the unpinned 14 MiB are all on node 1 (at most 10 min of the guest's clock).
on1() { kvtier_page_nodes "$pid" "$start" "$pin_start" "$pin_end" "$end" |
  sed -n 's/.*"1":\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }'; }
t=0
while [ "$(on1)" -lt $((14 << 20)) ] && [ $t -lt 600 ]; do
  t=$((t + 1))
  sleep 1
done
echo "WAITED_S=$t"
# Five more steps with nothing left to move but the pinned range.
s0=$(steps)
n=0
while [ "$(steps)" -lt $((s0 + 5)) ] && [ $n -lt 600 ]; do
  n=$((n + 1))
  sleep 0.2
done
pause_for_figures
echo "STEPS=$(steps)"
echo "UNPINNED=$(kvtier_page_nodes "$pid" "$start" "$pin_start" "$pin_end" "$end" | tr -d '\n')"
echo "PINNED=$(kvtier_page_nodes "$pid" "$pin_start" "$pin_end")"
echo "TARGETS=$($ctl targets --json | tr -d '\n')"
echo "DUMP=$($ctl dump --compact)"
echo "EXPLAIN=$($ctl explain --json "$pid" | tr -d '\n')"
$ctl targets >&2
$ctl status >&2
echo "STATUS_PINNED=$($ctl status | grep -c '^  pinned ' || true)"
kill -TERM "$kp"
wait "$kp" || true
kill "$hp" 2>/dev/null || true
echo "--- kvtierd log" >&2
cat /tmp/kvtierd.log >&2
