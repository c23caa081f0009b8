#!/bin/sh
# Guest side of vm.kernel_refuses (issue 37 part 4), in the HMAT guest: another DAMON
# user holds the only kdamond (started here by hand through the sysfs admin tree, before
# kvtierd); kvtierd must say DAMON is busy (log, status, refused_sources) and tier with
# the other sources: an idle 16 MiB buffer goes to node 1. The kdamond is never touched.
# Then, if the kernel has the lockdown LSM, lockdown=confidentiality (for the rest of the
# boot) and kvtierd again: the sources whose BPF programs read kernel memory are refused
# with the lockdown's reason, and kvtierd runs on. Prints KEY=VALUE lines that
# tests/vm/check_kernel_refuses.py judges.
set -eu
# shellcheck source=tests/vm/placement_lib.sh
. /kvtier/tests/vm/placement_lib.sh
placement_config refuses '^kvtier_fill_che'
a=/sys/kernel/mm/damon/admin/kdamonds
# Another DAMON user: one kdamond on physical memory (paddr), on before kvtierd starts.
echo 1 > $a/nr_kdamonds
echo 1 > $a/0/contexts/nr_contexts
echo paddr > $a/0/contexts/0/operations
echo 1 > $a/0/contexts/0/targets/nr_targets
echo on > $a/0/state
echo "OTHER_KDAMOND=$(cat $a/0/state) $(cat $a/0/pid)"

fill_buffer 16 /tmp/fill.json
# kvtierd_run PREFIX LOG: kvtierd from /tmp/kvtier.toml, logging to LOG, until kvtierd_stop.
kvtierd_run() {
  kvtierd --config /tmp/kvtier.toml --foreground > "$2" 2>&1 &
  kp=$!
  prefix=$1 klog=$2
}
# Prints PREFIX STATUS= (status --json), the log's lines with PATTERN as PREFIX LOG=, then stops
# kvtierd (PREFIX KVTIERD_EXIT=) and puts its log on stderr.
kvtierd_stop() {
  echo "${prefix}STATUS=$($ctl status --json | tr -d '\n')"
  $ctl status >&2
  echo "${prefix}LOG=$(grep -c "$1" "$klog" || true)"
  kill -TERM "$kp"
  rc=0
  wait "$kp" || rc=$?
  echo "${prefix}KVTIERD_EXIT=$rc"
  echo "--- kvtierd log ($klog)" >&2
  cat "$klog" >&2
}

kvtierd_run BUSY_ /tmp/kvtierd.log
on1() { kvtier_page_nodes "$fill_pid" "$fill_start" "$fill_end" | sed -n 's/.*"1":\([0-9]*\).*/\1/p'; }
# Waits (at most 600 s) until the whole buffer is on node 1.
t=0
while [ "$(on1)" != $((16 << 20)) ] && [ $t -lt 600 ]; do
  t=$((t + 1))
  sleep 1
done
echo "DEMOTED_WAIT_S=$t"
echo "ON_NODE1=$(on1)"
kvtierd_stop 'source damon refused by the kernel: DAMON busy: all 1 kdamonds are on'
echo "OTHER_KDAMOND_AFTER=$(cat $a/0/state) $(cat $a/0/pid)"
echo off > $a/0/state

# Lockdown: confidentiality bars bpf_probe_read_kernel; the boot keeps it to the end.
lock=/sys/kernel/security/lockdown
[ -e $lock ] || mount -t securityfs securityfs /sys/kernel/security 2>/dev/null || true
if [ -e $lock ] && echo confidentiality > $lock 2>/dev/null; then
  echo "LOCKDOWN=$(cat $lock)"
  kvtierd_run LOCKDOWN_ /tmp/kvtierd2.log
  # Waits (at most 120 s) for its third step.
  n=0
  until st=$(steps 2>/dev/null) && [ "${st:-0}" -ge 3 ] || [ $n -ge 600 ]; do
    n=$((n + 1))
    sleep 0.2
  done
  echo "LOCKDOWN_STEPS=$(steps)"
  kvtierd_stop 'refused by the kernel: kernel lockdown is confidentiality'
else
  echo "LOCKDOWN=unavailable: $(cat $lock 2>&1 || echo "no $lock")"
fi
kill -TERM "$fill_pid"
wait "$fill_pid" || true
echo "FILL_CHECK=$(tail -n 1 /tmp/fill.json)"
