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
#         damos-goal  DAMON alone, the newer way (6.16+; the benchmark runs it on 7.3): a vaddr
#                 kdamond on kvsim's pid with migrate_hot (-> node 0) and migrate_cold (-> node 1)
#                 schemes whose quotas the kernel tunes to a node_mem_used_bp / node_mem_free_bp
#                 goal on node 0, as the kernel's samples/damon/mtier.c does
#         oracle  kvtier_oracle: places kvsim's blocks from kvsim's own ground truth (hot = touched
#                 within COLD_AGE_S -> node 0, cold -> node 1) with kvtier's mover, within the
#                 kvtier mode's budget (KVTIER_MIGRATE_RATE) and free-memory floor; the ceiling
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
KVTIER_RECORD=${KVTIER_RECORD:-0}      # 1: kvtierd records its steps and kvsim its ground truth (docs/recording.md); both files are emitted
KVTIER_TRUTH_WINDOW=${KVTIER_TRUTH_WINDOW:-1}  # seconds per window of kvsim's ground truth (KVTIER_RECORD=1)
KVTIER_COLD_AGE=${KVTIER_COLD_AGE:-}    # the kvtier mode's group cold_age ("": the shipped one)
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
# damos-goal (see docs/benchmarks.md): mtier's intervals and auto-tuning goal, the damos mode's
# regions and budget; node 0 kept full down to KVTIER_MIN_FREE (the floor kvtier and the oracle
# keep), with GOAL_GAP_BP of hysteresis between the two schemes (mtier: 9970 used / 50 free).
GOAL_SAMPLE_US=${GOAL_SAMPLE_US:-5000}
GOAL_AGGR_US=${GOAL_AGGR_US:-100000}
GOAL_UPDATE_US=${GOAL_UPDATE_US:-1000000}
GOAL_ACCESS_BP=${GOAL_ACCESS_BP:-400}
GOAL_AGGRS=${GOAL_AGGRS:-3}
GOAL_MIN_SAMPLE_US=${GOAL_MIN_SAMPLE_US:-5000}
GOAL_MAX_SAMPLE_US=${GOAL_MAX_SAMPLE_US:-10000000}
GOAL_APPLY_US=${GOAL_APPLY_US:-1000000}
GOAL_GAP_BP=${GOAL_GAP_BP:-20}
GOAL_TUNER=${GOAL_TUNER:-temporal}
# kvtier
KVTIER_CHECK_AFTER_S=${KVTIER_CHECK_AFTER_S:-20}  # kvtierd must manage kvsim by then
# The budget and the free-memory floor every placer gets: the shipped config's unless set.
shipped() { sed -n "s/^$1 = \"\(.*\)\"/\1/p" /kvtier/systemd/kvtier.toml; }
KVTIER_MIGRATE_RATE=${KVTIER_MIGRATE_RATE:-$(shipped migrate_rate)}
KVTIER_MIGRATE_BURST=${KVTIER_MIGRATE_BURST:-$(shipped migrate_burst)}
KVTIER_MIN_FREE=${KVTIER_MIN_FREE:-$(shipped min_free)}
# oracle: the same budget and floor as kvtier (above); its own cycle
ORACLE_INTERVAL=${ORACLE_INTERVAL:-1s}

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
grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup ||
  die "cannot mount cgroup2 on /sys/fs/cgroup"
put +memory /sys/fs/cgroup/cgroup.subtree_control
# Kernels with DAMON_STAT (7.x) run a monitoring kdamond from boot; no mode wants its CPU.
if [ -e /sys/module/damon_stat/parameters/enabled ]; then
  put N /sys/module/damon_stat/parameters/enabled
fi
mkdir -p "$cg" || die "cannot create $cg"

# --- the pool's page size (scripts/bench.sh --thp) ---------------------------------------
# never / system: the guest's THP setting as booted (kvsim --no-hugepages for never). 64k: every
# anonymous fault that can takes a 64 KiB folio (multi-size THP, 6.8+), and no 2 MiB THP (the
# top-level setting, which the PMD size inherits, is never); the same in every mode.
BENCH_THP=${BENCH_THP:-never}
thp_dir=/sys/kernel/mm/transparent_hugepage
mthp_dir=$thp_dir/hugepages-64kB
if [ "$BENCH_THP" = 64k ]; then
  [ -d "$mthp_dir" ] || die "--thp 64k: this kernel has no $mthp_dir (multi-size THP needs 6.8+)"
  put never "$thp_dir/enabled"
  put always "$mthp_dir/enabled"
