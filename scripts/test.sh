#!/usr/bin/env bash
# Runs every test kvtier has, on a fresh Debian 12 machine or an old one:
#   1. scripts/setup.sh: install packages, configure, build;
#   2. ctest: unit tests, privileged tests (as root on this kernel) and vm tests (inside the
#      tiered-memory QEMU guest; two guests at a time, the longest tests first:
#      tests/CMakeLists.txt);
#   3. beside step 2, at nice 19 (they take the CPU the tests leave idle): scripts/lint.sh
#      (clang-format and clang-tidy), then the sanitizer build (scripts/sanitize.sh
#      --build-only: ASan and UBSan, clang-19, -O1, in build-san/); the tests' phase ends when
#      both are done too, and their own times are printed;
#   4. scripts/sanitize.sh: the unit and privileged tests in build-san/, and each libFuzzer
#      target for 20 s.
# Extra arguments go to ctest (e.g. -L unit, -R topology); with arguments there is no
# sanitizer build and no step 4 (lint still runs beside the tests).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
export KVTIER_BUILD_DIR=$build
start=$(date +%s)
phase=$start
times=()
lap() {
  local now
  now=$(date +%s)
  times+=("$1 $((now - phase)) s")
  phase=$now
}

"$top/scripts/setup.sh"
lap setup+build

# Lint, then (full run only) the sanitizer build, in a session of their own (killed with the
# script), each writing its log, its exit status and its seconds to $side/. A new session is a
# new scheduler autogroup (kernel.sched_autogroup_enabled), within which alone nice counts: the
# autogroup itself is set to nice 19 too, so that the tests' guests keep their cores (measured:
# two busy loops there got 1/25 of the CPU time of two beside them in the tests' group).
side=$(mktemp -d)
side_steps=(lint)
(($# == 0)) && side_steps+=(sanitize-build)
# shellcheck disable=SC2016 # the script's arguments, expanded by the inner bash
setsid -w bash -c '
  top=$1 side=$2
  shift 2
  echo 19 >/proc/self/autogroup 2>/dev/null || true
  for step; do
    t0=$(date +%s)
    rc=0
    case $step in
      lint) nice -n 19 "$top/scripts/lint.sh" ;;
      sanitize-build) nice -n 19 "$top/scripts/sanitize.sh" --build-only ;;
    esac >"$side/$step.log" 2>&1 || rc=$?
    echo "$rc $(($(date +%s) - t0))" >"$side/$step.status"
  done' side "$top" "$side" "${side_steps[@]}" &
side_pid=$!
trap 'kill -- -$side_pid 2>/dev/null || true; rm -rf "$side"' EXIT

ctest_args=(--test-dir "$build" --output-on-failure --timeout 1200 -j "$(nproc)")
if [[ $(id -u) -ne 0 ]]; then
  echo "test: not root: skipping the privileged and vm labels (they need root)"
  ctest_args+=(-LE 'privileged|vm')
fi
rc=0
ctest "${ctest_args[@]}" "$@" || rc=$?
ctest_s=$(($(date +%s) - phase))
wait "$side_pid" || true
side_times=()
for step in "${side_steps[@]}"; do
  read -r step_rc step_s <"$side/$step.status" || { step_rc=1; step_s='?'; }
  if ((step_rc != 0)) || [[ $step == lint ]]; then
    cat "$side/$step.log"
  fi
  if ((step_rc != 0)); then
    echo "test: $step failed (exit $step_rc); its output is above" >&2
    rc=1
  fi
  side_times+=("$step $step_s s")
done
lap "tests+$(printf '%s+' "${side_steps[@]}" | sed 's/+$//; s/sanitize-build/sanitizer-build/')"
times[-1]+=" (ctest $ctest_s s; beside it at nice 19: $(printf '%s, ' "${side_times[@]}" | sed 's/, $//'))"
if (($# == 0)); then
  "$top/scripts/sanitize.sh" || rc=$?
  lap sanitize-tests+fuzz
fi
summary=$(printf '%s; ' "${times[@]}")
echo "test: finished in $(($(date +%s) - start)) s (${summary%; })"
exit $rc
