#!/bin/sh
# Guest side of scripts/soak.sh (issue 37 part 3), in the CXL guest: kvsim (verifying every
# byte it reads, and all of its pool when it stops) under kvtierd for MINUTES, with a fault
# injected every 10 to 30 s at random (awk's srand(SEED)): kvtierd SIGKILLed (a supervisor
# loop starts it again), kvsim restarted (new pid, same selector), the CXL node's memory
# offlined and onlined, the CXL node filled (a tmpfs file there), a reload of a bad config then of the good one,
# 64 idle control-socket clients; a Prometheus scrape every 100 ms throughout. Prints
# KEY=VALUE lines (one FAULT= line per fault) that tests/vm/check_soak.py judges.
# The first six faults are each kind once, in an order drawn from SEED, so a short run (CI's,
# tests/vm/topology.sh) injects every kind; the rest are drawn at random. The pause before each
# is drawn from MIN_PAUSE to MAX_PAUSE seconds (default 10 to 30). DURATION: minutes, or
# seconds with an s (150s).
# Usage: sh soak_guest.sh DURATION SEED [MIN_PAUSE MAX_PAUSE]
set -eu
minutes=${1:-30}
seed=${2:-1}
min_pause=${3:-10}
max_pause=${4:-30}
case $minutes in
  *s) seconds=${minutes%s} ;;
  *) seconds=$((minutes * 60)) ;;
esac
# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
sys=/sys/devices/system/node
cpu_less_node
w=/tmp/soak
mkdir -p "$w"
echo "SEED=$seed"
echo "MINUTES=$minutes"
echo "PAUSES=$min_pause $max_pause"
echo "CXL_NODE=$cxl"
echo "CMDLINE=$(cat /proc/cmdline)"

# The knobs kvtierd sets ([tiering], agent/host/numa_tiering.hpp), demotion_enabled, and the
# CXL node's huge pages (the node-full fault's).
dbg=/sys/kernel/debug/sched/numa_balancing
knobs() {
  for f in /proc/sys/kernel/numa_balancing /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps \
    /sys/kernel/mm/numa/demotion_enabled $dbg/hot_threshold_ms $dbg/scan_period_min_ms \
    $dbg/scan_period_max_ms $dbg/scan_size_mb \
    "$sys/node$cxl/hugepages/hugepages-2048kB/nr_hugepages"; do
    printf '%s=%s ' "${f##*/}" "$(cat "$f" 2>/dev/null || echo -)"
  done
}
echo "KNOBS_BEFORE=$(knobs)"
bpf0=$(kvtier_soak_probe bpf-progs)
kd0=$(kdamonds_on)
echo "BPF_BEFORE=$bpf0"
echo "KDAMONDS_BEFORE=$kd0"

# The guest boots with no network; Prometheus listens on the loopback interface.
ip link set lo up
# The shipped defaults (sources, [tiering]) with one group for kvsim, Prometheus on.
cat > $w/good.toml <<CFG
[daemon]
interval = "1s"
[telemetry]
socket = "/tmp/kvtierd.sock"
socket_group = "root"
prometheus = true
prometheus_listen = "127.0.0.1:9464"
[[group]]
name = "kv"
[group.select]
comm = ["^kvsim\$"]
[group.policy]
cold_age = "8s"
min_residence = "10s"
[[group]]
name = "fill"
[group.select]
comm = ["^kvtier_fill_che\$"]
[group.policy]
cold_age = "8s"
min_residence = "10s"
CFG
printf '[daemon]\ninterval = "never"\n[[group]\n' > $w/bad.toml
cp $w/good.toml $w/kvtier.toml
kvtierd --check-config --config $w/kvtier.toml >&2
: > $w/soak.log
log() { echo "soak: $(cut -d' ' -f1 /proc/uptime) s: $*" | tee -a $w/soak.log >&2; }