fi
# The 64 KiB folio counters ({} where the kernel has none): anon_fault_alloc counts the 64 KiB
# folios faulted in, anon_fault_fallback the faults that wanted one and took 4 KiB pages.
mthp_stats_json() {
  first=1
  printf '{'
  for f in "$mthp_dir"/stats/*; do
    [ -f "$f" ] || continue
    [ $first = 1 ] || printf ','
    first=0
    printf '"%s":%s' "${f##*/}" "$(cat "$f")"
  done
  printf '}'
}
# The pool's folios at 16 sampled 64 KiB blocks of [$1, $2) in pid $3 (the pool's offsets
# k * 64 KiB), from pagemap and kpageflags (AnonHugePages in smaps counts only 2 MiB THP): a
# block is one 64 KiB folio when its 16 pages are present on contiguous frames, the first a
# compound head (KPF_COMPOUND_HEAD, bit 15) and the last a compound tail (bit 16).
words() { # FILE INDEX COUNT: COUNT 64-bit words from INDEX, in hex, one a line
  dd if="$1" bs=8 skip="$2" count="$3" 2>/dev/null | od -An -v -tx8 | tr -s ' ' '\n' | grep .
}
pool_folios_json() {
  start=$1 end=$2 pid=$3 samples=16
  blocks=$(((end - start) / 65536))
  step=$((blocks / samples))
  [ $step -ge 1 ] || step=1
  whole=0 split=0 absent=0 n=0
  b=0
  while [ $b -lt $blocks ] && [ $n -lt $samples ]; do
    # Present (bit 63), not swapped (62), private (61 clear): the first hex digit is 8; the
    # frame is bits 0-54 (55 is soft-dirty, 56 exclusively mapped).
    pfns='' present=0
    for w in $(words "/proc/$pid/pagemap" $(((start + b * 65536) / 4096)) 16); do
      case $w in 8*) present=$((present + 1)) pfns="$pfns $((0x${w#??} & 0x7fffffffffffff))" ;; esac
    done
    n=$((n + 1))
    b=$((b + step))
    [ $present = 16 ] || { absent=$((absent + 1)); continue; }
    # shellcheck disable=SC2086 # the 16 frame numbers, one word each
    set -- $pfns
    pfn0=$1
    shift 15
    pfn15=$1
    f0=$(words /proc/kpageflags "$pfn0" 1)
    f15=$(words /proc/kpageflags "$pfn15" 1)
    if [ $((pfn15 - pfn0)) = 15 ] && [ $(((0x${f0:-0} >> 15) & 1)) = 1 ] && [ $(((0x${f15:-0} >> 16) & 1)) = 1 ]; then
      whole=$((whole + 1))
    else
      split=$((split + 1))
    fi
  done
  printf '{"sampled_blocks":%d,"one_64k_folio":%d,"not":%d,"not_present":%d,"pool_start_mod_64k":%d}' \
    $n $whole $split $absent $((start % 65536))
}
emit "\"event\":\"thp\",\"thp\":\"$BENCH_THP\",\"enabled\":$(jstr "$(cat $thp_dir/enabled 2>/dev/null)"),\"enabled_64k\":$(jstr "$(cat $mthp_dir/enabled 2>/dev/null)"),\"stats_64k\":$(mthp_stats_json)"

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

# Basis points of node 0's memory that $1 bytes are (rounded up).
node0_bp() {
  total_kib=$(awk '/MemTotal/ { print $4 }' /sys/devices/system/node/node0/meminfo)
  echo $((($1 / 1024 * 10000 + total_kib - 1) / total_kib))
}

# A size such as 16MiB in bytes (the units kvtier's config takes: B, KiB, MiB, GiB).
size_bytes() {
  echo "$1" | awk '{ n = $0 + 0; u = $0; sub(/^[0-9.]+/, "", u)
    m = u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1
    printf "%d\n", n * m }'
}

