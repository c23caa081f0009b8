#!/bin/bash
# shellcheck disable=SC2015 # ok() always succeeds: "cond && ok || bad" is an if-else here.
# Guest side of vm.systemd_service (tests/vm/systemd_guest.sh): runs in the Debian 12 guest
# with systemd as PID 1 and walks the operator's path of docs/install.md, asserting each step:
#   install the package (apt-get install ./kvtier_*.deb from the root's local repository of
#   its dependencies: no network); edit /etc/kvtier/kvtier.toml to select kvsim; systemctl
#   enable --now; READY; inside the sandbox the [tiering] knobs are set, the faults source
#   runs and DAMON stands by (no kdamond), and pages of kvsim (run as another user) move to
#   node 1; journalctl; kvtierctl status as a member of the kvtier group; systemctl reload
#   applies a new cold_age, and without the faults source starts DAMON's kdamond;
#   systemd-analyze security <= 3.0; systemctl stop puts the knobs back and leaves no kdamond
#   and no BPF program; the watchdog restarts a stopped daemon, which comes back READY, puts
#   back the knobs the killed one changed and turns off the kdamond it left on.
#   One "ok:" or "FAIL:" line per assertion; exits 1 if any failed.
set -u
fails=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# Stops here: the rest depends on this step.
fatal() {
  bad "$*"
  echo "--- journalctl -u kvtierd (last 40 lines)"
  journalctl -u kvtierd --no-pager -n 40
  exit 1
}
prop() { systemctl show -P "$1" kvtierd; }
# wait_for SECONDS COMMAND...: polls COMMAND every half second.
wait_for() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.5
  done
}
ready() { [[ $(prop ActiveState) == active && -n $(prop StatusText) ]]; }
ctl_json() { kvtierctl status --json 2>/dev/null | tr -d ' \n'; }
# Program ids of the BPF programs of the types kvtier loads (tracepoints, perf events,
# fentry/tracing); systemd's own are cgroup programs.
kvtier_type_progs() {
  bpftool prog show 2>/dev/null | awk -F'[: ]+' '/^[0-9]+: (tracepoint|perf_event|tracing|kprobe|raw_tracepoint)/ {print $1}' | sort
}
kdamonds() { grep -lx 'kdamond.*' /proc/[0-9]*/comm 2>/dev/null | wc -l; }
# kdamonds_are OP N: the number of kdamonds, counted at each call, compares so with N (for
# wait_for: an argument "$(kdamonds)" would be counted once, before the first poll).
kdamonds_are() { test "$(kdamonds)" "$1" "$2"; }

systemd-analyze time | head -n 1
echo "systemd $(systemctl --version | head -n 1 | cut -d' ' -f2), kernel $(uname -r), system: $(systemctl is-system-running)"
systemctl --failed --no-legend --no-pager

# --- install
deb=$(ls /kvtier/files/kvtier_*.deb)
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
if apt-get install -y -q "$deb" >/tmp/apt.log 2>&1; then
  ok "apt-get install ./$(basename "$deb") in $((SECONDS - start)) s"
else
  cat /tmp/apt.log
  fatal "apt-get install $deb"
fi
[[ $(dpkg-query -W -f='${Status}' kvtier) == "install ok installed" ]] && ok "dpkg: kvtier installed" ||
  bad "dpkg-query: kvtier is '$(dpkg-query -W -f='${Status}' kvtier)'"
dpkg-query -W -f='${Conffiles}\n' kvtier | grep -q '^ /etc/kvtier/kvtier.toml ' &&
  ok "/etc/kvtier/kvtier.toml is a conffile" || bad "/etc/kvtier/kvtier.toml is not a conffile"
apt-get install -y -q bpftool >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; fatal "apt-get install bpftool"; }
getent group kvtier >/dev/null && ok "group kvtier created (sysusers.d)" || bad "no kvtier group after install"
[[ $(systemctl is-enabled kvtierd 2>&1) == disabled ]] && ok "kvtierd.service installed, not enabled" ||
  bad "systemctl is-enabled kvtierd: $(systemctl is-enabled kvtierd 2>&1) (want disabled)"
[[ $(systemctl is-active kvtierd 2>&1) == inactive ]] && ok "kvtierd not started by the install" ||
  bad "systemctl is-active kvtierd: $(systemctl is-active kvtierd 2>&1) (want inactive)"

