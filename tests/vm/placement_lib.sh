# Sourced by the guest sides of the vm tests about kvtier's own placement
# (daemon_guest.sh, shared_pool_guest.sh): busybox sh.

# placement_config GROUP COMM_REGEX: /tmp/kvtier.toml for one group of the
# processes whose comm matches, checked. NUMA balancing would pull pages back
# behind kvtierd's back; these tests are about kvtier's own placement, so it is
# off and kvtierd keeps it so ([tiering] numa_balancing = "keep"; the benchmark
# runs the default).
placement_config() {
  echo 0 > /proc/sys/kernel/numa_balancing
  cat > /tmp/kvtier.toml <<CFG
[daemon]
interval = "1s"
[telemetry]
socket = "/tmp/kvtierd.sock"
socket_group = "root"
[limits]
min_free = "64MiB"
[tiering]
numa_balancing = "keep"
[[group]]
name = "$1"
[group.select]
comm = ["$2"]
[group.policy]
cold_age = "8s"
min_residence = "10s"
CFG
  kvtierd --check-config --config /tmp/kvtier.toml
}

ctl="kvtierctl --socket /tmp/kvtierd.sock"
steps() { $ctl status --json | tr -d '\n ' | sed -n 's/.*"steps":\([0-9]*\).*/\1/p'; }

# Pauses kvtierd and waits for its next step (at most 30 s): paused, kvtierd moves nothing
# more, and the first step after the pause reads the residency that the last move left, so
# the figures read after this are all of one moment. Prints STEPS_AFTER_PAUSE=N.
pause_for_figures() {
  $ctl pause >&2
  s0=$(steps)
  n=0
  while [ "$(steps)" -le "$s0" ] && [ $n -lt 300 ]; do
    n=$((n + 1))
    sleep 0.1
  done
  echo "STEPS_AFTER_PAUSE=$(($(steps) - s0))"
}

# cpu_less_node: sets cxl to the CPU-less node's number (the CXL guest's expander) and blocks to
# its memory blocks (memoryN under /sys/devices/system/node/nodeN).
cpu_less_node() {
  cxl=
  for d in /sys/devices/system/node/node*; do
    [ -e "$d/cpulist" ] && [ -z "$(cat "$d/cpulist")" ] && cxl=${d##*/node}
  done
  blocks=$(ls -d "/sys/devices/system/node/node$cxl"/memory[0-9]* | sed 's,.*/,,')
}

# The nodes kvtierd demotes to now ("1", "" for none: status --json's loop.topology).
demotion_targets() {
  $ctl status --json 2>/dev/null | tr -d '\n ' | sed -n 's/.*"demotion_targets":\[\([0-9,]*\)\].*/\1/p'
}
# Waits (at most 600 s) until kvtierd's demotion targets are "$1" ("" for none); prints the
# seconds waited.
wait_targets() {
  n=0
  while [ "$(demotion_targets)" != "$1" ] && [ $n -lt 6000 ]; do
    n=$((n + 1))
    sleep 0.1
  done
  echo $((n / 10))
}

# set_blocks 0|1 BLOCK...: offlines (0) or onlines (1) the CPU-less node's memory blocks
# (cpu_less_node), retrying a refused one up to 5 times; one line per block on stderr.
set_blocks() {
  v=$1
  shift
  for b in "$@"; do
    tries=0
    until echo "$v" 2>/tmp/set_blocks.err > "/sys/devices/system/node/node$cxl/$b/online"; do
      tries=$((tries + 1))
      [ $tries -lt 5 ] || break
      sleep 1
    done
    echo "$b online=$v: $(cat "/sys/devices/system/node/node$cxl/$b/state") $(cat /tmp/set_blocks.err)" >&2
  done
}

# The on (running) kdamonds under DAMON's sysfs admin tree.
kdamonds_on() {
  on=0
  for s in /sys/kernel/mm/damon/admin/kdamonds/*/state; do
    [ -f "$s" ] && [ "$(cat "$s")" = on ] && on=$((on + 1))
  done
  echo $on
}

# fill_buffer MIB FILE: kvtier_fill_check --mib MIB (idle for an hour, or until SIGTERM) in
# the background, its output in FILE; waits (at most 600 s of the guest's clock: the 30-minute
# soak's second node_full fault waited more than 60 s once, on a loaded host) for its first
# line and sets fill_pid, fill_start and fill_end (the buffer's addresses, decimal). Without
# that line: says so on stderr, fill_pid is the process's and fill_start and fill_end are 0.
fill_buffer() {
  # Emptied here, not by the background job's redirection: a FILE left by an earlier call
  # would otherwise be read before the job truncates it (the 30-minute soak's second
  # node_full fault read it empty, and `set --` below left $1 unset).
  : > "$2"
  kvtier_fill_check --mib "$1" --seconds 3600 > "$2" &
  fill_pid=$! fill_start=0 fill_end=0
  n=0
  while [ ! -s "$2" ] && [ $n -lt 6000 ]; do
    n=$((n + 1))
    sleep 0.1
  done
  if [ -s "$2" ]; then
    line=$(head -n 1 "$2")
    # shellcheck disable=SC2046 # the line's numbers, one word each
    set -- $(echo "$line" | sed 's/[^0-9]/ /g')
    if [ $# -ge 3 ]; then
      fill_pid=$1 fill_start=$2 fill_end=$3
    else
      echo "fill_buffer: kvtier_fill_check $fill_pid printed '$line', not its pid and buffer" >&2
    fi
  else
    echo "fill_buffer: kvtier_fill_check $fill_pid printed nothing in 600 s" >&2
  fi
}