damos_goal_start() { # damos_goal_start PID
  [ -d "$damon" ] || die "no DAMON sysfs ($damon): the kernel lacks CONFIG_DAMON_SYSFS"
  put 1 "$damon/nr_kdamonds"
  k=$damon/0
  put 1 "$k/contexts/nr_contexts"
  c=$k/contexts/0
  grep -qw vaddr "$c/avail_operations" || die "no DAMON vaddr operations on this kernel"
  put vaddr "$c/operations"
  ig=$c/monitoring_attrs/intervals/intervals_goal
  [ -d "$ig" ] && [ -d "$c/schemes" ] ||
    die "this kernel ($(uname -r)) has no DAMON intervals goal (6.15+); damos-goal needs --kernel 7.3"
  put "$GOAL_SAMPLE_US" "$c/monitoring_attrs/intervals/sample_us"
  put "$GOAL_AGGR_US" "$c/monitoring_attrs/intervals/aggr_us"
  put "$GOAL_UPDATE_US" "$c/monitoring_attrs/intervals/update_us"
  put "$GOAL_ACCESS_BP" "$ig/access_bp"
  put "$GOAL_AGGRS" "$ig/aggrs"
  put "$GOAL_MIN_SAMPLE_US" "$ig/min_sample_us"
  put "$GOAL_MAX_SAMPLE_US" "$ig/max_sample_us"
  put "$DAMON_MAX_REGIONS" "$c/monitoring_attrs/nr_regions/max"
  put "$DAMON_MIN_REGIONS" "$c/monitoring_attrs/nr_regions/min"
  put 1 "$c/targets/nr_targets"
  put "$1" "$c/targets/0/pid_target"
  floor_bp=$(node0_bp "$(size_bytes "$KVTIER_MIN_FREE")")
  put 2 "$c/schemes/nr_schemes"
  # scheme 0 promotes (hot pages -> node 0) until node 0 is used up to its floor; scheme 1
  # demotes (cold pages -> node 1) until node 0 has its floor free again, plus the gap.
  for i in 0 1; do
    d=$c/schemes/$i
    if [ $i = 0 ]; then
      action=migrate_hot to=0 nr_min=1 nr_max=4294967295 metric=node_mem_used_bp
      goal=$((10000 - floor_bp)) allow=Y
    else
      action=migrate_cold to=1 nr_min=0 nr_max=0 metric=node_mem_free_bp
      goal=$((floor_bp + GOAL_GAP_BP)) allow=N
    fi
    put $action "$d/action"
    [ -d "$d/dests" ] || die "this kernel has no DAMOS dests/ directory; damos-goal needs --kernel 7.3"
    put 1 "$d/dests/nr_dests"
    put $to "$d/dests/0/id"
    put 1 "$d/dests/0/weight"
    put "$GOAL_APPLY_US" "$d/apply_interval_us"
    put 4096 "$d/access_pattern/sz/min"
    put 18446744073709551615 "$d/access_pattern/sz/max"
    put "$nr_min" "$d/access_pattern/nr_accesses/min"
    put "$nr_max" "$d/access_pattern/nr_accesses/max"
    put 0 "$d/access_pattern/age/min"
    put 4294967295 "$d/access_pattern/age/max"
    put 0 "$d/quotas/ms"
    put "$DAMOS_QUOTA_BYTES" "$d/quotas/bytes"
    put "$DAMOS_QUOTA_RESET_MS" "$d/quotas/reset_interval_ms"
    put 0 "$d/quotas/weights/sz_permil"
    put 100 "$d/quotas/weights/nr_accesses_permil"
    put 100 "$d/quotas/weights/age_permil"
    [ -e "$d/quotas/goal_tuner" ] && put "$GOAL_TUNER" "$d/quotas/goal_tuner"
    put 1 "$d/quotas/goals/nr_goals"
    put $metric "$d/quotas/goals/0/target_metric"
    put $goal "$d/quotas/goals/0/target_value"
    put 0 "$d/quotas/goals/0/nid"
    put none "$d/watermarks/metric"
    # Page-level check (the operations layer's young filter): promote only pages found
    # accessed, never demote them.
    put 1 "$d/ops_filters/nr_filters"
    put young "$d/ops_filters/0/type"
    put Y "$d/ops_filters/0/matching"
    put $allow "$d/ops_filters/0/allow"
  done
  if ! echo on >"$k/state" 2>/dev/null; then
    die "the kernel refused 'on' for the damos-goal kdamond: $(dmesg | tail -n 3 | tr '\n' ' ')"
  fi
  emit "\"event\":\"damos_goal\",\"pid\":$1,\"operations\":\"vaddr\",\"intervals\":{\"sample_us\":$GOAL_SAMPLE_US,\"aggr_us\":$GOAL_AGGR_US,\"update_us\":$GOAL_UPDATE_US,\"goal\":{\"access_bp\":$GOAL_ACCESS_BP,\"aggrs\":$GOAL_AGGRS,\"min_sample_us\":$GOAL_MIN_SAMPLE_US,\"max_sample_us\":$GOAL_MAX_SAMPLE_US}},\"regions\":[$DAMON_MIN_REGIONS,$DAMON_MAX_REGIONS],\"hot\":{\"action\":\"migrate_hot\",\"dest\":0,\"nr_accesses_min\":1,\"goal\":\"node_mem_used_bp node 0 = $((10000 - floor_bp))\",\"filter\":\"allow young\"},\"cold\":{\"action\":\"migrate_cold\",\"dest\":1,\"nr_accesses\":[0,0],\"goal\":\"node_mem_free_bp node 0 = $((floor_bp + GOAL_GAP_BP))\",\"filter\":\"reject young\"},\"apply_interval_us\":$GOAL_APPLY_US,\"quota\":{\"goal_tuner\":\"$(cat "$c/schemes/0/quotas/goal_tuner" 2>/dev/null)\",\"bytes\":$DAMOS_QUOTA_BYTES,\"reset_interval_ms\":$DAMOS_QUOTA_RESET_MS,\"weights\":{\"sz\":0,\"nr_accesses\":100,\"age\":100}},\"min_free\":\"$KVTIER_MIN_FREE\""
}

