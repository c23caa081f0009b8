#!/usr/bin/env bash
# kvsim in the busybox guest (what the benchmark will run there): a short run over the real
# Mooncake trace with a guest-sized budget must end clean (status 0, steps > 0, no corrupted
# byte) and write its ground truth; the same run with one injected bit flip must fail with 3.
# The only timing in it: the injected run must reach its 3rd decode step within 4 s; kvsim
# made 18.7-20.5 steps/s in the guest over 11 runs, 25 times what that needs.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

out=$(vm_run --timeout 300 -- sh -c '
  kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 128MiB \
        --time-scale 0.05 --duration 8 --stats-interval 2 --truth /tmp/truth.csv
  echo "{\"event\":\"clean_status\",\"status\":$?}"
  echo "{\"event\":\"truth_rows\",\"rows\":$(grep -c -v ^block /tmp/truth.csv)}"
  kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 128MiB \
        --time-scale 0.05 --duration 4 --inject-corruption 3 2>/dev/null
  echo "{\"event\":\"corrupt_status\",\"status\":$?}"
') || exit $?
python3 - "$out" <<'PY' || fail "kvsim in the guest: see the lines above"
import json, sys
events = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
def all_of(name):
    return [e for e in events if e.get("event") == name]
problems = []
starts, ends = all_of("start"), all_of("end")
if len(starts) != 2 or len(ends) != 2:
    print(sys.argv[1], file=sys.stderr)
    sys.exit(f"kvsim_guest: want 2 start and 2 end events, got {len(starts)} and {len(ends)}")
clean, corrupt = ends
if all_of("clean_status")[0]["status"] != 0:
    problems.append(f"clean run exited {all_of('clean_status')[0]['status']}")
if clean["result"] != "ok" or clean["corrupted_bytes"] != 0:
    problems.append(f"clean run: {clean}")
if not clean["steps"] > 0:
    problems.append("clean run made no decode step")
rows = all_of("truth_rows")[0]["rows"]
want = starts[0]["sim"]["blocks"] * starts[0]["sim"]["tensors"]
if rows != want:
    problems.append(f"truth has {rows} rows, want {want}")
if all_of("corrupt_status")[0]["status"] != 3 or corrupt["result"] != "corrupt":
    problems.append(f"injected run: status {all_of('corrupt_status')[0]['status']}, {corrupt}")
inj, found = all_of("injected"), all_of("corruption")
if not inj or not found or found[-1]["addr"] != inj[0]["addr"]:
    problems.append(f"injected {inj}, found {found}")
for p in problems:
    print("kvsim_guest:", p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"kvsim_guest: ok: {clean['steps']} steps, {clean['steps_per_s']:.1f} steps/s, "
      f"{clean['read_bytes_per_s'] / 2**20:.0f} MiB/s read, step work {clean['step_work_ms']:.1f} ms; "
      f"the flipped byte at {inj[0]['addr']:#x} was found")
PY
