#!/usr/bin/env bash
# The benchmark harness end to end, short: scripts/bench.sh runs kvsim for 20 s in a fresh guest
# with no tiering and with DAMOS; the report must have every column and a measured row for both,
# kvsim must find no corrupted byte, and the residency probe must agree with the kernel's own
# /proc/PID/numa_maps for the pool (read right after the probe's last sample).
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
    if len(r["share_cxl"]) < 15:
        problems.append(f"{mode}: only {len(r['share_cxl'])} residency samples in 20 s")
    if r["dram_read_share"] is None or not r["final_score"] or r["final_score"]["cold_bytes"] == 0:
        problems.append(f"{mode}: no DRAM read share or no ground-truth score: {r.get('final_score')}")
    nm, probe = r.get("numa_maps_bytes_by_node"), r.get("probe_last_bytes_by_node")
    if not nm or not probe:
        problems.append(f"{mode}: no numa_maps cross-check")
    else:
        # DAMOS may move pages between the two reads: 2% of the pool.
        tol = 0.02 * r["pool_bytes"]
        for node in set(nm) | set(probe):
            if abs(nm.get(node, 0) - probe.get(node, 0)) > tol:
                problems.append(f"{mode}: node {node}: numa_maps {nm.get(node, 0)} B vs probe {probe.get(node, 0)} B")
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