# The goal schemes' state: effective quotas, the goals' current values, the tuned intervals.
damos_goal_state() {
  k=$damon/0
  c=$k/contexts/0
  echo update_schemes_effective_quotas >"$k/state" 2>/dev/null
  echo update_tuned_intervals >"$k/state" 2>/dev/null
  for i in 0 1; do
    d=$c/schemes/$i
    emit "\"event\":\"damos_goal_state\",\"scheme\":$i,\"action\":\"$(cat "$d/action")\",\"effective_bytes\":$(readv "$d/quotas/effective_bytes"),\"goal_metric\":\"$(cat "$d/quotas/goals/0/target_metric")\",\"goal_target\":$(readv "$d/quotas/goals/0/target_value"),\"goal_current\":$(readv "$d/quotas/goals/0/current_value"),\"sample_us\":$(readv "$c/monitoring_attrs/intervals/sample_us"),\"aggr_us\":$(readv "$c/monitoring_attrs/intervals/aggr_us")"
  done
}

# The shipped config (systemd/kvtier.toml) with only the selector set to kvsim; the control
# socket and its group are moved where the busybox guest has them, and the budget and floor are
# the ones every placer of the benchmark gets (the shipped ones unless KVTIER_MIGRATE_RATE,
# KVTIER_MIGRATE_BURST or KVTIER_MIN_FREE say otherwise). KVTIER_CONFIG=FILE (a path in the
# guest) runs another config instead, for experiments; KVTIER_SED='SCRIPT' edits the generated one
# (sed -e SCRIPT), e.g. KVTIER_SED='s/^force = .*/force = "faults"/'.
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
    -e 's#^cmdline = .*#cmdline = []#' \
    -e "s#^migrate_rate = .*#migrate_rate = \"$KVTIER_MIGRATE_RATE\"#" \
    -e "s#^migrate_burst = .*#migrate_burst = \"$KVTIER_MIGRATE_BURST\"#" \
    -e "s#^min_free = .*#min_free = \"$KVTIER_MIN_FREE\"#" /kvtier/systemd/kvtier.toml |
    sed -e "${KVTIER_SED:-}"
}