# --- the workload, run by another user, and the operator's config edit: select kvsim
useradd -M -G kvtier kvuser
# THP only where asked for (kvsim does not ask): with transparent_hugepage=always (Debian's
# default), a NUMA hint fault on kvsim's huge pages in tiering mode oopsed this 6.12 guest
# kernel in task_numa_fault (do_huge_pmd_numa_page; 1 run in 4 here), leaving kvsim stuck and
# kvtierd unable to stop. That is the kernel's, and this test is about the service.
echo madvise >/sys/kernel/mm/transparent_hugepage/enabled
setpriv --reuid=kvuser --regid=kvuser --init-groups /kvtier/bin/kvsim \
  --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 192MiB --time-scale 1 \
  --duration 900 >/tmp/kvsim.out 2>/tmp/kvsim.err &
sim=$!
wait_for 60 grep -q '"pool"' /tmp/kvsim.out || fatal "kvsim did not start: $(cat /tmp/kvsim.err)"
ok "kvsim running as kvuser (pid $sim)"
cfg=/etc/kvtier/kvtier.toml
# The shipped config with the interval, the group's selector and its cold age changed
# (cold_age_max = cold_age: the effective cold age is exactly cold_age).
sed -i -e 's/^interval = "5s"/interval = "1s"/' \
  -e 's/^comm = \[.*\]/comm = ["^kvsim$"]/' \
  -e 's/^cold_age = "10s"/cold_age = "5s"/' -e 's/^cold_age_max = "10m"/cold_age_max = "5s"/' "$cfg"
grep -q '^comm = \["^kvsim\$"\]' "$cfg" && grep -q '^cold_age_max = "5s"' "$cfg" ||
  fatal "the sed edit of $cfg did not apply (the shipped config changed?)"
kvtierctl config check "$cfg" >/dev/null || fatal "kvtierctl config check $cfg"

# --- enable --now, READY
numa_before=$(cat /proc/sys/kernel/numa_balancing)
progs_before=$(kvtier_type_progs)
start=$SECONDS
systemctl enable --now kvtierd || fatal "systemctl enable --now kvtierd"
if wait_for 120 ready; then
  ok "READY in $((SECONDS - start)) s: $(prop StatusText)"
else
  fatal "kvtierd not READY after 120 s: ActiveState=$(prop ActiveState) SubState=$(prop SubState) StatusText='$(prop StatusText)'"
fi
[[ $(systemctl is-enabled kvtierd) == enabled ]] && ok "enabled" || bad "not enabled after enable --now"
pid=$(prop MainPID)
restarts_of() { echo "$(prop NRestarts) restart(s), MainPID $(prop MainPID), Result $(prop Result)"; }

# --- inside the sandbox: the [tiering] knobs written, the sources running, pages moved
numa_during=$(cat /proc/sys/kernel/numa_balancing)
[[ $numa_during == 3 ]] && ok "kernel.numa_balancing set to 3 (was $numa_before)" ||
  bad "kernel.numa_balancing is $numa_during under kvtierd (want 3: [tiering] numa_balancing = \"tiering\")"
# kvtierctl status may time out on a loaded guest: asked again for up to 30 s.
tiering_set() {
  # The object nests return_watch's: match one level of inner braces.
  tiering=$(ctl_json | grep -o '"tiering":{\([^{}]*\({[^{}]*}\)\{0,1\}\)*}' | head -n 1)
  grep -q '"error":""' <<<"$tiering" && grep -q '"tiering_mode":true' <<<"$tiering"
}
wait_for 30 tiering_set && ok "[tiering] knobs set: $tiering" || bad "[tiering]: '$tiering'"
n1_pages() { awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^N1=/) s += substr($i, 4) } END { print s + 0 }' /proc/$sim/numa_maps; }
moved() { (($(n1_pages) >= 1024)); }
start=$SECONDS
if wait_for 180 moved; then
  ok "kvsim has $(n1_pages) pages on node 1 after $((SECONDS - start)) s"
else
  bad "kvsim has only $(n1_pages) pages on node 1 after 180 s"
fi
# The shipped config turns normal NUMA balancing on too (bit 1): the hint faults see DRAM
# pages, so DAMON stands by and no kdamond runs.
standby() { kvtierctl status 2>/dev/null | grep -q 'damon (stands by: NUMA hint faults'; }
wait_for 30 standby && ok "damon stands by: $(kvtierctl status | grep -o 'damon (stands by[^)]*)')" ||
  bad "damon does not stand by under the shipped config: $(kvtierctl status 2>&1 | grep sources)"
