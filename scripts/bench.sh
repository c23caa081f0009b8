#!/usr/bin/env bash
# The tiering benchmark: the same kvsim workload under no tiering, the kernel's own tiering,
# DAMOS, an oracle that places from kvsim's ground truth, and kvtier, each in a freshly booted
# guest with the same memory layout; then bench/report.py writes OUT/report.md (the table, with
# every mode also as a ratio of the oracle), OUT/residency.png and OUT/results.json.
#
# Usage: scripts/bench.sh [--duration S] [--out DIR] [--modes "none kernel damos oracle kvtier"]
#                         [--kernel 6.12|7.3] [--trace NAME|FILE] [--repeat N] [--thp never|system|64k]
#                         [--budget SIZE] [--mem0 MiB] [--mem1 MiB] [--vcpus N] [--icount SPEC|off] [--idle-threads N] [--flat-out]
#                         [--report-only] [--workload kvsim|llama-server]
#   --duration  seconds measured per mode (default 100; the whole run takes about 2.5 min a mode)
#   --out       where results go (default build/bench/<date>)
#   --modes     none kernel damos damos-goal oracle kvtier (damos-goal needs --kernel 7.3, damos
#               6.12's layout); default: "none kernel damos oracle kvtier" on 6.12,
#               "none damos-goal oracle kvtier" on 7.3
#   --kernel    the guest's kernel (scripts/vm/run --kernel; default 6.12)
#   --trace     mooncake (default), azure-conv, azure-code (bench/traces/), or a trace file
#               under bench/traces/
#   --repeat    runs of each mode (default 1), interleaved (every mode once, then again); the
#               report gives the median and the range
#   --thp       kvsim's pool in 4 KiB pages (never, the default: kvsim --no-hugepages), as the
#               guest's THP setting makes it (system: "always" on Debian; see docs/benchmarks.md),
#               or in 64 KiB folios (64k: multi-size THP, 6.8+; the guest sets hugepages-64kB
#               "always" and the top-level THP "never", so no 2 MiB THP, and kvsim does not
#               madvise the pool; the same in every mode)
#   --budget    kvsim's KV pool (default 256MiB); --mem0/--mem1 the guest's nodes (256/1024)
#   --vcpus     the guest's CPUs (default 1; scripts/vm/run --vcpus). One TCG thread runs them in
#               turn, and a guest process is charged for the time its vCPU waits for its turn:
#               with 2, kvsim's CPU also counts what kvtierd, the oracle or the probe ran meanwhile
#   --icount    QEMU's -icount for the guests (default shift=0,sleep=on: the guest's clock counts
#               the instructions it runs, 1 ns each, so CPU times are the same whatever else the
#               host runs; "off": the host's clock, and a busy host's time is charged to the guest)
#   --idle-threads  N more kvsim threads that only wait (default 0: kvsim is single-threaded,
#               so the kernel's NUMA scan never unmaps its pages in DRAM; see bench/results/2026-12-03-12-blind-spot-server-threads.md)
#   --flat-out  kvsim runs its decode steps back to back (--step-ms 0) instead of paced to the
#               trace, with the trace played 20 times as fast (--time-scale 0.05 --loop) so that
#               requests wait: steps/s is then the workload's throughput, and the report gives
#               each mode's as a ratio of none's (the price a server that runs flat out pays)
#   --report-only  rebuild the report from OUT's files without running anything
#   --workload  kvsim (default) or llama-server: Debian's llama-server in the guest (the layer of
#               scripts/vm/llama-root.sh, node 0 352 MiB against its 384 MiB KV buffer) driven by
#               kvtier_llama_load replaying the Mooncake trace's conversations
#               (scripts/bench/llama_guest.sh; LOAD_*, KVTIER_SED and KVTIER_NICE pass through); modes none, kernel,
#               kvtier (default all three), --duration default 240, --repeat, --kernel, --vcpus
#               and --icount apply; bench/llama_report.py writes the report (docs/llama-server.md)
# Settings of the modes (DAMOS_*, DAMON_*, GOAL_*, KVTIER_*, ORACLE_INTERVAL, COLD_AGE_S, MAP_EVERY: see
# scripts/bench/guest.sh) pass through from the environment.
# Guests boot with nokaslr (KVTIER_VM_APPEND) so that every mode gets the same node sizes, and
# with only the benchmark's programs in their initramfs (KVTIER_VM_BINS, scripts/vm/initramfs.sh),
# so that node 0's free memory does not depend on what else the build dir holds.
# Needs the build (kvsim, kvtier_residency_probe, kvtier_oracle, kvtierd, kvtierctl) in $KVTIER_BUILD_DIR
# (default build/). Exit status: 0 when every mode ran or reported why it could not, 1 else.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# The initramfs lives in the guest's RAM, node 0 first: a full build's test binaries would
# leave node 0 tens of MiB less free than a build of the programs alone.
export KVTIER_VM_BINS=${KVTIER_VM_BINS:-kvsim kvtier_residency_probe kvtier_oracle kvtierd kvtierctl kvtier_llama_load}
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}
duration=
workload=kvsim
out=
modes=
kernel=6.12
trace=mooncake
repeat=1
thp=never
budget=256MiB
mem0=256
mem1=1024
vcpus=1
icount=shift=0,sleep=on
idle_threads=0
flat_out=0
report_only=0
failed=0
while (($#)); do
  case $1 in
    --duration) duration=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --modes) modes=${2:?}; shift ;;
    --kernel) kernel=${2:?}; shift ;;
    --trace) trace=${2:?}; shift ;;
    --repeat) repeat=${2:?}; shift ;;
    --thp) thp=${2:?}; shift ;;
    --budget) budget=${2:?}; shift ;;
    --mem0) mem0=${2:?}; shift ;;
    --mem1) mem1=${2:?}; shift ;;
    --vcpus) vcpus=${2:?}; shift ;;
    --icount) icount=${2:?}; shift ;;
    --idle-threads) idle_threads=${2:?}; shift ;;
    --flat-out) flat_out=1 ;;
    --report-only) report_only=1 ;;
    --workload) workload=${2:?}; shift ;;
    -h | --help) sed -n '2,/^set -euo pipefail/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $workload in
  kvsim) duration=${duration:-100} ;;
  llama-server) duration=${duration:-240} ;;
  *) echo "bench: --workload '$workload': use kvsim or llama-server" >&2; exit 2 ;;
