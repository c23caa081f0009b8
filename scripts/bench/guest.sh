#!/bin/sh
# Guest side of scripts/bench.sh: one mode of the tiering benchmark, run as root in the busybox
# guest (scripts/vm/run). The same workload, the same memory layout and the same probe in every
# mode; only what moves pages differs.
#
# Usage: guest.sh MODE DURATION [KVSIM ARGS...]
#   MODE  none    no tiering: NUMA balancing off, demotion off
#         kernel  the kernel's own tiering: numa_balancing=2 (promote hot pages from the lower
#                 tier on hint faults) + demotion_enabled (reclaim demotes instead of dropping)
#         damos   DAMON alone: a paddr kdamond with migrate_cold (-> node 1) and migrate_hot
#                 (-> node 0) schemes limited to kvsim's memory cgroup, set through sysfs
#         kvtier  kvtierd --config (a generated TOML selecting kvsim by comm)
#   DURATION  seconds of workload measured (kvsim runs a little longer and is then stopped)
# Settings come from the environment (defaults below); every one is printed in the "settings"
# event.
#
# Output: JSON lines on stdout, each with a "src": "bench" (settings, layout, mode status,
# DAMOS stats, kvtierd status), "kvsim" (kvsim's own events), "probe" (kvtier_residency_probe:
# per-second residency, page maps with ground truth). Exit status 0 when the run completed
# (whatever it measured), 1 when the mode could not be set up (an "error" event says why).
set -u
mode=${1:?usage: guest.sh MODE DURATION [KVSIM ARGS...]}
duration=${2:?usage: guest.sh MODE DURATION [KVSIM ARGS...]}
shift 2

MAP_EVERY=${MAP_EVERY:-30}            # page map + ground truth every N probe samples (1 s each)
COLD_AGE_S=${COLD_AGE_S:-10}          # what "cold" means, for every agent that takes an age
# DAMOS: monitoring and the two schemes (see docs/benchmarks.md for the reasoning).
# kvsim reads a hot page about once a second (one paced decode step): a sample interval of
# 0.5 s sees such a page accessed in about half the samples; 10 samples an aggregation.
DAMON_SAMPLE_US=${DAMON_SAMPLE_US:-500000}
DAMON_AGGR_US=${DAMON_AGGR_US:-5000000}
DAMON_UPDATE_US=${DAMON_UPDATE_US:-5000000}
# With DAMON's default 10 regions over 1.25 GiB of physical memory, every region mixes hot and
# cold pages (measured: 13 regions of ~120 MiB); 200 regions at least keeps them under 7 MiB.
DAMON_MIN_REGIONS=${DAMON_MIN_REGIONS:-200}
DAMON_MAX_REGIONS=${DAMON_MAX_REGIONS:-2000}
DAMOS_COLD_NR_MAX=${DAMOS_COLD_NR_MAX:-1}         # nr_accesses per aggregation, at most
DAMOS_COLD_APPLY_US=${DAMOS_COLD_APPLY_US:-5000000}
DAMOS_HOT_NR_MIN=${DAMOS_HOT_NR_MIN:-1}
DAMOS_HOT_APPLY_US=${DAMOS_HOT_APPLY_US:-5000000}
DAMOS_QUOTA_MS=${DAMOS_QUOTA_MS:-200}             # CPU per reset interval, each scheme
DAMOS_QUOTA_BYTES=${DAMOS_QUOTA_BYTES:-134217728} # bytes per reset interval, each scheme
DAMOS_QUOTA_RESET_MS=${DAMOS_QUOTA_RESET_MS:-1000}
# kvtier
KVTIER_CHECK_AFTER_S=${KVTIER_CHECK_AFTER_S:-20}  # kvtierd must manage kvsim by then

work=/tmp/bench
mkdir -p "$work"
cg=/sys/fs/cgroup/kvsim
damon=/sys/kernel/mm/damon/admin/kdamonds

emit() { echo "{\"src\":\"bench\",$1}"; }
# A JSON string of $1 (quotes, backslashes and control characters escaped).
jstr() { printf '%s' "$1" | awk 'BEGIN{ORS=""; print "\""} {gsub(/\\/,"\\\\"); gsub(/"/,"\\\""); gsub(/\t/," "); if (NR>1) print "\\n"; print} END{print "\""}'; }
die() {
  emit "\"event\":\"error\",\"mode\":\"$mode\",\"what\":$(jstr "$1")"
  exit 1
}
put() { # put VALUE FILE: a sysfs write that names the file when it fails
  echo "$1" >"$2" 2>/dev/null || die "cannot write '$1' to $2"
}
readv() { cat "$1" 2>/dev/null || echo null; }

