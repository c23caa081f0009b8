#!/usr/bin/env bash
# deploy/kubernetes/kvtier-config-reloader beside a real kvtierd: the mounted config swapped
# the way the kubelet swaps a ConfigMap (a new ..data symlink renamed into place) reloads
# kvtierd without a restart; a bad config is rejected and the running one stays; an edit of a
# plain file (close_write) reloads too. Usage: config_reloader_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
[[ $(id -u) -eq 0 ]] || { echo "SKIP: kvtierd needs root (CAP_BPF, CAP_PERFMON)"; exit 77; }
for tool in inotifywait jq; do
  command -v $tool >/dev/null || { echo "$tool not found (scripts/setup.sh installs it)"; exit 1; }
done
tmp=$(mktemp -d)
pids=()
reloader=
# The reloader runs in a session of its own: killing its shell alone would leave its
# pipeline (inotifywait and the loop's subshell) running after the test.
cleanup() {
  local rc=$?
  kill "${pids[@]}" 2>/dev/null || true
  [[ -z $reloader ]] || kill -- "-$reloader" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- kvtierd"; cat "$tmp/kvtierd.log"; echo "--- reloader"; cat "$tmp/reloader.log"; exit 1; }
wait_log() {  # FILE PATTERN COUNT: until PATTERN appears COUNT times (30 s)
  for _ in $(seq 150); do
    (($(grep -c -- "$2" "$1" || true) >= $3)) && return 0
    sleep 0.2
  done
  return 1
}
config() { printf '[daemon]\ninterval = "%s"\n[telemetry]\nsocket_group = "root"\n[[group]]\nname = "none"\n[group.select]\ncomm = ["^kvtier-selects-nothing$"]\n' "$1"; }
swap() {  # the kubelet's atomic writer: a new directory, ..data renamed onto it
  mkdir "$tmp/etc/..$1"
  printf '%s\n' "$2" >"$tmp/etc/..$1/kvtier.toml"
  ln -sfn "..$1" "$tmp/etc/..data_tmp"
  mv -T "$tmp/etc/..data_tmp" "$tmp/etc/..data"
}
mkdir "$tmp/etc"
swap v1 "$(config 1s)"
ln -s ..data/kvtier.toml "$tmp/etc/kvtier.toml"
sock=$tmp/kvtierd.sock
"$build/agent/kvtierd" --foreground --config "$tmp/etc/kvtier.toml" --socket "$sock" >"$tmp/kvtierd.log" 2>&1 &
pids+=($!)
kvtierd=$!
: >"$tmp/reloader.log"
for _ in $(seq 150); do [[ -S $sock ]] && break; sleep 0.2; done
[[ -S $sock ]] || fail "no control socket"
KVTIER_SOCKET=$sock KVTIERCTL=$build/agent/kvtierctl \
  setsid "$src/deploy/kubernetes/kvtier-config-reloader" "$tmp/etc" >"$tmp/reloader.log" 2>&1 &
reloader=$!
wait_log "$tmp/reloader.log" "watching" 1 || fail "the reloader did not start"
sleep 0.5  # inotifywait sets its watch right after the line above

swap v2 "$(config 2s)"
wait_log "$tmp/kvtierd.log" "configuration reloaded" 1 || fail "a swapped ConfigMap did not reload"
grep -q "sent SIGHUP to kvtierd (pid $kvtierd)" "$tmp/reloader.log" || fail "the reloader did not name kvtierd's pid"
echo "ok: ..data swapped: kvtierd (pid $kvtierd) reloaded"

swap v3 "[daemon"
wait_log "$tmp/kvtierd.log" "reload rejected" 1 || fail "a bad config was not rejected"
kill -0 "$kvtierd" || fail "kvtierd stopped on a bad config"
status=$("$build/agent/kvtierctl" --socket "$sock" status --json)
[[ $(jq .reloads_rejected <<<"$status") == 1 ]] || fail "status: $(jq -c '{reloads, reloads_rejected}' <<<"$status")"
echo "ok: a bad config: rejected, kvtierd runs on"

# A plain file edited in place (a hostPath or a manual test): close_write.
rm "$tmp/etc/kvtier.toml"
config 3s >"$tmp/etc/kvtier.toml"
config 4s >"$tmp/etc/kvtier.toml"
wait_log "$tmp/kvtierd.log" "configuration reloaded" 2 || fail "an edited file did not reload"
echo "ok: an edited file reloaded kvtierd"
[[ $(jq .reloads <<<"$("$build/agent/kvtierctl" --socket "$sock" status --json)") -ge 3 ]] ||
  fail "fewer than 3 reloads counted"
kill -TERM "$kvtierd"
wait "$kvtierd" || fail "kvtierd exited $? on SIGTERM"
echo "ok: kvtierd never restarted (pid $kvtierd throughout), exited 0 on SIGTERM"
