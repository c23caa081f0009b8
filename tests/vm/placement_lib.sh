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