# Node $1's physical memory as "start end" lines (memory blocks merged where contiguous).
node_ranges() {
  bs=$((0x$(cat /sys/devices/system/memory/block_size_bytes)))
  for m in /sys/devices/system/node/node"$1"/memory[0-9]*; do echo "${m##*memory}"; done | sort -n |
    awk -v bs="$bs" 'NR == 1 { s = $1; e = $1 + 1; next }
      $1 == e { e++; next }
      { printf "%d %d\n", s * bs, e * bs; s = $1; e = $1 + 1 }
      END { if (NR) printf "%d %d\n", s * bs, e * bs }'
}

meminfo_json() {
  first=1
  printf '{'
  for n in /sys/devices/system/node/node[0-9]*; do
    id=${n##*node}
    total=$(awk '/MemTotal/ { print $4 }' "$n/meminfo")
    free=$(awk '/MemFree/ { print $4 }' "$n/meminfo")
    [ $first = 1 ] || printf ','
    first=0
    printf '"%s":{"total_kib":%s,"free_kib":%s}' "$id" "$total" "$free"
  done
  printf '}'
}

# --- the same starting point for every mode ----------------------------------------------
# The guest boots with numa_balancing=1; every mode starts from "off" and turns on its own.
put 0 /proc/sys/kernel/numa_balancing
put false /sys/kernel/mm/numa/demotion_enabled
# The pool in 4 KiB pages (a 2 MiB page holds chunks of 64 blocks and moves whole).
put "${GUEST_THP:-never}" /sys/kernel/mm/transparent_hugepage/enabled
grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup ||
  die "cannot mount cgroup2 on /sys/fs/cgroup"
put +memory /sys/fs/cgroup/cgroup.subtree_control
mkdir -p "$cg" || die "cannot create $cg"

emit "\"event\":\"layout\",\"mode\":\"$mode\",\"kernel\":$(jstr "$(uname -r)"),\"nodes\":$(meminfo_json),\"memory_tiers\":$(jstr "$(for t in /sys/devices/virtual/memory_tiering/memory_tier*; do echo "${t##*/}: $(cat "$t/nodelist")"; done 2>/dev/null)")"

damos_start() {
  [ -d "$damon" ] || die "no DAMON sysfs ($damon): the kernel lacks CONFIG_DAMON_SYSFS"
  put 1 "$damon/nr_kdamonds"
  k=$damon/0
  put 1 "$k/contexts/nr_contexts"
  c=$k/contexts/0
  put paddr "$c/operations"
  put "$DAMON_SAMPLE_US" "$c/monitoring_attrs/intervals/sample_us"
  put "$DAMON_AGGR_US" "$c/monitoring_attrs/intervals/aggr_us"
  put "$DAMON_UPDATE_US" "$c/monitoring_attrs/intervals/update_us"
  put "$DAMON_MAX_REGIONS" "$c/monitoring_attrs/nr_regions/max"
  put "$DAMON_MIN_REGIONS" "$c/monitoring_attrs/nr_regions/min"
  put 1 "$c/targets/nr_targets"
  ranges=$( (node_ranges 0; node_ranges 1))
  put "$(echo "$ranges" | wc -l)" "$c/targets/0/regions/nr_regions"
  i=0
  echo "$ranges" | while read -r s e; do
    put "$s" "$c/targets/0/regions/$i/start"
    put "$e" "$c/targets/0/regions/$i/end"
    i=$((i + 1))
  done || exit 1
  # DAMOS_DEBUG=1 adds a stat scheme over everything, to show the regions DAMON sees.
  put $((2 + ${DAMOS_DEBUG:-0})) "$c/schemes/nr_schemes"
  if [ "${DAMOS_DEBUG:-0}" = 1 ]; then
    put stat "$c/schemes/2/action"
    put none "$c/schemes/2/watermarks/metric"
    put 18446744073709551615 "$c/schemes/2/access_pattern/sz/max"
    put 4294967295 "$c/schemes/2/access_pattern/nr_accesses/max"
    put 4294967295 "$c/schemes/2/access_pattern/age/max"
  fi
  # scheme 0: cold kvsim pages on node 0 -> node 1; scheme 1: hot kvsim pages on node 1 -> 0.
  for i in 0 1; do
    d=$c/schemes/$i
    if [ $i = 0 ]; then
      action=migrate_cold to=1 other=1 nr_min=0 nr_max=$DAMOS_COLD_NR_MAX
      age_min=$((COLD_AGE_S * 1000000 / DAMON_AGGR_US)) apply=$DAMOS_COLD_APPLY_US young=Y
    else
      action=migrate_hot to=0 other=0 nr_min=$DAMOS_HOT_NR_MIN nr_max=4294967295
      age_min=0 apply=$DAMOS_HOT_APPLY_US young=N
    fi
    put $action "$d/action"
    put $to "$d/target_nid"
    put "$apply" "$d/apply_interval_us"
    put 4096 "$d/access_pattern/sz/min"
    put 18446744073709551615 "$d/access_pattern/sz/max"
    put "$nr_min" "$d/access_pattern/nr_accesses/min"
    put "$nr_max" "$d/access_pattern/nr_accesses/max"
    put "$age_min" "$d/access_pattern/age/min"
    put 4294967295 "$d/access_pattern/age/max"
    put "$DAMOS_QUOTA_MS" "$d/quotas/ms"
    put "$DAMOS_QUOTA_BYTES" "$d/quotas/bytes"
    put "$DAMOS_QUOTA_RESET_MS" "$d/quotas/reset_interval_ms"
    put 0 "$d/quotas/weights/sz_permil"
    put $([ $i = 0 ] && echo 0 || echo 1000) "$d/quotas/weights/nr_accesses_permil"
    put $([ $i = 0 ] && echo 1000 || echo 0) "$d/quotas/weights/age_permil"
    put none "$d/watermarks/metric"
    # Filters (6.12: each one excludes the pages it matches when matching=Y, the pages it does
    # not match when matching=N): only kvsim's cgroup; skip pages young since the scheme last
    # looked (cold) or not young (hot); skip pages already on the destination node.
    other_ranges=$(node_ranges $other)
    nf=$((2 + $(echo "$other_ranges" | wc -l)))
    put $nf "$d/filters/nr_filters"
    put memcg "$d/filters/0/type"
    put /kvsim "$d/filters/0/memcg_path"
    put N "$d/filters/0/matching"
    put young "$d/filters/1/type"
    put $young "$d/filters/1/matching"
    j=2
    echo "$other_ranges" | while read -r s e; do
      put addr "$d/filters/$j/type"
      put "$s" "$d/filters/$j/addr_start"
      put "$e" "$d/filters/$j/addr_end"
      put Y "$d/filters/$j/matching"
      j=$((j + 1))
    done || exit 1
  done
  put on "$k/state"
  emit "\"event\":\"damos\",\"ranges\":$(jstr "$ranges"),\"sample_us\":$DAMON_SAMPLE_US,\"aggr_us\":$DAMON_AGGR_US,\"update_us\":$DAMON_UPDATE_US,\"regions\":[$DAMON_MIN_REGIONS,$DAMON_MAX_REGIONS],\"cold\":{\"nr_accesses\":[0,$DAMOS_COLD_NR_MAX],\"age_min_aggr\":$((COLD_AGE_S * 1000000 / DAMON_AGGR_US)),\"apply_interval_us\":$DAMOS_COLD_APPLY_US,\"filters\":\"memcg /kvsim only, skip young, skip node 1\"},\"hot\":{\"nr_accesses_min\":$DAMOS_HOT_NR_MIN,\"apply_interval_us\":$DAMOS_HOT_APPLY_US,\"filters\":\"memcg /kvsim only, skip not young, skip node 0\"},\"quota\":{\"ms\":$DAMOS_QUOTA_MS,\"bytes\":$DAMOS_QUOTA_BYTES,\"reset_interval_ms\":$DAMOS_QUOTA_RESET_MS}"
}

damos_stats() {
  k=$damon/0
  echo update_schemes_stats >"$k/state" 2>/dev/null
  if [ "${DAMOS_DEBUG:-0}" = 1 ]; then
    echo update_schemes_tried_regions >"$k/state"
    for i in 0 1 2; do
      for r in "$k/contexts/0/schemes/$i/tried_regions"/[0-9]*; do
        [ -d "$r" ] || continue
        emit "\"event\":\"damos_region\",\"scheme\":$i,\"start\":$(cat "$r/start"),\"end\":$(cat "$r/end"),\"nr_accesses\":$(cat "$r/nr_accesses"),\"age\":$(cat "$r/age")"
      done
    done
  fi
  for i in 0 1; do
    s=$k/contexts/0/schemes/$i/stats
    emit "\"event\":\"damos_stats\",\"scheme\":$i,\"action\":\"$(cat "$k/contexts/0/schemes/$i/action")\",\"nr_tried\":$(readv "$s/nr_tried"),\"sz_tried\":$(readv "$s/sz_tried"),\"nr_applied\":$(readv "$s/nr_applied"),\"sz_applied\":$(readv "$s/sz_applied"),\"qt_exceeds\":$(readv "$s/qt_exceeds")"
  done
}

# The shipped config (systemd/kvtier.toml) with only the selector set to kvsim; the control
# socket and its group are moved where the busybox guest has them. KVTIER_CONFIG=FILE (a path
# in the guest) runs another config instead, for experiments.
kvtier_config() {
  if [ -n "${KVTIER_CONFIG:-}" ]; then
    cat "$KVTIER_CONFIG"
    return
  fi
  echo "# Generated by scripts/bench/guest.sh for the benchmark's kvtier mode: the shipped config,"
  echo "# with the selector set to kvsim and the control socket in $work."
  sed -e "s#^socket = .*#socket = \"$work/kvtierd.sock\"#" \
    -e 's#^socket_group = .*#socket_group = "root"#' \
    -e 's#^comm = .*#comm = ["^kvsim$"]#' \
    -e 's#^cmdline = .*#cmdline = []#' /kvtier/systemd/kvtier.toml
}

kvtierd_pid=
kvtier_start() {
  command -v kvtierd >/dev/null || die "kvtierd is not in the build"
  # The busybox guest has /etc/passwd only; the control socket's group must resolve.
  grep -q '^root:' /etc/group 2>/dev/null || echo 'root:x:0:' >>/etc/group
  kvtier_config >"$work/kvtier.toml"
  emit "\"event\":\"kvtier_config\",\"toml\":$(jstr "$(cat "$work/kvtier.toml")")"
  if ! msg=$(kvtierctl config check "$work/kvtier.toml" 2>&1); then
    emit "\"event\":\"unavailable\",\"mode\":\"kvtier\",\"reason\":$(jstr "kvtierctl config check rejects the generated config: $(echo "$msg" | tail -n 3 | tr '\n' ' ')")"
    exit 0
  fi
  KVTIER_REGION_MIN_SHARE=${KVTIER_REGION_MIN_SHARE:-0.5} kvtierd --config "$work/kvtier.toml" --foreground --socket "$work/kvtierd.sock" \
    >"$work/kvtierd.log" 2>&1 &
  kvtierd_pid=$!
  sleep 2
  if ! kill -0 "$kvtierd_pid" 2>/dev/null; then
    wait "$kvtierd_pid"
    rc=$?
    emit "\"event\":\"unavailable\",\"mode\":\"kvtier\",\"reason\":$(jstr "kvtierd exited $rc at start: $(tail -n 2 "$work/kvtierd.log" | tr '\n' ' ')")"
    exit 0
  fi
}

# True when kvtierd reports kvsim ($1) as a managed target (its residency gauge).
kvtier_manages() {
  timeout 20 kvtierctl --socket "$work/kvtierd.sock" dump --compact >"$work/kvtierd.dump" 2>&1 &&
    grep -q "\"pid\":\"$1\"" "$work/kvtierd.dump"
}

case $mode in
  none) ;;
  kernel)
    put 2 /proc/sys/kernel/numa_balancing
    put true /sys/kernel/mm/numa/demotion_enabled
    emit "\"event\":\"kernel_tiering\",\"numa_balancing\":$(cat /proc/sys/kernel/numa_balancing),\"demotion_enabled\":\"$(cat /sys/kernel/mm/numa/demotion_enabled)\",\"promote_rate_limit_MBps\":$(readv /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps),\"hot_threshold_ms\":$(readv /sys/kernel/debug/sched/numa_balancing/hot_threshold_ms),\"scan_period_min_ms\":$(readv /sys/kernel/debug/sched/numa_balancing/scan_period_min_ms),\"watermark_scale_factor\":$(readv /proc/sys/vm/watermark_scale_factor)"
    ;;
  damos) damos_start ;;
  kvtier) kvtier_start ;;
  *) die "unknown mode '$mode' (none, kernel, damos, kvtier)" ;;
