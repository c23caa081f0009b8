#!/usr/bin/env bash
# Runs kvtier's libFuzzer targets (built by scripts/sanitize.sh into
# ${KVTIER_FUZZ_BUILD_DIR:-build-san}), each seeded from the fixture trees and
# the shipped config, and prints per target its executions and crashes.
#   config       the config parser and compiler    seeds: systemd/kvtier.toml, tests/fixtures/config
#   control      the control request parser        seeds: tests/fuzz/seeds/control
#   host_text    the /proc and /sys text parsers   seeds: tests/fixtures/procfs, tests/fixtures/topology
#   kvsim_trace  bench/kvsim's trace readers       seeds: tests/fixtures/kvsim
# Usage: scripts/fuzz.sh [--seconds N | --runs N] [TARGET...]   (default: 60 s each, all targets)
# A crash, leak, timeout (10 s) or out-of-memory (2 GiB) input is kept under
# BUILD/fuzz/TARGET/crashes/ and makes the script exit 1; rerun one with
# BUILD/tests/fuzz_TARGET FILE. Targets given together run one after the other.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_FUZZ_BUILD_DIR:-$top/build-san}
limit=(-max_total_time=60)
targets=()
while (($#)); do
  case $1 in
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(config control host_text kvsim_trace)

seeds_of() {
  case $1 in
    config) echo "$top/systemd/kvtier.toml $top/tests/fixtures/config" ;;
    control) echo "$top/tests/fuzz/seeds/control" ;;
    host_text) echo "$top/tests/fixtures/procfs $top/tests/fixtures/topology" ;;
    kvsim_trace) echo "$top/tests/fixtures/kvsim" ;;
    *) return 1 ;;
  esac
}

rc=0
for t in "${targets[@]}"; do
  seeds=$(seeds_of "$t") || { echo "fuzz: unknown target $t (config, control, host_text, kvsim_trace)" >&2; exit 2; }
  bin=$build/tests/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz: $bin missing; build it with scripts/sanitize.sh --build-only" >&2; exit 2; }
  work=$build/fuzz/$t
  mkdir -p "$work/corpus" "$work/crashes"
  # Seed files (regular files only: the fixture's exe is a symlink), named by content.
  while IFS= read -r -d '' f; do
    cp "$f" "$work/corpus/seed-$(sha1sum <"$f" | cut -c1-16)"
  done < <(find $seeds -type f -size -1024k -print0)
  log=$work/last.log
  start=$(date +%s)
  status=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/" "$work/corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # slow-unit-* files are inputs that were merely slow on a busy machine: kept, not counted.
  found=$(find "$work/crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  echo "fuzz: $t: ${runs:-?} executions in $(($(date +%s) - start)) s, $found crash(es), corpus $(find "$work/corpus" -type f | wc -l) inputs (log: $log)"
  if ((status != 0 || found != 0)); then
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 >&2 || true
    rc=1
  fi
done
exit $rc
