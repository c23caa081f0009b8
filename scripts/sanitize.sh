#!/usr/bin/env bash
# The sanitizer build, apart from build/: every unit and privileged test
# program, kvtierd, kvtierctl and the libFuzzer targets, compiled by clang-19 at
# -O1 with AddressSanitizer and UndefinedBehaviorSanitizer (-DKVTIER_SANITIZE=ON
# -DKVTIER_FUZZ=ON) into ${KVTIER_SAN_BUILD_DIR:-build-san}. Then it runs the
# unit and privileged tests there (privileged only as root) and each fuzz
# target for a short fixed time, as many at once as there are cores (ctest label fuzz;
# scripts/fuzz.sh runs longer).
# Any sanitizer finding fails the test that hit it.
# Usage: scripts/sanitize.sh [--build-only]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_SAN_BUILD_DIR:-$top/build-san}
start=$(date +%s)

# -Wno-deprecated-declarations: libstdc++ 12's stable_sort calls get_temporary_buffer,
# which clang deprecates in C++23 (a warning inside the system header).
CC=clang-19 CXX=clang++-19 cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="-O1 -g1" -DCMAKE_CXX_FLAGS="-O1 -g1 -Wno-deprecated-declarations" \
  -DKVTIER_SANITIZE=ON -DKVTIER_FUZZ=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvtier_test_programs kvtier_fuzzers
echo "sanitize: built in $(($(date +%s) - start)) s"
[[ ${1:-} == --build-only ]] && exit 0

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Function names and lines in the reports (the `llvm` package's symbolizer, by its real path).
symbolizer=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)
[[ -n $symbolizer ]] && export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(readlink -f "$symbolizer")}
labels='unit|privileged'
if [[ $(id -u) -ne 0 ]]; then
  echo "sanitize: not root: unit tests only (privileged tests need root)"
  labels=unit
fi
rc=0
ctest --test-dir "$build" --output-on-failure --timeout 1200 -j "$(nproc)" -L "$labels" || rc=$?
# The fuzz targets side by side, one per core: each still fuzzes for its fixed time on a core.
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L fuzz || rc=$?
echo "sanitize: finished in $(($(date +%s) - start)) s"
exit $rc