esac

# --- the workload, in its own memory cgroup, and the probe beside it ----------------------
# kvsim runs longer than the measurement; the probe's last sample (with the final page map and
# ground truth) ends the measurement, then kvsim is stopped and prints its end event.
sh -c "echo \$\$ > $cg/cgroup.procs && exec kvsim --duration $((duration + 60)) --truth $work/truth.csv $*" \
  >"$work/kvsim.out" 2>"$work/kvsim.err" &
kvsim_pid=$!
n=0
until grep -q '"event":"start"' "$work/kvsim.out" 2>/dev/null; do
  n=$((n + 1))
  if [ $n -gt 600 ] || ! kill -0 $kvsim_pid 2>/dev/null; then
    die "kvsim did not start: $(tail -n 3 "$work/kvsim.err" | tr '\n' ' ')"
  fi
  sleep 0.1
done
start_line=$(grep -m1 '"event":"start"' "$work/kvsim.out")
pool=$(echo "$start_line" | sed 's/.*"pool":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/')
set -- $pool
pool_start=$1 pool_end=$2
emit "\"event\":\"settings\",\"mode\":\"$mode\",\"duration_s\":$duration,\"cold_age_s\":$COLD_AGE_S,\"map_every\":$MAP_EVERY,\"kvsim_pid\":$kvsim_pid"