esac
[[ $duration =~ ^[1-9][0-9]*$ ]] || { echo "bench: --duration '$duration' is not a positive integer" >&2; exit 2; }
[[ $idle_threads =~ ^[0-9]+$ ]] || { echo "bench: --idle-threads '$idle_threads' is not a whole number" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "bench: --repeat '$repeat' is not a positive integer" >&2; exit 2; }
[[ $vcpus =~ ^[1-9][0-9]*$ ]] || { echo "bench: --vcpus '$vcpus' is not a positive integer" >&2; exit 2; }
icount_args=()
[[ $icount == off ]] || icount_args=(--icount "$icount")
case $thp in
  never | system | 64k) ;;
  *) echo "bench: --thp '$thp': use never, system or 64k" >&2; exit 2 ;;
esac
[[ $workload == llama-server ]] && modes=${modes:-none kernel kvtier}
case $kernel in
  6.12) modes=${modes:-none kernel damos oracle kvtier} ;;
  7.3) modes=${modes:-none damos-goal oracle kvtier} ;;
  *) echo "bench: --kernel '$kernel': use 6.12 or 7.3" >&2; exit 2 ;;
esac
# The trace, as the guest sees it (bench/traces/ is /kvtier/traces in the guest).
case $trace in
  mooncake) trace_file=mooncake_synthetic_trace.jsonl ;;
  azure-conv) trace_file=azure_llm_conv_2023.csv ;;
  azure-code) trace_file=azure_llm_code_2023.csv ;;
  *) trace_file=$(basename "$trace") ;;