# kvtierd's recording and kvsim's ground truth (KVTIER_RECORD=1), for kvtierctl replay --truth:
# scripts/bench/recording.py writes them back out of the JSON lines.
emit_recording() {
  for f in kvtier:recording truth:truth_recording; do
    [ -f "$work/${f%%:*}.kvtrec" ] || continue
    emit "\"event\":\"${f#*:}\",\"bytes\":$(wc -c <"$work/${f%%:*}.kvtrec"),\"base64\":\"$(base64 "$work/${f%%:*}.kvtrec" | tr -d '\n')\""
  done
}

kvtierd_pid=
kvtier_start() {
  command -v kvtierd >/dev/null || die "kvtierd is not in the build"
  # The busybox guest has /etc/passwd only; the control socket's group must resolve.
  grep -q '^root:' /etc/group 2>/dev/null || echo 'root:x:0:' >>/etc/group
  kvtier_config >"$work/kvtier.toml"
  [ -n "$KVTIER_COLD_AGE" ] && sed -i "s#^cold_age = .*#cold_age = \"$KVTIER_COLD_AGE\"#" "$work/kvtier.toml"
  [ "$KVTIER_RECORD" = 1 ] && sed -i "/^\[daemon\]/a record = \"$work/kvtier.kvtrec\"" "$work/kvtier.toml"
  emit "\"event\":\"kvtier_config\",\"toml\":$(jstr "$(cat "$work/kvtier.toml")")"
  if ! msg=$(kvtierctl config check "$work/kvtier.toml" 2>&1); then
    emit "\"event\":\"unavailable\",\"mode\":\"kvtier\",\"reason\":$(jstr "kvtierctl config check rejects the generated config: $(echo "$msg" | tail -n 3 | tr '\n' ' ')")"
    exit 0
  fi
  kvtierd --config "$work/kvtier.toml" --foreground --socket "$work/kvtierd.sock" \
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
  damos-goal) ;; # started on kvsim's pid, below
  kvtier) kvtier_start ;;
  oracle) command -v kvtier_oracle >/dev/null || die "kvtier_oracle is not in the build" ;;
  *) die "unknown mode '$mode' (none, kernel, damos, damos-goal, oracle, kvtier)" ;;
esac

# --- the workload, in its own memory cgroup, and the probe beside it ----------------------
# kvsim runs longer than the measurement; the probe's last sample (with the final page map and
# ground truth) ends the measurement, then kvsim is stopped and prints its end event.
# Every mode runs kvsim with --live-truth (one store per touched block), so the workload is the
# same whether the oracle reads it or not.
truth_record=
[ "$mode" = kvtier ] && [ "$KVTIER_RECORD" = 1 ] &&
  truth_record="--truth-record $work/truth.kvtrec --truth-window $KVTIER_TRUTH_WINDOW"
sh -c "echo \$\$ > $cg/cgroup.procs && exec kvsim --duration $((duration + 60)) --truth $work/truth.csv --live-truth $work/live_truth.bin $truth_record $*" \
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
[ "$mode" = damos-goal ] && damos_goal_start "$kvsim_pid"
# kvsim's start event follows the pool's pre-faulting: its folios as first touch made them.
emit "\"event\":\"pool_folios\",\"when\":\"start\",\"thp\":\"$BENCH_THP\",\"folios\":$(pool_folios_json "$pool_start" "$pool_end" "$kvsim_pid"),\"stats_64k\":$(mthp_stats_json)"
# With 64 KiB folios, every 5 s: uptime, the folios split so far and those mapped, the pages
# migrated so far, and node 0's and node 1's free KiB (when the folios split, and which way the
# moves went meanwhile).
mthp_pid=
if [ "$BENCH_THP" = 64k ]; then
  while :; do
    echo "$(cut -d' ' -f1 /proc/uptime) $(cat "$mthp_dir/stats/split") $(cat "$mthp_dir/stats/nr_anon" 2>/dev/null)" \
      "$(awk '/^pgmigrate_success / { print $2 }' /proc/vmstat)" \
      "$(awk '/MemFree/ { print $4 }' /sys/devices/system/node/node0/meminfo)" \
      "$(awk '/MemFree/ { print $4 }' /sys/devices/system/node/node1/meminfo)"
    sleep 5
  done >"$work/mthp.log" &
  mthp_pid=$!