# The faults source was chosen before the first step set numa_balancing; status gives what it
# sees since it started (hint faults), not the choice's "numa_balancing is off".
hints() { kvtierctl status 2>/dev/null | grep -q 'faults (ok: user page faults including NUMA hint faults (numa_balancing=3)'; }
wait_for 30 hints && ok "status: the faults source sees NUMA hint faults" ||
  bad "status does not say the faults source sees hint faults: $(kvtierctl status 2>&1 | grep sources)"
# kvsim is single-threaded: the kernel's scan skips its pages on node 0, and status says so.
single() { kvtierctl status 2>/dev/null | grep -q 'degraded .*is single-threaded: the kernel.s NUMA scan'; }
wait_for 30 single && ok "status: kvsim's DRAM reads go unseen (single-threaded)" ||
  bad "status does not say that kvsim is single-threaded: $(kvtierctl status 2>&1 | grep -A3 degraded)"
[[ $(kdamonds) == 0 ]] && ok "no kdamond while DAMON stands by" || bad "$(kdamonds) kdamond(s) while DAMON stands by"
progs_during=$(kvtier_type_progs)
new_progs=$(comm -13 <(echo "$progs_before") <(echo "$progs_during") | wc -l)
((new_progs > 0)) && ok "kvtierd loaded $new_progs tracing/perf BPF program(s) (the faults source)" ||
  bad "no BPF program of kvtier's types loaded under kvtierd"

# --- journalctl, kvtierctl status (root, and a member of the kvtier group)
journalctl -u kvtierd --no-pager -o cat | grep -q 'kvtierd running' && ok "journalctl -u kvtierd has the daemon's log" ||
  bad "no 'kvtierd running' in journalctl -u kvtierd"
kvtierctl status | sed 's/^/  | /'
if out=$(runuser -u kvuser -- kvtierctl status 2>&1); then
  ok "kvtierctl status as kvuser (group kvtier)"
else
  bad "kvtierctl status as kvuser (group kvtier): $out"
fi

[[ $(prop MainPID) == "$pid" ]] && ok "still the first process (pid $pid)" || bad "kvtierd restarted: $(restarts_of)"
pid=$(prop MainPID)
# --- systemctl reload applies a new cold age
cold_age() { ctl_json | grep -o '"effective_cold_age_s":[0-9.]*' | head -n 1 | cut -d: -f2; }
# cold_age_is S: the effective cold age kvtierctl status reports is S seconds.
cold_age_is() { awk -v a="$(cold_age)" -v w="$1" 'BEGIN { exit !(a != "" && a + 0 == w) }'; }
wait_for 10 cold_age_is 5 && ok "effective cold age 5 s before the reload" ||
  bad "effective cold age '$(cold_age)' before the reload (want 5)"
# The reload also drops the faults source: DAMON is then the only read evidence in DRAM and
# starts (the watchdog's kill below leaves its kdamond on for the next kvtierd to turn off).
sed -i -e 's/^cold_age = "5s"/cold_age = "7s"/' -e 's/^cold_age_max = "5s"/cold_age_max = "7s"/' \
  -e 's/^use = .*/use = ["damon", "dirty"]/' "$cfg"
systemctl reload kvtierd && ok "systemctl reload kvtierd" || bad "systemctl reload kvtierd"
if wait_for 30 cold_age_is 7; then
  ok "after the reload: effective cold age 7 s"
else
  bad "effective cold age '$(cold_age)' 30 s after systemctl reload (want 7)"
fi
wait_for 60 kdamonds_are -gt 0 && ok "after the reload without faults: $(kdamonds) kdamond(s) running (the damon source)" ||
  bad "no kdamond after the reload without faults: $(kvtierctl status 2>&1 | grep sources)"
journalctl -u kvtierd --no-pager -o cat | grep -q 'configuration reloaded' && ok "journal: configuration reloaded" ||
  bad "no 'configuration reloaded' in the journal"
[[ $(prop MainPID) == "$pid" ]] && ok "reload kept the process (pid $pid)" || bad "reload changed MainPID"

# --- systemd-analyze security
score=$(systemd-analyze security kvtierd --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for kvtierd.service: \([0-9.]*\).*/\1/p')
if [[ -n $score ]] && awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }'; then
  ok "systemd-analyze security kvtierd: exposure $score (<= 3.0)"
else
  bad "systemd-analyze security kvtierd: exposure '${score:-none}' (want <= 3.0)"
fi

# --- systemctl stop: knobs back, no kdamond, no BPF program
systemctl stop kvtierd || bad "systemctl stop kvtierd"
[[ $(prop ActiveState) == inactive ]] && ok "stopped" || bad "ActiveState=$(prop ActiveState) after stop"
[[ $(cat /proc/sys/kernel/numa_balancing) == "$numa_before" ]] && ok "kernel.numa_balancing back to $numa_before" ||
  bad "kernel.numa_balancing is $(cat /proc/sys/kernel/numa_balancing) after stop (was $numa_before)"