esac
[[ -f $top/bench/traces/$trace_file ]] || {
  echo "bench: --trace '$trace': no bench/traces/$trace_file (names: mooncake, azure-conv, azure-code)" >&2
  exit 2
}
for m in $modes; do
  case $m in
    none | kernel | damos | damos-goal | oracle | kvtier) ;;
    *) echo "bench: unknown mode '$m' (none kernel damos damos-goal oracle kvtier)" >&2; exit 2 ;;
  esac
done
out=${out:-$KVTIER_BUILD_DIR/bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

# matplotlib lives in Debian's python3 (python3-matplotlib); a pyenv python may lack it.
py=python3
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import matplotlib' 2>/dev/null; then py=$p; break; fi
done

# llama-server: its own guest script and report (bench/llama_report.py); kvsim's path below
# is unchanged.
if [[ $workload == llama-server ]]; then
  for m in $modes; do
    case $m in
      none | kernel | kvtier) ;;
      *) echo "bench: mode '$m' is not one of llama-server's (none kernel kvtier)" >&2; exit 2 ;;
    esac
  done
  if ((!report_only)); then
    [[ -x $KVTIER_BUILD_DIR/bench/kvtier_llama_load ]] || {
      echo "bench: kvtier_llama_load not built in $KVTIER_BUILD_DIR (cmake --build build)" >&2
      exit 1
    }
    layer=$("$top/scripts/vm/llama-root.sh") || { echo "bench: cannot build the llama-server layer (scripts/vm/llama-root.sh)" >&2; exit 1; }
    pass=()
    while IFS='=' read -r name value; do
      [[ $name =~ ^(LOAD_[A-Z_]+|COLD_AGE_S|KVTIER_SED|KVTIER_NICE)$ ]] && pass+=("$name=$value")
    done < <(env)
    for ((r = 1; r <= repeat; r++)); do
      for mode in $modes; do
        run=$mode-$r
        echo "bench: run $r/$repeat, mode $mode: llama-server in the $kernel guest, $duration s of the Mooncake conversations" >&2
        t0=$(date +%s)
        rc=0
        KVTIER_VM_APPEND="nokaslr${KVTIER_VM_APPEND:+ $KVTIER_VM_APPEND}" "$top/scripts/vm/run" --kernel "$kernel" \
          --layer "$layer" --mem0 352 --vcpus "$vcpus" ${icount_args[@]+"${icount_args[@]}"} --timeout $((duration + 1500)) -- \
          env ${pass[@]+"${pass[@]}"} sh /kvtier/scripts/bench/llama_guest.sh "$mode" "$duration" \
          >"$out/$run.jsonl" 2>"$out/$run.stderr" || rc=$?
        t1=$(date +%s)
        why=
        ((rc == 0)) || { why="the guest exited $rc; see $out/$run.stderr"; failed=1; }
        printf '{"workload":"llama-server","mode":"%s","run":%d,"vm_status":%d,"wall_s":%d,"vcpus":%d,"icount":"%s","kernel":"%s","duration_s":%d,"why":"%s"}\n' \
          "$mode" "$r" "$rc" $((t1 - t0)) "$vcpus" "$icount" "$kernel" "$duration" "$why" >"$out/$run.meta.json"
        echo "bench: run $r/$repeat, mode $mode: done in $((t1 - t0)) s (guest status $rc)" >&2
      done
    done
  fi
  "$py" "$top/bench/llama_report.py" "$out" || failed=1
  echo "bench: report in $out/report.md" >&2
  exit $failed
fi