# The supervisor: kvtierd again whenever it ends, until $w/soak.stop exists.
(
  while [ ! -e $w/soak.stop ]; do
    kvtierd --config $w/kvtier.toml --foreground >> $w/kvtierd.log 2>&1 &
    echo $! > $w/kvtierd.pid
    rc=0
    wait $! || rc=$?
    echo "soak: supervisor: kvtierd exited $rc" >> $w/soak.log
    sleep 1  # as systemd's RestartSec= would
  done
) &
sup=$!
# Starts kvsim and waits (at most 300 s) for its start event: its SIGTERM handler is set by then.
kvsim_start() {
  n0=$(grep -c '"event":"start"' $w/kvsim.out 2>/dev/null || true)
  kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 48MiB \
    --time-scale 0.05 --loop --duration 0 --flush-tlb --no-hugepages --stats-interval 600 \
    >> $w/kvsim.out 2>>$w/kvsim.err &
  echo $! > $w/kvsim.pid
  n=0
  while [ "$(grep -c '"event":"start"' $w/kvsim.out || true)" = "${n0:-0}" ] && [ $n -lt 3000 ]; do
    n=$((n + 1))
    sleep 0.1
  done
}
kvsim_stop() {
  p=$(cat $w/kvsim.pid)
  kill -TERM "$p"
  wait "$p" || echo "soak: kvsim $p exited $?" >> $w/soak.log
}
kvsim_start
# Waits (at most 120 s of the guest's clock) until kvtierd answers on its socket; says so when
# it does not.
up() {
  limit=$(($(cut -d. -f1 /proc/uptime) + 120))
  until $ctl status > /dev/null 2>&1; do
    if [ "$(cut -d. -f1 /proc/uptime)" -ge "$limit" ]; then
      log "kvtierd does not answer after 120 s; its log ends with: $(tail -n 3 $w/kvtierd.log)"
      return 0
    fi
    sleep 0.1
  done
}
up
# A Prometheus scrape every 100 ms: one line per scrape, ok or failed (busybox's wget dies
# with SIGSEGV in this guest).
kvtier_soak_probe scrape 9464 100 > $w/scrapes.txt &
scraper=$!
# Waits (at most 120 s of the guest's clock) until kvtierd's log has N lines with PATTERN.
log_reaches() {
  t0=$(cut -d. -f1 /proc/uptime)
  while [ "$(grep -c "$1" $w/kvtierd.log || true)" -lt "$2" ] &&
    [ $(($(cut -d. -f1 /proc/uptime) - t0)) -lt 120 ]; do
    sleep 0.2
  done
}
# 1 if kvtierctl status answers within N tries (0.1 s apart), else 0.
answers() {
  n=0
  until $ctl status > /dev/null 2>&1; do
    n=$((n + 1))
    [ $n -lt "$1" ] || { echo 0; return 0; }
    sleep 0.1
  done
  echo 1
}
# The CXL node's free memory (kB), and kvtierd's pages refused for want of memory there.
node_free() { sed -n 's/.*MemFree: *\([0-9]*\) kB/\1/p' "$sys/node$cxl/meminfo"; }
no_memory() {
  kvtier_soak_probe metric 9464 kvtier_page_moves_total status=no_memory "node=$cxl" 2>/dev/null || echo 0
}
# The bytes on the CXL node of the mapping that starts at START (decimal) in process PID
# (its own VMA: kvtier_fill_check maps it alone, MADV_NOHUGEPAGE), from numa_maps.
buf_on() {
  n=$(sed -n "s/^$(printf '%x' "$2") .* N$cxl=\([0-9]*\).*/\1/p" "/proc/$1/numa_maps" 2>/dev/null || true)
  echo $((${n:-0} * 4096))
}
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$(cat $w/kvtierd.pid)/status" 2>/dev/null; }
# The CXL node's memory blocks offline (0) or online (1), each write given at most 60 s (an
# offline the kernel cannot finish, pages it keeps failing to migrate, ends with a signal and
# the block stays online); prints their states.
blocks_to() {
  for b in $blocks; do
    timeout 60 sh -c "echo $1 > $sys/node$cxl/$b/online" 2>> $w/blocks.log ||
      echo "$b online=$1 refused or cut at 60 s: $(cat "$sys/node$cxl/$b/state")" >> $w/blocks.log
  done
  for b in $blocks; do cat "$sys/node$cxl/$b/state"; done | tr '\n' ' '
}
# Waits (at most 120 s of the guest's clock) until kvtierd's demotion targets are "$1"; prints
# the seconds waited, or "never".
targets_within() {
  t0=$(cut -d. -f1 /proc/uptime)
  until [ "$(demotion_targets)" = "$1" ]; do
    if [ $(($(cut -d. -f1 /proc/uptime) - t0)) -ge 120 ]; then
      echo never
      return 0
    fi
    sleep 0.2
  done
  echo $(($(cut -d. -f1 /proc/uptime) - t0))
}