kvtier_probe_pid=
if [ "$mode" = kvtier ]; then
  # Readiness: within KVTIER_CHECK_AFTER_S kvtierd must report kvsim as a target; a daemon that
  # runs but manages nothing would only repeat the no-tiering row.
  (
    sleep "$KVTIER_CHECK_AFTER_S"
    if ! kill -0 "$kvtierd_pid" 2>/dev/null; then
      echo "kvtierd exited during the run: $(tail -n 2 "$work/kvtierd.log" | tr '\n' ' ')" >"$work/kvtier.unavailable"
    elif ! kvtier_manages $kvsim_pid; then
      if grep -q '^{' "$work/kvtierd.dump"; then
        echo "kvtierd runs but does not manage kvsim after ${KVTIER_CHECK_AFTER_S} s (kvtierctl dump has no series labelled with pid $kvsim_pid: its control loop selects no target in this build)" >"$work/kvtier.unavailable"
      else
        echo "kvtierd runs but kvtierctl dump failed after ${KVTIER_CHECK_AFTER_S} s: $(tail -n 2 "$work/kvtierd.dump" | tr '\n' ' ')" >"$work/kvtier.unavailable"
      fi
    fi
  ) &
  kvtier_probe_pid=$!
fi

kvtier_residency_probe "$kvsim_pid" "$pool_start" "$pool_end" --duration "$duration" \
  --map-every "$MAP_EVERY" --truth "$work/truth.csv" >"$work/probe.out" 2>"$work/probe.err" &