fi
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

oracle_pid=
if [ "$mode" = oracle ]; then
  kvtier_oracle "$work/live_truth.bin" --cold-age "${COLD_AGE_S}s" --rate "$KVTIER_MIGRATE_RATE" \
    --burst "$KVTIER_MIGRATE_BURST" \
    --min-free "$KVTIER_MIN_FREE" --interval "$ORACLE_INTERVAL" >"$work/oracle.out" 2>"$work/oracle.err" &
  oracle_pid=$!
  n=0
  until grep -q '"event":"start"' "$work/oracle.out" 2>/dev/null; do
    n=$((n + 1))
    if [ $n -gt 300 ] || ! kill -0 "$oracle_pid" 2>/dev/null; then
      kill "$kvsim_pid" 2>/dev/null
      die "kvtier_oracle did not start: $(tail -n 3 "$work/oracle.err" | tr '\n' ' ')"
    fi
    sleep 0.1
  done
  emit "\"event\":\"oracle\",\"cold_age_s\":$COLD_AGE_S,\"rate\":\"$KVTIER_MIGRATE_RATE\",\"min_free\":\"$KVTIER_MIN_FREE\",\"interval\":\"$ORACLE_INTERVAL\""
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
    emit_recording
    exit 0
  fi
fi
wait "$probe_pid"
# The kernel's own view of the same range right after the last sample, to check the probe.
hex=$(printf '%x' "$pool_start")
emit "\"event\":\"numa_maps\",\"pool_start\":$pool_start,\"line\":$(jstr "$(grep "^0*$hex " /proc/$kvsim_pid/numa_maps)")"
emit "\"event\":\"pool_folios\",\"when\":\"end\",\"thp\":\"$BENCH_THP\",\"folios\":$(pool_folios_json "$pool_start" "$pool_end" "$kvsim_pid"),\"stats_64k\":$(mthp_stats_json)"
if [ -n "$mthp_pid" ]; then
  kill "$mthp_pid" 2>/dev/null
  emit "\"event\":\"mthp_series\",\"columns\":\"uptime_s split nr_anon pgmigrate_success node0_free_kib node1_free_kib\",\"lines\":$(jstr "$(cat "$work/mthp.log")")"
fi
case $mode in
  damos) damos_stats ;;
  damos-goal) damos_stats && damos_goal_state ;;
esac
if [ "$mode" = kvtier ]; then
  kvtier_manages $kvsim_pid
  emit "\"event\":\"kvtierd_dump\",\"dump\":$(jstr "$(cat "$work/kvtierd.dump")")"
  emit "\"event\":\"kvtierd_cpu\",\"stat\":$(jstr "$(cat /proc/$kvtierd_pid/stat)")"
  emit "\"event\":\"kvtierd_log\",\"tail\":$(jstr "$(tail -n 300 "$work/kvtierd.log")")"
fi
oracle_status=null
if [ -n "$oracle_pid" ]; then
  kill -TERM "$oracle_pid" 2>/dev/null
  wait "$oracle_pid"
  oracle_status=$?
fi
kill -TERM $kvsim_pid
wait $kvsim_pid
kvsim_status=$?
[ -n "$kvtierd_pid" ] && kill -TERM "$kvtierd_pid" 2>/dev/null && wait "$kvtierd_pid"
case $mode in damos | damos-goal) echo off >"$damon/0/state" ;; esac

sed 's/^{/{"src":"kvsim",/' "$work/kvsim.out"
sed 's/^{/{"src":"probe",/' "$work/probe.out"
[ -n "$oracle_pid" ] && sed 's/^{/{"src":"oracle",/' "$work/oracle.out"
emit_recording
emit "\"event\":\"done\",\"mode\":\"$mode\",\"kvsim_status\":$kvsim_status,\"oracle_status\":$oracle_status,\"oracle_stderr\":$(jstr "$(tail -n 5 "$work/oracle.err" 2>/dev/null)"),\"kvsim_stderr\":$(jstr "$(tail -n 5 "$work/kvsim.err")"),\"probe_stderr\":$(jstr "$(tail -n 5 "$work/probe.err")"),\"nodes_after\":$(meminfo_json)"
exit 0
