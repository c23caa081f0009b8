#!/bin/sh
# The demo's guest side (scripts/demo.sh boots the guest and runs this): the
# KV-cache simulator serves the Mooncake trace at real time while kvtierd,
# started from its config, moves the KV blocks that went cold to node 1 (the
# CPU-less, slower node, as CXL memory appears) and keeps the hot ones on node 0.
set -eu
seconds=${KVTIER_DEMO_SECONDS:-90}
# The kernel's own NUMA balancing would move pages too; the demo shows kvtier's.
echo 0 > /proc/sys/kernel/numa_balancing

echo "== kvtierctl nodes: node 1 is CPU-less and in a lower memory tier"
kvtierctl nodes
echo

cat > /tmp/kvtier.toml <<'CFG'
[daemon]
interval = "2s"
[telemetry]
socket = "/tmp/kvtierd.sock"
socket_group = "root"
[sources]
damon_min_regions = 200
damon_max_regions = 2000
[limits]
min_free = "64MiB"
[[group]]
name = "kv-cache"
[group.select]
comm = ["^kvsim$"]
[group.policy]
cold_age = "20s"
half_life = "10s"
min_residence = "20s"
CFG
echo "== kvtierd --check-config"
kvtierd --check-config --config /tmp/kvtier.toml

# The demo stops kvsim itself (SIGINT, below); --duration only ends a kvsim left behind.
kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 256MiB --time-scale 1 \
  --duration $((seconds + 900)) --flush-tlb --stats-interval 10 > /tmp/kvsim.out 2>&1 &
sim=$!
sleep 1
kvtierd --config /tmp/kvtier.toml --foreground > /tmp/kvtierd.log 2>&1 &
daemon=$!

# kvsim prints its pid and KV pool range once the pool is populated.
pool=""
for _ in $(seq 60); do
  pool=$(sed -n 's/.*"pool":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/p' /tmp/kvsim.out | head -1)
  [ -n "$pool" ] && break
  sleep 1
done
[ -n "$pool" ] || { echo "demo: kvsim printed no start line:"; cat /tmp/kvsim.out; exit 1; }

# "N MiB on node 0, M MiB on node 1" for the pool, from move_pages status.
pool_nodes() {
  kvtier_page_nodes "$sim" $pool | awk '{
    n0 = 0; n1 = 0
    if (match($0, /"0":[0-9]+/)) n0 = substr($0, RSTART + 4, RLENGTH - 4)
    if (match($0, /"1":[0-9]+/)) n1 = substr($0, RSTART + 4, RLENGTH - 4)
    t = n0 + n1
    printf "KV pool: %.1f MiB on node 0 (DRAM), %.1f MiB on node 1 (CXL-like): %.0f%% demoted\n",
      n0 / 1048576, n1 / 1048576, t ? 100 * n1 / t : 0 }'
}
echo "== kvsim pid $sim, KV pool $pool; kvtierd pid $daemon"
echo "== every 15 s: the KV pool's pages per node (move_pages status), and kvtierctl targets"
t=0
while [ $t -lt "$seconds" ]; do
  sleep 15
  t=$((t + 15))
  echo "-- t=${t}s: $(pool_nodes)"
  kvtierctl --socket /tmp/kvtierd.sock targets
done
echo
echo "== kvtierctl explain $sim (resident ranges, first 16)"
kvtierctl --socket /tmp/kvtierd.sock explain "$sim" --all | sed -n '1,2p'
kvtierctl --socket /tmp/kvtierd.sock explain "$sim" --all | grep -E '^0x.* [01] +[0-9.]+ ' | head -16
echo
echo "== kvtierctl heatmap $sim"
kvtierctl --socket /tmp/kvtierd.sock heatmap "$sim" --bins 64 | tail -12
# SIGINT ends kvsim cleanly: it verifies every block once more and reports. Either may be gone
# already (kvsim's --duration runs on the guest's clock, which jumps when a loaded host stalls
# the guest: the kernel then logs soft lockups); say so and go on to their reports.
kill -INT "$sim" 2>/dev/null || echo "demo: kvsim had already ended"
wait "$sim" || true
kill -TERM "$daemon" 2>/dev/null || echo "demo: kvtierd had already exited (its log follows)"
wait "$daemon" || true
echo
echo "== kvsim's end (corrupted_bytes must be 0)"
tail -1 /tmp/kvsim.out | tr ',' '\n' | grep -E '"(steps_per_s|read_bytes_per_s|corrupted_bytes|result)"'
grep -q '"result":"ok"' /tmp/kvsim.out || { echo "demo: kvsim found corrupted KV data"; exit 1; }
echo "== kvtierd log (last lines)"
tail -5 /tmp/kvtierd.log
