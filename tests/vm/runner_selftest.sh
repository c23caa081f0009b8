#!/usr/bin/env bash
# scripts/vm/run itself: exit statuses pass through, stdout and stderr stay
# apart, arguments arrive byte for byte, the guest has what the brief
# promises (mounts, cwd, /kvtier/*), and a timeout or a guest that cannot
# boot fails loudly with 124 or 125 instead of hanging or passing.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
run=$KVTIER_VM_RUN
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

expect_status() {
  local want=$1 rc=0
  shift
  "$run" "$@" >"$work/out" 2>"$work/err" || rc=$?
  if ((rc != want)); then
    sed 's/^/  | /' "$work/err" >&2
    fail "'run $*' exited $rc, want $want"
  fi
  echo "$test_name: ok: run $* -> $rc"
}

expect_status 1 -- false
expect_status 7 -- sh -c 'exit 7'
expect_status 127 -- no-such-command-in-the-guest

# One boot for the guest's environment and the argument passing.
# shellcheck disable=SC2016 # literal $ and backquotes are the point
args=("a b" "it's" '$HOME `id` "q"' $'two\nlines' '' '*')
# shellcheck disable=SC2016 # expanded by the guest's sh
"$run" -- sh -c '
  printf "<%s>\n" "$@"
  echo "cwd=$(pwd)"
  echo err-line >&2
  awk "{print \"mount \" \$2 \" \" \$3}" /proc/mounts
  for p in /kvtier/bin/kvtierctl /kvtier/scripts/capture-topology.sh /kvtier/tests/vm/lib.sh \
    /kvtier/traces/mooncake_synthetic_trace.jsonl /kvtier/traces/azure_llm_conv_2023.csv \
    /kvtier/traces/azure_llm_code_2023.csv; do
    [ -e "$p" ] && echo "have $p"
  done
  kvtierctl --version >/dev/null && echo "kvtierctl runs"
' sh "${args[@]}" >"$work/out" 2>"$work/err" || fail "environment probe failed: $(cat "$work/err")"

want_args=$(printf '<%s>\n' "${args[@]}")
got_args=$(head -n "$(printf '<%s>\n' "${args[@]}" | wc -l)" "$work/out")
[[ $got_args == "$want_args" ]] || fail "arguments changed on the way: got [$got_args] want [$want_args]"
grep -qx 'err-line' "$work/err" || fail "stderr line missing from stderr: $(cat "$work/err")"
! grep -q 'err-line' "$work/out" || fail "stderr leaked into stdout"
for line in "cwd=/tmp" "mount /proc proc" "mount /sys sysfs" "mount /dev devtmpfs" \
  "mount /sys/kernel/debug debugfs" "mount /sys/kernel/tracing tracefs" "mount /sys/fs/bpf bpf" \
  "mount /tmp tmpfs" "have /kvtier/bin/kvtierctl" "have /kvtier/scripts/capture-topology.sh" \
  "have /kvtier/tests/vm/lib.sh" "have /kvtier/traces/mooncake_synthetic_trace.jsonl" \
  "have /kvtier/traces/azure_llm_conv_2023.csv" "have /kvtier/traces/azure_llm_code_2023.csv" \
  "kvtierctl runs"; do
  grep -qxF "$line" "$work/out" || fail "guest output lacks '$line'"
done
echo "$test_name: ok: arguments, stdout/stderr, mounts, cwd and /kvtier/* as promised"

# Failing loudly: a guest that cannot finish in time, and one that cannot boot
# (too little memory to load the kernel and initramfs).
expect_status 124 --timeout 2 -- sleep 100
grep -q 'timeout' "$work/err" || fail "no timeout message on stderr"
expect_status 125 --mem0 16 --mem1 16 --timeout 120 -- true
grep -q 'guest failed to boot' "$work/err" || fail "no 'guest failed to boot' message on stderr"
