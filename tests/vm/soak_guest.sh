#!/bin/sh
# Guest side of scripts/soak.sh (issue 37 part 3), in the CXL guest: kvsim (verifying every
# byte it reads, and all of its pool when it stops) under kvtierd for MINUTES, with a fault
# injected every 10 to 30 s at random (awk's srand(SEED)): kvtierd SIGKILLed (a supervisor
# loop starts it again), kvsim restarted (new pid, same selector), the CXL node's memory
# offlined and onlined, the CXL node filled (huge pages reserved there), a reload of a bad config then of the good one,
# 64 idle control-socket clients; a Prometheus scrape every 100 ms throughout. Prints
# KEY=VALUE lines (one FAULT= line per fault) that tests/vm/check_soak.py judges.
# Usage: sh soak_guest.sh MINUTES SEED
set -eu
minutes=${1:-30}
seed=${2:-1}
# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
sys=/sys/devices/system/node
cpu_less_node
w=/tmp/soak
mkdir -p "$w"
echo "SEED=$seed"
echo "MINUTES=$minutes"
echo "CXL_NODE=$cxl"

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
# A Prometheus scrape every 100 ms: one line per scrape, ok or failed.
(
  while [ ! -e $w/soak.stop ]; do
    if wget -q -T 5 -O $w/scrape.txt http://127.0.0.1:9464/metrics 2>$w/scrape.err; then
      echo ok
    else
      echo failed
    fi
    sleep 0.1
  done > $w/scrapes.txt
) &
scraper=$!
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$(cat $w/kvtierd.pid)/status" 2>/dev/null; }
# The CXL node's memory blocks offline (0) or online (1); prints their states.
blocks_to() {
  set_blocks "$1" $blocks 2>> $w/blocks.log
  for b in $blocks; do cat "$sys/node$cxl/$b/state"; done | tr '\n' ' '
}

end=$(($(cut -d. -f1 /proc/uptime) + minutes * 60))
i=0
awk -v seed="$seed" 'BEGIN { srand(seed); for (i = 0; i < 10000; i++) print int(rand() * 6), 10 + int(rand() * 21) }' > $w/plan.txt
echo "RSS_START_KB=$(rss)"
while [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ]; do
  i=$((i + 1))
  set -- $(sed -n "${i}p" $w/plan.txt)
  kind=$1 pause=$2
  sleep "$pause"
  [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ] || break
  up
  echo "RSS_KB=$(cut -d. -f1 /proc/uptime) $(rss)"
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
      log "fault $i: target restart: kvsim $old -> $(cat $w/kvsim.pid)"
      echo "FAULT=target_restart $old $(cat $w/kvsim.pid)"
      ;;
    2)
      states=$(blocks_to 0)
      gone=$(wait_targets "")
      back_states=$(blocks_to 1)
      back=$(wait_targets "$cxl")
      log "fault $i: node $cxl offline ($states), kvtierd saw it in ${gone} s; online ($back_states), seen in ${back} s"
      echo "FAULT=node_offline $states| $gone $back"
      ;;
    3)
      # Huge pages reserved on the node take its free memory at once (no page is written).
      h=$sys/node$cxl/hugepages/hugepages-2048kB/nr_hugepages
      free=$(sed -n 's/.*MemFree: *\([0-9]*\) kB/\1/p' "$sys/node$cxl/meminfo")
      echo $((free / 2048)) > "$h" || true
      got=$(cat "$h")
      left=$(sed -n 's/.*MemFree: *\([0-9]*\) kB/\1/p' "$sys/node$cxl/meminfo")
      sleep 15
      echo 0 > "$h"
      log "fault $i: node $cxl full: $got huge pages held there for 15 s ($left kB left free)"
      echo "FAULT=node_full $got $left $(cat "$h")"
      ;;
    4)
      p=$(cat $w/kvtierd.pid)
      cp $w/bad.toml $w/kvtier.toml
      kill -HUP "$p"
      sleep 2
      cp $w/good.toml $w/kvtier.toml
      kill -HUP "$p"
      sleep 2
      log "fault $i: reload of a bad config, then of the good one (kvtierd $p)"
      echo "FAULT=reload $p"
      ;;
    5)
      kvtier_soak_probe clients /tmp/kvtierd.sock 64 > $w/clients.json &
      cp=$!
      sleep 15
      kill -TERM "$cp"
      wait "$cp" || true
      # kvtierd closes the idle ones after 10 s and these at once: status answers again (at
      # most 30 s).
      ok=0 n=0
      until [ $ok = 1 ] || [ $n -ge 300 ]; do
        $ctl status > /dev/null 2>&1 && ok=1
        n=$((n + 1))
        [ $ok = 1 ] || sleep 0.1
      done
      log "fault $i: 64 idle control-socket clients for 15 s: $(cat $w/clients.json); status after: $ok"
      echo "FAULT=idle_clients $(tr -d ' ' < $w/clients.json) $ok"
      ;;
  esac
done
up
echo "RSS_END_KB=$(rss)"
echo "STATUS_END=$($ctl status --json | tr -d '\n')"
$ctl status | grep prometheus >&2
touch $w/soak.stop
kill -TERM "$scraper" 2>/dev/null || true
kvsim_stop
kill -TERM "$(cat $w/kvtierd.pid)"
wait "$sup" || true
echo "SCRAPES=$(grep -c '^ok' $w/scrapes.txt || true) $(grep -c '^failed' $w/scrapes.txt || true)"
echo "SCRAPE_LAST_ERROR=$(tail -n 1 $w/scrape.err)"
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
echo "LOG_TOPOLOGY_BACK=$(grep -c "topology: node $cxl is a demotion target again" $w/kvtierd.log || true)"
echo "LOG_ERRORS=$(grep -c ' error \| critical ' $w/kvtierd.log || true)"
echo "--- soak log" >&2
cat $w/soak.log >&2
echo "--- kvtierd log (errors and warnings)" >&2
grep -v ' info ' $w/kvtierd.log | tail -n 80 >&2
