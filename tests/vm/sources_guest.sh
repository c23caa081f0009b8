#!/bin/sh
# Guest side of the source vm tests (busybox sh). Starts kvtier_hotset, runs
# one source against it with kvtier_source_run, and prints two lines for the
# host to check: "HOTSET <json>" and "RUN <json>".
# Usage: sources_guest.sh damon | hints
set -eu
mode=${1:?damon or hints}
case $mode in
  damon)
    kvtier_hotset --total-mib 64 --hot-mib 8 --hot-offset-mib 24 --flush-tlb 1 --seconds 60 \
      --go-file /tmp/go >/tmp/hotset.json &
    source=damon
    seconds=15
    ;;
  hints)
    # Tiering mode: NUMA balancing samples the pages on the lower tier (node
    # 1) and promotes the hot ones; scan at once and often.
    echo 2 >/proc/sys/kernel/numa_balancing
    nb=/sys/kernel/debug/sched/numa_balancing
    echo 0 >$nb/scan_delay_ms
    echo 100 >$nb/scan_period_min_ms
    echo 1000 >$nb/scan_period_max_ms
    kvtier_hotset --total-mib 64 --hot-mib 8 --hot-offset-mib 8 --node1-mib 32 --threads 2 \
      --seconds 60 --go-file /tmp/go >/tmp/hotset.json &
    source=faults
    seconds=15
    ;;
  *)
    echo "sources_guest.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
hp=$!
n=0
until [ -s /tmp/hotset.json ]; do
  n=$((n + 1))
  [ $n -gt 1200 ] && { echo "kvtier_hotset did not start within 120 s" >&2; exit 1; }
  sleep 0.1
done
# The hot loop starts once the source watches the process.
kvtier_source_run $source $hp $seconds /tmp/ready >/tmp/run.json &
rp=$!
n=0
until [ -e /tmp/ready ]; do
  n=$((n + 1))
  [ $n -gt 1200 ] && { echo "kvtier_source_run did not get ready within 120 s" >&2; exit 1; }
  sleep 0.1
done
touch /tmp/go
wait $rp
kill $hp 2>/dev/null || true
echo "HOTSET $(cat /tmp/hotset.json)"
echo "RUN $(cat /tmp/run.json)"