probe_pid=$!
if [ -n "$kvtier_probe_pid" ]; then
  wait "$kvtier_probe_pid"
  if [ -s "$work/kvtier.unavailable" ]; then
    kill "$probe_pid" "$kvsim_pid" "$kvtierd_pid" 2>/dev/null
    wait "$probe_pid" "$kvsim_pid" "$kvtierd_pid"
    emit "\"event\":\"unavailable\",\"mode\":\"kvtier\",\"reason\":$(jstr "$(cat "$work/kvtier.unavailable")")"
    emit "\"event\":\"kvtierd_log\",\"tail\":$(jstr "$(tail -n 20 "$work/kvtierd.log")")"
    exit 0
  fi
fi
wait "$probe_pid"
# The kernel's own view of the same range right after the last sample, to check the probe.
hex=$(printf '%x' "$pool_start")
emit "\"event\":\"numa_maps\",\"pool_start\":$pool_start,\"line\":$(jstr "$(grep "^0*$hex " /proc/$kvsim_pid/numa_maps)")"
[ "$mode" = damos ] && damos_stats
if [ "$mode" = kvtier ]; then
  kvtier_manages $kvsim_pid
  emit "\"event\":\"kvtierd_dump\",\"dump\":$(jstr "$(cat "$work/kvtierd.dump")")"
  emit "\"event\":\"kvtierd_cpu\",\"stat\":$(jstr "$(cat /proc/$kvtierd_pid/stat)")"
  emit "\"event\":\"kvtierd_log\",\"tail\":$(jstr "$(tail -n 300 "$work/kvtierd.log")")"
fi
kill -TERM $kvsim_pid
wait $kvsim_pid
kvsim_status=$?
[ -n "$kvtierd_pid" ] && kill -TERM "$kvtierd_pid" 2>/dev/null && wait "$kvtierd_pid"
[ "$mode" = damos ] && echo off >"$damon/0/state"

sed 's/^{/{"src":"kvsim",/' "$work/kvsim.out"
sed 's/^{/{"src":"probe",/' "$work/probe.out"
emit "\"event\":\"done\",\"mode\":\"$mode\",\"kvsim_status\":$kvsim_status,\"kvsim_stderr\":$(jstr "$(tail -n 5 "$work/kvsim.err")"),\"probe_stderr\":$(jstr "$(tail -n 5 "$work/probe.err")"),\"nodes_after\":$(meminfo_json)"
exit 0
