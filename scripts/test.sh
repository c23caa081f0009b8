#!/usr/bin/env bash
# Runs every test kvtier has, on a fresh Debian 12 machine or an old one:
#   1. scripts/setup.sh: install packages, configure, build;
#   2. scripts/lint.sh: clang-format and clang-tidy;
#   3. ctest: unit tests, privileged tests (as root on this kernel) and vm
#      tests (inside the tiered-memory QEMU guest; one guest at a time);
#   4. scripts/sanitize.sh: a second build with ASan and UBSan (clang-19, -O1,
#      in build-san/) of the unit and privileged tests, run there, and each
#      libFuzzer target for 20 s. Skipped when arguments are given.
# Extra arguments go to ctest (e.g. -L unit, -R topology).
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
"$top/scripts/lint.sh"
lap lint

ctest_args=(--test-dir "$build" --output-on-failure --timeout 1200 -j "$(nproc)")
if [[ $(id -u) -ne 0 ]]; then
  echo "test: not root: skipping the privileged and vm labels (they need root)"
  ctest_args+=(-LE 'privileged|vm')
fi
rc=0
ctest "${ctest_args[@]}" "$@" || rc=$?
lap tests
if (($# == 0)); then
  "$top/scripts/sanitize.sh" || rc=$?
  lap sanitize+fuzz
fi
summary=$(printf '%s; ' "${times[@]}")
echo "test: finished in $(($(date +%s) - start)) s (${summary%; })"
exit $rc