end=$(($(cut -d. -f1 /proc/uptime) + seconds))
i=0
awk -v seed="$seed" -v lo="$min_pause" -v hi="$max_pause" 'BEGIN {
  srand(seed)
  for (k = 0; k < 6; k++) kind[k] = k
  for (k = 5; k > 0; k--) { j = int(rand() * (k + 1)); t = kind[k]; kind[k] = kind[j]; kind[j] = t }
  for (i = 0; i < 10000; i++) print (i < 6 ? kind[i] : int(rand() * 6)), lo + int(rand() * (hi - lo + 1))
}' > $w/plan.txt
echo "RSS_START_KB=$(rss)"
while [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ]; do
  i=$((i + 1))
  set -- $(sed -n "${i}p" $w/plan.txt)
  kind=$1 pause=$2
  sleep "$pause"
  [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ] || break
  up
  echo "RSS_KB=$(cut -d. -f1 /proc/uptime) $(rss)"
  # On stderr only (the soak's log has one line per fault, once it is done): where a run stalls.
  echo "soak: $(cut -d' ' -f1 /proc/uptime) s: fault $i (kind $kind) begins" >&2
  case $kind in
    0)
      p=$(cat $w/kvtierd.pid)
      kill -KILL "$p"
      log "fault $i: SIGKILL kvtierd $p"
      echo "FAULT=kill $p"
      ;;
    1)
      old=$(cat $w/kvsim.pid)
      kvsim_stop
      kvsim_start
      restarted="${restarted:-} $old"
      log "fault $i: target restart: kvsim $old -> $(cat $w/kvsim.pid)"
      echo "FAULT=target_restart $old $(cat $w/kvsim.pid)"
      ;;
    2)
      states=$(blocks_to 0)
      # Only a node with no block online is gone; a refused offline leaves it a target.
      gone=-
      case $states in *online*) ;; *) gone=$(targets_within "") ;; esac
      back_states=$(blocks_to 1)
      back=$(targets_within "$cxl")
      log "fault $i: node $cxl offline ($states), kvtierd saw it in ${gone} s; online ($back_states), seen in ${back} s"
      echo "FAULT=node_offline $states| $gone $back"
      ;;
    3)
      # The CXL node filled for real: a tmpfs file preferring the node, fallocated to its free
      # memory and 32 MiB more (shmem pages allocated, none written; the rest lands on node 0,
      # and the guest has no swap), so that the node sits at its low watermark. (Huge pages
      # reserved there needed the kernel to compact the fragmented node first, at the emulated
      # node's speed: 395 s for 185 pages once.) Then an idle 16 MiB buffer on node 0 (group
      # "fill", cold after 8 s) that kvtierd would demote: within 120 s its plan must stop at
      # the node's fill limit (the plan's note) or its move meet ENOMEM (the no_memory pages),
      # and the buffer stay off the node; once the node is freed, all of it must go there
      # (within 420 s of the guest's clock: a node-full latch holds 60 s, and the buffer is a
      # target the NUMA scan does not cover, as it sleeps; 61 s and more than 180 s measured).
      free=$(node_free)
      nomem0=$(no_memory)
      full0=$(grep -c "move_pages: node $cxl is full" $w/kvtierd.log || true)
      mkdir -p $w/fill
      mount -t tmpfs -o "size=$((free + 32768))k,mpol=prefer:$cxl" tmpfs $w/fill
      t0=$(cut -d. -f1 /proc/uptime)
      # Cut at 300 s should the kernel stall.
      timeout 300 fallocate -l $(((free + 32768) * 1024)) $w/fill/f ||
        echo "fault $i: fallocate cut or failed: $?" >> $w/blocks.log
      fill_s=$(($(cut -d. -f1 /proc/uptime) - t0))
      left=$(node_free)
      fill_buffer 16 $w/fillbuf.json
      t0=$(cut -d. -f1 /proc/uptime)
      how=never
      while [ $(($(cut -d. -f1 /proc/uptime) - t0)) -lt 120 ]; do
        if [ "$(no_memory)" -gt "$nomem0" ]; then how=enomem; break; fi
        if $ctl status --json 2>/dev/null | grep -q 'reached its fill limit'; then how=limit; break; fi
        sleep 0.5
      done
      seen=$(($(cut -d. -f1 /proc/uptime) - t0))
      held=$(buf_on "$fill_pid" "$fill_start")
      rm -f $w/fill/f
      umount $w/fill
      t0=$(cut -d. -f1 /proc/uptime)
      until [ "$(buf_on "$fill_pid" "$fill_start")" = $((16 << 20)) ] ||
        [ $(($(cut -d. -f1 /proc/uptime) - t0)) -ge 420 ]; do
        sleep 1
      done
      back=$(($(cut -d. -f1 /proc/uptime) - t0))
      there=$(buf_on "$fill_pid" "$fill_start")
      [ "$there" = $((16 << 20)) ] || back=never
      nomem=$(($(no_memory) - nomem0))
      full=$(($(grep -c "move_pages: node $cxl is full" $w/kvtierd.log || true) - full0))
      kill -TERM "$fill_pid"
      wait "$fill_pid" || true
      checked=$(sed -n 's/.*"checked_bytes":\([0-9]*\),"corrupted_bytes":\([0-9]*\).*/\1 \2/p' $w/fillbuf.json)
      log "fault $i: node $cxl full: $free kB filled in $fill_s s ($left kB left free); kvtierd: $how after $seen s (no_memory pages +$nomem, 'is full' lines +$full), the buffer's bytes on node $cxl meanwhile $held; freed, all of it there in $back s ($there bytes there then); checked/corrupted bytes: ${checked:-none}"
      echo "FAULT=node_full $free $left $fill_s $how $seen $held $back $nomem $full ${checked:-- -} $there"
      ;;
    4)
      # Each SIGHUP's result awaited before the next: two pending SIGHUPs are one signal.
      p=$(cat $w/kvtierd.pid)
      rejected=$(grep -c 'reload rejected' $w/kvtierd.log || true)
      reloaded=$(grep -c 'configuration reloaded' $w/kvtierd.log || true)
      cp $w/bad.toml $w/kvtier.toml
      kill -HUP "$p"
      log_reaches 'reload rejected' $((rejected + 1))
      cp $w/good.toml $w/kvtier.toml
      kill -HUP "$p"
      log_reaches 'configuration reloaded' $((reloaded + 1))
      log "fault $i: reload of a bad config, then of the good one (kvtierd $p)"
      echo "FAULT=reload $p"
      ;;
    5)
      kvtier_soak_probe clients /tmp/kvtierd.sock 64 > $w/clients.json &
      cp=$!
      # While they are connected: kvtierd closes the one idle the longest (1 s or more) for
      # root, instead of turning root away until it closes idle ones (10 s).
      sleep 2
      during=$(answers 100)
      sleep 11
      kill -TERM "$cp"
      wait "$cp" || true
      # kvtierd closes the idle ones after 10 s and these at once: status answers again.
      ok=$(answers 300)
      log "fault $i: 64 idle control-socket clients for 15 s: $(cat $w/clients.json); status during: $during, after: $ok"
      echo "FAULT=idle_clients $(tr -d ' ' < $w/clients.json) $during $ok"
      ;;
  esac
