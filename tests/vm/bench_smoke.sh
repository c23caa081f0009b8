#!/usr/bin/env bash
# The benchmark harness end to end, short: scripts/bench.sh runs kvsim for 20 s in a fresh guest
# with no tiering and with DAMOS; the report must have every column and a measured row for both,
# kvsim must find no corrupted byte, the residency probe must sample for the whole duration and
# place every pool page, and, with no tiering (nothing moves pages), agree exactly with the
# kernel's own /proc/PID/numa_maps for the pool (read right after the probe's last sample).
# How much DAMOS moved, and how far numa_maps drifted from the probe while DAMOS kept moving
# pages between the two reads, are printed, not asserted: they depend on kernel timing.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

out=$KVTIER_BUILD_DIR/bench-smoke
rm -rf "$out"
"$KVTIER_SOURCE_DIR/scripts/bench.sh" --duration 20 --modes "none damos" --out "$out" >/dev/null ||
  fail "scripts/bench.sh failed"
for mode in none damos; do
  st=$(sed 's/.*"vm_status":\([0-9]*\).*/\1/' "$out/$mode.meta.json")
  case $st in
    0) ;;
    124 | 125 | 126)
      echo "$test_name: GUEST FAILED (exit $st) in mode $mode: no verdict on the code under test" >&2
      exit 1 ;;
    *) fail "mode $mode: the guest command exited $st (see $out/$mode.stderr)" ;;
  esac
done
python3 - "$out" <<'PY' || fail "see the lines above ($out)"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["KVTIER_SOURCE_DIR"], "bench"))
import report
out = sys.argv[1]
md = open(os.path.join(out, "report.md"), encoding="utf-8").read()
res = {r["mode"]: r for r in json.load(open(os.path.join(out, "results.json"), encoding="utf-8"))}
problems = [f"report.md lacks column '{c}'" for c in report.COLUMNS if c not in md]
for mode in ("none", "damos"):
    r = res.get(mode)
    if not r or r.get("status") != "ok":
        problems.append(f"{mode}: {r and r.get('status')}")
        continue
    if r["corrupted_bytes"] != 0 or r["kvsim_status"] != 0:
        problems.append(f"{mode}: {r['corrupted_bytes']} corrupted bytes, kvsim exit {r['kvsim_status']}")
    # The probe samples on a fixed schedule and catches up when it runs late: its last sample is
    # at or after the duration, and it reports every sample it printed.
    events = [json.loads(l) for l in open(os.path.join(out, f"{mode}.jsonl"), encoding="utf-8")
              if l.startswith("{")]
    end = [e for e in events if e.get("src") == "probe" and e.get("event") == "end"]
    if not end or end[-1].get("reason") != "duration" or end[-1].get("samples") != len(r["share_cxl"]):
        problems.append(f"{mode}: probe end {end[-1:] or 'missing'} vs {len(r['share_cxl'])} samples")
    if r["share_cxl"][-1][0] < 20:
        problems.append(f"{mode}: the probe's last sample is at {r['share_cxl'][-1][0]:.1f} s, before the 20 s")
    if r["dram_read_share"] is None or not r["final_score"] or r["final_score"]["cold_bytes"] == 0:
        problems.append(f"{mode}: no DRAM read share or no ground-truth score: {r.get('final_score')}")
    nm, probe = r.get("numa_maps_bytes_by_node"), r.get("probe_last_bytes_by_node")
    if not nm or not probe:
        problems.append(f"{mode}: no numa_maps cross-check")
    else:
        drift = sum(abs(nm.get(n, 0) - probe.get(n, 0)) for n in set(nm) | set(probe))
        print(f"bench_smoke: {mode}: numa_maps {nm} vs probe {probe}: {drift} B apart")
        if mode == "none" and drift != 0:
            problems.append(f"{mode}: nothing moves pages, yet numa_maps {nm} != probe {probe}")
        if sum(probe.values()) != r["pool_bytes"]:
            problems.append(f"{mode}: probe placed {sum(probe.values())} of {r['pool_bytes']} pool bytes")
for p in problems:
    print("bench_smoke:", p, file=sys.stderr)
if problems:
    sys.exit(1)
n, d = res["none"], res["damos"]
print(f"bench_smoke: ok: KV on node 1 at the end: none {100 * n['share_cxl_end']:.1f}%, damos "
      f"{100 * d['share_cxl_end']:.1f}%; reads from DRAM {100 * n['dram_read_share']:.1f}% / "
      f"{100 * d['dram_read_share']:.1f}%; probe and numa_maps agree")
PY