wait_for 10 kdamonds_are -eq 0 && ok "no kdamond after stop" || bad "$(kdamonds) kdamond(s) after stop"
no_new_progs() { [[ -z $(comm -13 <(echo "$progs_before") <(kvtier_type_progs)) ]]; }
if wait_for 10 no_new_progs; then
  ok "no BPF program of kvtier left after stop"
else
  bad "BPF programs left after stop: $(comm -13 <(echo "$progs_before") <(kvtier_type_progs) | tr '\n' ' ')"
  bpftool prog show
fi
pins=$(find /sys/fs/bpf -mindepth 1 2>/dev/null | wc -l)
((pins == 0)) && ok "nothing pinned in /sys/fs/bpf" || bad "$pins entries in /sys/fs/bpf after stop"

# --- the watchdog restarts a stopped daemon (a drop-in shortens it)
mkdir -p /etc/systemd/system/kvtierd.service.d
printf '[Service]\nWatchdogSec=20s\nRestartSec=1s\n' >/etc/systemd/system/kvtierd.service.d/test-watchdog.conf
systemctl daemon-reload
systemctl start kvtierd
wait_for 120 ready || fatal "kvtierd not READY after a start with WatchdogSec=20s"
sleep 30
[[ $(prop ActiveState) == active && $(prop NRestarts) == 0 ]] &&
  ok "alive 30 s under WatchdogSec=20s (it pings the watchdog)" ||
  bad "under WatchdogSec=20s without a stall: ActiveState=$(prop ActiveState) NRestarts=$(prop NRestarts)"
restarts=$(prop NRestarts)
pid=$(prop MainPID)
kill -STOP "$pid"
start=$SECONDS
back() { (($(prop NRestarts) > restarts)) && [[ $(prop MainPID) != "$pid" ]] && ready; }
if wait_for 120 back; then
  ok "watchdog: stopped pid $pid replaced by $(prop MainPID), NRestarts $(prop NRestarts), READY again in $((SECONDS - start)) s"
else
  bad "watchdog: 120 s after SIGSTOP: NRestarts=$(prop NRestarts) MainPID=$(prop MainPID) ActiveState=$(prop ActiveState)"
  kill -CONT "$pid" 2>/dev/null
fi
journalctl -u kvtierd --no-pager -o cat | grep -i 'watchdog' | tail -n 2 | sed 's/^/  | /'
# The killed daemon could not put anything back; the new one takes over from its journal in
# /run/kvtier (RuntimeDirectoryPreserve=yes): the host's knob values and its kdamond.
recovered() { journalctl -u kvtierd --no-pager -o cat | grep -q "$1"; }
wait_for 60 recovered 'did not stop cleanly left it changed' &&
  ok "the new kvtierd took the host's knob values from the killed one's journal" ||
  bad "the new kvtierd did not read /run/kvtier/tiering.saved: $(ls /run/kvtier 2>&1 | tr '\n' ' ')"
wait_for 60 recovered 'left on by a kvtierd that did not stop cleanly: turned off' &&
  ok "the new kvtierd turned off the kdamond the killed one left on" ||
  bad "the killed kvtierd's kdamond was not reclaimed: $(journalctl -u kvtierd -o cat --no-pager | grep -m2 -i 'damon' | tr '\n' ' ')"
systemctl stop kvtierd
[[ $(cat /proc/sys/kernel/numa_balancing) == "$numa_before" ]] &&
  ok "after the watchdog's kill, a restart and a stop: kernel.numa_balancing back to $numa_before" ||
  bad "after the watchdog's kill, a restart and a stop: kernel.numa_balancing is $(cat /proc/sys/kernel/numa_balancing) (was $numa_before)"
wait_for 10 kdamonds_are -eq 0 && ok "no kdamond after the restarted daemon stopped" ||
  bad "$(kdamonds) kdamond(s) after the restarted daemon stopped"
kill "$sim" 2>/dev/null

if ((fails)); then
  echo "--- journalctl -u kvtierd (last 200 lines)"
  journalctl -u kvtierd --no-pager -o short-monotonic -n 200
  journalctl -k --no-pager -o short-monotonic | grep -Ei 'kvtierd|oom|segfault|audit' | tail -n 20
else
  echo "--- journalctl -u kvtierd (last 15 lines)"
  journalctl -u kvtierd --no-pager -n 15
fi
echo "failures: $fails"
((fails == 0))
