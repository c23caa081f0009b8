#!/bin/sh
# The demo's guest side (scripts/demo.sh boots the guest and runs this): the
# KV-cache simulator serves the Mooncake trace at real time while kvtierd,
# started from its config, moves the KV blocks that went cold to node 1 (the
# CPU-less, slower node, as CXL memory appears) and keeps the hot ones on node 0.
# Every 15 s it prints the share of kvsim's reads that DRAM served and where the
# pool is; at the end, the benchmark's measurements (lines starting {"src":...},
# which scripts/demo.sh turns into one line of the benchmark's columns).
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

# As in scripts/bench.sh: the pool in 4 KiB pages, reads sampled per node every step. The demo
# stops kvsim itself (SIGINT, below); --duration only ends a kvsim left behind.
kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 256MiB --time-scale 1 \
  --duration $((seconds + 900)) --flush-tlb --no-hugepages --read-nodes-every 1 --stats-interval 1 \
  --truth /tmp/truth.csv > /tmp/kvsim.out 2> /tmp/kvsim.err &
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
[ -n "$pool" ] || { echo "demo: kvsim printed no start line:"; cat /tmp/kvsim.out /tmp/kvsim.err; exit 1; }
# The benchmark's probe: every pool page's node once a second, page maps with kvsim's truth.
kvtier_residency_probe "$sim" $pool --duration "$seconds" --map-every 30 --truth /tmp/truth.csv \
  > /tmp/probe.out 2> /tmp/probe.err &
probe=$!

# field, read_counters, pool_counters: the readers of kvsim's and the probe's lines.
. /kvtier/scripts/demo-lines.sh
# "DRAM served X% of the KV reads in the last 15 s (Y% since the start)": kvsim's
# cumulative per-node read counters (its last stats line) against the previous print's
# (kept in /tmp/reads.prev: this runs in a command substitution's subshell).
reads_line() {
  read -r total dram <<EOF2
$(grep '"event":"stats"' /tmp/kvsim.out | tail -n 1 | read_counters)
EOF2
  read -r prev_total prev_dram < /tmp/reads.prev
  echo "$total $dram" > /tmp/reads.prev
  # The conditions are computed apart: in the arguments of awk's printf a bare > redirects.
  shares=$(awk -v t="${total:-0}" -v d="${dram:-0}" -v pt="$prev_total" -v pd="$prev_dram" 'BEGIN {
    w = t - pt
    a = (w > 0) ? sprintf("%.0f%%", 100 * (d - pd) / w) : "n/a"
    b = (t > 0) ? sprintf("%.0f%%", 100 * d / t) : "n/a"
    printf "%s %s", a, b }')
  echo "DRAM served ${shares% *} of the KV reads in the last 15 s (${shares#* } since the start)"
}
# "the pool: A MiB (a%) on node 0 (DRAM), B MiB (b%) on node 1 (CXL-like)": the probe's last sample.
pool_line() {
  read -r n0 n1 <<EOF2
$(grep '"event":"sample"' /tmp/probe.out | tail -n 1 | pool_counters)
EOF2
  awk -v a="${n0:-0}" -v b="${n1:-0}" 'BEGIN { t = a + b; if (t == 0) t = 1
    printf "the pool: %.0f MiB (%.0f%%) on node 0 (DRAM), %.0f MiB (%.0f%%) on node 1 (CXL-like)",
      a / 1048576, 100 * a / t, b / 1048576, 100 * b / t }'
}
echo "0 0" > /tmp/reads.prev
echo "== kvsim pid $sim, KV pool $pool; kvtierd pid $daemon"
echo "== every 15 s: the share of kvsim's reads DRAM served, where the pool is, and kvtierctl targets"
t=0
while [ $t -lt "$seconds" ]; do
  sleep 15
  t=$((t + 15))
  echo "-- t=${t}s: $(reads_line); $(pool_line)"
  kvtierctl --socket /tmp/kvtierd.sock targets
done
wait "$probe" || true
echo
echo "== kvtierctl explain $sim (resident ranges, first 16)"
kvtierctl --socket /tmp/kvtierd.sock explain "$sim" --all | sed -n '1,2p'
kvtierctl --socket /tmp/kvtierd.sock explain "$sim" --all | grep -E '^0x.* [01] +[0-9.]+ ' | head -16
echo
echo "== kvtierctl heatmap $sim"
kvtierctl --socket /tmp/kvtierd.sock heatmap "$sim" --bins 64 | tail -12
# kvtierd's own count of its CPU (process seconds against its uptime, and the loop's by phase) for
# the closing line's price; "{}" when it no longer answers.
kvtierctl --socket /tmp/kvtierd.sock status --json > /tmp/kvtierd.status 2>/dev/null || echo "{}" > /tmp/kvtierd.status
# SIGINT ends kvsim cleanly: it verifies every block once more and reports. Either may be gone
# already (kvsim's --duration runs on the guest's clock, which jumps when a loaded host stalls
# the guest: the kernel then logs soft lockups); say so and go on to their reports.
kill -INT "$sim" 2>/dev/null || echo "demo: kvsim had already ended"
kvsim_status=0
wait "$sim" || kvsim_status=$?
kill -TERM "$daemon" 2>/dev/null || echo "demo: kvtierd had already exited (its log follows)"
wait "$daemon" || true
echo
echo "== kvsim's end (corrupted_bytes must be 0)"
grep '"event":"end"' /tmp/kvsim.out | tr ',' '\n' | grep -E '"(steps_per_s|read_bytes_per_s|corrupted_bytes|result)"'
echo "== kvtierd log (last lines)"
tail -5 /tmp/kvtierd.log
# The measurements, for scripts/demo.sh's closing line (bench/report.py reads them).
echo "{\"src\":\"bench\",\"event\":\"settings\",\"mode\":\"kvtier\",\"cold_age_s\":20}"
sed 's/^{/{"src":"kvsim",/' /tmp/kvsim.out
sed 's/^{/{"src":"probe",/' /tmp/probe.out
echo "{\"src\":\"bench\",\"event\":\"kvtierd_status\",\"status\":$(tr -d '\n' < /tmp/kvtierd.status)}"
echo "{\"src\":\"bench\",\"event\":\"done\",\"mode\":\"kvtier\",\"kvsim_status\":$kvsim_status}"
grep -q '"result":"ok"' /tmp/kvsim.out || { echo "demo: kvsim found corrupted KV data"; exit 1; }