done
up
echo "RSS_END_KB=$(rss)"
# kvtierctl waits 5 s for an answer; the loop thread that serves the socket has been seen
# busy longer than that on a loaded host (the 3-minute run of seed 5): up to 6 tries.
end_status=
for try in 1 2 3 4 5 6; do
  end_status=$($ctl status --json 2>/dev/null | tr -d '\n') && [ -n "$end_status" ] && break
  echo "soak: status at the end: no answer (try $try)" >&2
done
echo "STATUS_END_TRIES=$try"
echo "STATUS_END=$end_status"
$ctl status | grep prometheus >&2
touch $w/soak.stop
kill -TERM "$scraper" 2>/dev/null || true
wait "$scraper" || true
kvsim_stop
kill -TERM "$(cat $w/kvtierd.pid)"
wait "$sup" || true
echo "SCRAPES=$(grep -c '^ok' $w/scrapes.txt || true) $(grep -c '^failed' $w/scrapes.txt || true)"
echo "SCRAPE_LAST_ERROR=$(grep '^failed' $w/scrapes.txt | tail -n 1)"
echo "KVSIM_ENDS=$(grep '"event":"end"' $w/kvsim.out | tr -d ' ' | tr '\n' ' ')"
echo "KNOBS_AFTER=$(knobs)"
# The kernel frees a closed BPF program and stops a kdamond a little later: wait (at most 60 s).
n=0
while { [ "$(kvtier_soak_probe bpf-progs)" != "$bpf0" ] || [ "$(kdamonds_on)" != "$kd0" ]; } && [ $n -lt 600 ]; do
  n=$((n + 1))
  sleep 0.1
