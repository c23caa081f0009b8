#!/bin/sh
# Guest side of vm.daemon_demotes: kvtierd, started from a config that selects
# kvtier_hotset by comm, against a 64 MiB buffer whose 8 MiB are kept hot.
# Prints KEY=VALUE and JSON lines that tests/vm/check_daemon.py judges.
set -eu
# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
placement_config hotset '^kvtier_hotset$'
# --flush-tlb: under TCG the accessed bits DAMON reads are only set again
# after a TLB flush (see tests/vm/hotset.cpp).
kvtier_hotset --total-mib 64 --hot-mib 8 --seconds ${KVTIER_TEST_SECONDS:-60} --flush-tlb 1 \
  > /tmp/hotset.json &
hp=$!
sleep 1
kvtierd --config /tmp/kvtier.toml --foreground > /tmp/kvtierd.log 2>&1 &
kp=$!
sleep ${KVTIER_TEST_WAIT:-40}
pause_for_figures
echo "HOTSET=$(cat /tmp/hotset.json)"
echo "TARGETS=$($ctl targets --json | tr -d '\n ')"
echo "DUMP=$($ctl dump --compact)"
# The kernel's own count of the process's pages on node 1, over all its mappings.
echo "NUMA_MAPS_N1_PAGES=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^N1=/) s += substr($i, 4) }
  END { print s + 0 }' /proc/$hp/numa_maps)"
$ctl explain "$hp" | head -20 >&2
$ctl status >&2
set -- $(sed 's/[^0-9 ]//g' /tmp/hotset.json)
# pid start end hot_start hot_end
echo "HOT=$(kvtier_page_nodes "$hp" "$4" "$5")"
echo "COLD_LOW=$(kvtier_page_nodes "$hp" "$2" "$4")"
echo "COLD_HIGH=$(kvtier_page_nodes "$hp" "$5" "$3")"
echo "KDAMONDS_ON_RUNNING=$(kdamonds_on)"
# Normal NUMA balancing on (bit 1) and a reload, which reads the kernel's knobs again: the
# NUMA hint faults now see DRAM pages too, so DAMON stands by at the next step (its kdamond
# off) while kvtierd runs on (paused still: the figures above stay those of one moment).
echo 1 > /proc/sys/kernel/numa_balancing
kill -HUP "$kp"
n=0
while [ "$(kdamonds_on)" != 0 ] && [ $n -lt 300 ]; do
  n=$((n + 1))
  sleep 0.1
done
echo "KDAMONDS_ON_BIT1=$(kdamonds_on)"
echo "STATUS_BIT1=$($ctl status --json | tr -d '\n')"
kill -TERM "$kp"
rc=0
wait "$kp" || rc=$?
echo "KVTIERD_EXIT=$rc"
echo "KDAMONDS_ON=$(kdamonds_on)"
echo "SOCKET_LEFT=$([ -e /tmp/kvtierd.sock ] && echo yes || echo no)"
kill "$hp" 2>/dev/null || true
echo "--- kvtierd log" >&2
cat /tmp/kvtierd.log >&2