if ((!report_only)); then
  for bin in kvsim kvtier_residency_probe kvtier_oracle; do
    [[ -n $(find "$KVTIER_BUILD_DIR" -name "$bin" -type f -perm -u+x -print -quit) ]] || {
      echo "bench: $bin not built in $KVTIER_BUILD_DIR (cmake --build build)" >&2
      exit 1
    }
  done
  # Mode settings from the environment, passed on to the guest script.
  pass=()
  while IFS='=' read -r name value; do
    [[ $name =~ ^(DAMOS_|DAMON_|GOAL_|KVTIER_(CONFIG|SED|MIGRATE_RATE|MIGRATE_BURST|CHECK_AFTER_S|MIN_FREE|RECORD|COLD_AGE|TRUTH_WINDOW)$|ORACLE_INTERVAL$|COLD_AGE_S$|MAP_EVERY$) ]] &&
      pass+=("$name=$value")
  done < <(env)
  pass+=("BENCH_THP=$thp")
  # Flat out, the trace plays 20 times as fast (and again when it ends), so the batch never
  # runs dry: paced to real time, a step with nothing to decode would just come around again.
  time_scale=1
  ((flat_out == 0)) || time_scale=0.05
  kvsim_args=(--trace "/kvtier/traces/$trace_file" --kv-budget "$budget"
    --time-scale "$time_scale" --read-nodes-every 1 --stats-interval 1 --cold-ages 10,30 --flush-tlb)
  [[ $thp == never ]] && kvsim_args+=(--no-hugepages)
  ((idle_threads == 0)) || kvsim_args+=(--idle-threads "$idle_threads")
  ((flat_out == 0)) || kvsim_args+=(--step-ms 0 --loop)
  # Every mode once, then again: slow changes in the shared machine's load hit every mode alike.
  for ((r = 1; r <= repeat; r++)); do
    for mode in $modes; do
      run=$mode-$r
      echo "bench: run $r/$repeat, mode $mode: booting the $kernel guest (node 0 $mem0 MiB, node 1 $mem1 MiB), $duration s of $trace" >&2
      t0=$(date +%s)
      rc=0
      KVTIER_VM_APPEND="nokaslr${KVTIER_VM_APPEND:+ $KVTIER_VM_APPEND}" "$top/scripts/vm/run" --kernel "$kernel" \
        --mem0 "$mem0" --mem1 "$mem1" --vcpus "$vcpus" ${icount_args[@]+"${icount_args[@]}"} --timeout $((duration + 300)) -- \
        env "${pass[@]}" sh /kvtier/scripts/bench/guest.sh "$mode" "$duration" "${kvsim_args[@]}" \
        >"$out/$run.jsonl" 2>"$out/$run.stderr" || rc=$?
      t1=$(date +%s)
      why=
      case $rc in
        0) ;;
        124) why="the guest timed out (exit 124)" ;;
        125) why="the guest did not boot (exit 125)" ;;
        *) why="the guest command exited $rc" ;;
      esac
      [[ -n $why ]] && why="$why; see $out/$run.stderr" && failed=1
      printf '{"mode":"%s","run":%d,"vm_status":%d,"wall_s":%d,"mem0_mib":%d,"mem1_mib":%d,"vcpus":%d,"icount":"%s","budget":"%s","kernel":"%s","trace":"%s","trace_file":"%s","thp":"%s","duration_s":%d,"why":"%s"}\n' \
        "$mode" "$r" "$rc" $((t1 - t0)) "$mem0" "$mem1" "$vcpus" "$icount" "$budget" "$kernel" "$trace" "$trace_file" "$thp" "$duration" "$why" >"$out/$run.meta.json"
      echo "bench: run $r/$repeat, mode $mode: done in $((t1 - t0)) s (guest status $rc)" >&2
    done
  done
fi

"$py" "$top/bench/report.py" "$out" --modes "$(echo $modes | tr ' ' ',')"
echo "bench: report in $out/report.md, plot in $out/residency.png" >&2
exit $failed