done
echo "BPF_AFTER=$(kvtier_soak_probe bpf-progs)"
echo "KDAMONDS_AFTER=$(kdamonds_on)"
echo "SUPERVISOR=$(grep -c 'supervisor: kvtierd exited' $w/soak.log || true)"
echo "LOG_STARTS=$(grep -c ' info hotness sources: ' $w/kvtierd.log || true)"
echo "LOG_RELOAD_REJECTED=$(grep -c 'reload rejected' $w/kvtierd.log || true)"
echo "LOG_TOPOLOGY_LOST=$(grep -c "topology: node $cxl is no longer a demotion target" $w/kvtierd.log || true)"
# Back: "a demotion target again", or "appeared (N MiB): a demotion target" when a step saw the
# node gone from the kernel's list of nodes with memory in between.
echo "LOG_TOPOLOGY_BACK=$(grep -c "topology: node $cxl is a demotion target again\|topology: node $cxl appeared ([0-9]* MiB): a demotion target" $w/kvtierd.log || true)"
for p in ${restarted:-}; do
  echo "LOG_TARGET_GONE=$p $(grep -c "target $p (kvsim) is gone" $w/kvtierd.log || true)"
done
echo "LOG_NODE_FULL=$(grep -c "move_pages: node $cxl is full" $w/kvtierd.log || true)"
echo "LOG_ROOT_ROOM=$(grep -c 'to make room for uid 0\|idle clients closed for root' $w/kvtierd.log || true)"
echo "LOG_ERRORS=$(grep -c ' error \| critical ' $w/kvtierd.log || true)"
echo "--- soak log" >&2
cat $w/soak.log >&2
echo "--- kvtierd's topology lines" >&2
grep 'topology: ' $w/kvtierd.log >&2 || true
echo "--- memory blocks" >&2
cat $w/blocks.log >&2 2>/dev/null || true
echo "--- kvtierd log (errors and warnings)" >&2
grep -v ' info ' $w/kvtierd.log | tail -n 80 >&2
