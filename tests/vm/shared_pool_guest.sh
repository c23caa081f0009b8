#!/bin/sh
# Guest side of vm.shared_pool: kvtierd, started from a config that selects
# kvtier_shared_pool (both processes) by comm, against its 64 MiB memfd pool.
# Prints KEY=VALUE lines that tests/vm/check_shared_pool.py judges.
set -eu
# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
placement_config pool '^kvtier_shared_p'
# The pool's ownership and merged evidence are what this test checks: promotions at the
# next step, not kvtierd's between-step promotion of returned chunks (the default "auto",
# whose moved-bytes count ran 1023 pages short of the pool's bytes on node 1 here once).
sed -i '/^numa_balancing = "keep"/a promote_threshold = "first-access"' /tmp/kvtier.toml
rm -f /tmp/pool.stop
# --flush-tlb: under TCG the accessed bits DAMON reads are only set again
# after a TLB flush (see tests/vm/hotset.cpp).
kvtier_shared_pool --total-mib 64 --hot-mib 4 --hot-a-mib 8 --hot-b-mib 40 --seconds 500 \
  --stop-file /tmp/pool.stop --shared-cold-mib 8 --flush-tlb 1 > /tmp/pool.out &
wp=$!
n=0
while [ "$(cat /tmp/pool.out 2>/dev/null | grep -c '"role"')" -lt 2 ] && [ $n -lt 600 ]; do
  n=$((n + 1))
  sleep 0.1
done
grep '"role"' /tmp/pool.out | sed 's/^/POOL=/'
kvtierd --config /tmp/kvtier.toml --foreground > /tmp/kvtierd.log 2>&1 &
kp=$!
# a: the parent (the pool's owner, the lower pid: it maps only its hot part and
# the last 8 MiB); b: the child, which wrote the pool (all of it is in b's page
# tables). Where pages are is read through b, in b's addresses.
field() { grep "\"role\": \"$1\"" /tmp/pool.out | sed "s/.*\"$2\": \([0-9]*\).*/\1/"; }
pa=$(field a pid); sa=$(field a start); ha=$(field a hot_start); hae=$(field a hot_end)
pb=$(field b pid); sb=$(field b start); eb=$(field b end)
hb=$(field b hot_start); hbe=$(field b hot_end)
# The same file bytes in b's address space: a's hot part.
ha_in_b=$((sb + ha - sa)); hae_in_b=$((sb + hae - sa))
# Wait (at most 240 s) until kvtierd has moved the cold part: at least 48 of its
# 56 MiB on node 1; what counts is measured below, paused.
on1() {
  kvtier_page_nodes "$pb" "$sb" "$ha_in_b" "$hae_in_b" "$hb" "$hbe" "$eb" |
    sed -n 's/.*"1":\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }'
}
n=0
while [ "$(on1)" -lt $((48 << 20)) ] && [ $n -lt 120 ]; do
  n=$((n + 1))
  sleep 2
done
echo "WAITED_ROUNDS=$n"
pause_for_figures
echo "PIDS=$pa $pb"
echo "TARGETS=$($ctl targets --json | tr -d '\n ')"
echo "DUMP=$($ctl dump --compact)"
# Where the pool's pages are, through b (who maps all of them) and through a.
echo "HOT_A=$(kvtier_page_nodes "$pb" "$ha_in_b" "$hae_in_b")"
echo "HOT_A_VIA_A=$(kvtier_page_nodes "$pa" "$ha" "$hae")"
echo "HOT_B=$(kvtier_page_nodes "$pb" "$hb" "$hbe")"
echo "COLD_1=$(kvtier_page_nodes "$pb" "$sb" "$ha_in_b")"
echo "COLD_2=$(kvtier_page_nodes "$pb" "$hae_in_b" "$hb")"
echo "COLD_3=$(kvtier_page_nodes "$pb" "$hbe" "$eb")"
# The last 8 MiB: a read them once, so both map them (MPOL_MF_MOVE_ALL moved them).
ea=$(field a end)
echo "SHARED_COLD_VIA_A=$(kvtier_page_nodes "$pa" $((ea - (8 << 20))) "$ea")"
grep 'shared pool' /tmp/kvtierd.log | sed 's/^/POOL_LOG=/'
# The workload stops and checks every byte of the pool, in both processes.
touch /tmp/pool.stop
rc=0
wait "$wp" || rc=$?
echo "WORKLOAD_EXIT=$rc"
grep '^VERIFIED' /tmp/pool.out
kill -TERM "$kp"
rc=0
wait "$kp" || rc=$?
echo "KVTIERD_EXIT=$rc"
echo "--- kvtierd log" >&2
cat /tmp/kvtierd.log >&2
