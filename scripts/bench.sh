#!/usr/bin/env bash
# The tiering benchmark: the same kvsim workload under no tiering, the kernel's own tiering,
# DAMOS alone and kvtier, each in a freshly booted guest with the same memory layout; then
# bench/report.py writes OUT/report.md (the table), OUT/residency.png and OUT/results.json.
#
# Usage: scripts/bench.sh [--duration S] [--out DIR] [--modes "none kernel damos kvtier"]
#                         [--budget SIZE] [--mem0 MiB] [--mem1 MiB] [--report-only]
#   --duration  seconds measured per mode (default 100; the whole run takes about 2.3 min a mode)
#   --out       where results go (default build/bench/<date>)
#   --budget    kvsim's KV pool (default 256MiB); --mem0/--mem1 the guest's nodes (256/1024)
#   --report-only  rebuild the report from OUT's files without running anything
# Settings of the modes (DAMOS_*, DAMON_*, KVTIER_*, COLD_AGE_S, MAP_EVERY: see
# scripts/bench/guest.sh) pass through from the environment.
# Guests boot with nokaslr (KVTIER_VM_APPEND) so that every mode gets the same node sizes.
# Needs the build (kvsim, kvtier_residency_probe, kvtierd, kvtierctl) in $KVTIER_BUILD_DIR
# (default build/). Exit status: 0 when every mode ran or reported why it could not, 1 else.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}
duration=100
out=
modes="none kernel damos kvtier"
budget=256MiB
mem0=256
mem1=1024
report_only=0
failed=0
while (($#)); do
  case $1 in
    --duration) duration=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --modes) modes=${2:?}; shift ;;
    --budget) budget=${2:?}; shift ;;
    --mem0) mem0=${2:?}; shift ;;
    --mem1) mem1=${2:?}; shift ;;
    --report-only) report_only=1 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $duration =~ ^[1-9][0-9]*$ ]] || { echo "bench: --duration '$duration' is not a positive integer" >&2; exit 2; }
out=${out:-$KVTIER_BUILD_DIR/bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

# matplotlib lives in Debian's python3 (python3-matplotlib); a pyenv python may lack it.
py=python3
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import matplotlib' 2>/dev/null; then py=$p; break; fi
done

if ((!report_only)); then
  for bin in kvsim kvtier_residency_probe; do
    [[ -n $(find "$KVTIER_BUILD_DIR" -name "$bin" -type f -perm -u+x -print -quit) ]] || {
      echo "bench: $bin not built in $KVTIER_BUILD_DIR (cmake --build build)" >&2
      exit 1
    }
  done
  # Mode settings from the environment, passed on to the guest script.
  pass=()
  while IFS='=' read -r name value; do
    [[ $name =~ ^(DAMOS_|DAMON_|KVTIER_(CONFIG|CHECK_AFTER_S|REGION_MIN_SHARE)$|COLD_AGE_S$|MAP_EVERY$) ]] &&
      pass+=("$name=$value")
  done < <(env)
  kvsim_args=(--trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget "$budget"
    --time-scale 1 --read-nodes-every 1 --stats-interval 1 --cold-ages 10,30 --flush-tlb)
  for mode in $modes; do
    echo "bench: mode $mode: booting the guest (node 0 $mem0 MiB, node 1 $mem1 MiB), $duration s of workload" >&2
    t0=$(date +%s)
    rc=0
    KVTIER_VM_APPEND="nokaslr${KVTIER_VM_APPEND:+ $KVTIER_VM_APPEND}" "$top/scripts/vm/run" --mem0 "$mem0" --mem1 "$mem1" --timeout $((duration + 300)) -- \
      env "${pass[@]}" sh /kvtier/scripts/bench/guest.sh "$mode" "$duration" "${kvsim_args[@]}" \
      >"$out/$mode.jsonl" 2>"$out/$mode.stderr" || rc=$?
    t1=$(date +%s)
    why=
    case $rc in
      0) ;;
      124) why="the guest timed out (exit 124)" ;;
      125) why="the guest did not boot (exit 125)" ;;
      *) why="the guest command exited $rc" ;;
    esac
    [[ -n $why ]] && why="$why; see $out/$mode.stderr" && failed=1
    printf '{"mode":"%s","vm_status":%d,"wall_s":%d,"mem0_mib":%d,"mem1_mib":%d,"budget":"%s","why":"%s"}\n' \
      "$mode" "$rc" $((t1 - t0)) "$mem0" "$mem1" "$budget" "$why" >"$out/$mode.meta.json"
    echo "bench: mode $mode: done in $((t1 - t0)) s (guest status $rc)" >&2
  done
fi

"$py" "$top/bench/report.py" "$out" --modes "$(echo $modes | tr ' ' ',')"
echo "bench: report in $out/report.md, plot in $out/residency.png" >&2
exit $failed
