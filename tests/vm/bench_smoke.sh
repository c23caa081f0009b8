#!/usr/bin/env bash
# The benchmark harness end to end, short: scripts/bench.sh runs kvsim for 30 s in fresh 6.12
# guests with no tiering, DAMOS and the oracle, and for 20 s in a fresh 7.3 guest with the
# damos-goal mode. It asserts the harness's own mechanics exactly, not placement quality (that
# depends on the kernel's timing and is the benchmark's to report):
# - the report has every column and a measured row for each mode, and names trace and kernel;
# - kvsim found no corrupted byte; the residency probe sampled for the whole duration, reported
#   every sample, and accounted for every pool page (placed on a node, or a status the kernel
#   gave a page in migration); with no tiering (nothing moves pages) it agrees exactly with the
#   kernel's own /proc/PID/numa_maps for the pool (read right after the probe's last sample);
#   how far numa_maps drifted while a mode kept moving pages between the two reads is printed;
# - the oracle moved pages both ways, and every chunk that was cold at its last cycle that left
#   nothing misplaced (and untouched since) is on node 1 in the final page map: nothing else
#   moves pages in that mode, so this holds exactly;
# - the 7.3 guest booted kernel 7.3 with node 1 in a lower memory tier, and the kernel took the
#   damos-goal kdamond as written (vaddr on kvsim's pid, the two goals on node 0).
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

out=$KVTIER_BUILD_DIR/bench-smoke
out73=$KVTIER_BUILD_DIR/bench-smoke-7.3
rm -rf "$out" "$out73"
"$KVTIER_SOURCE_DIR/scripts/bench.sh" --duration 30 --modes "none damos oracle" --out "$out" >/dev/null ||
  echo "$test_name: scripts/bench.sh (6.12) exited non-zero; the checks below say why" >&2
"$KVTIER_SOURCE_DIR/scripts/bench.sh" --kernel 7.3 --duration 20 --modes "damos-goal" --out "$out73" >/dev/null ||
  echo "$test_name: scripts/bench.sh (7.3) exited non-zero; the checks below say why" >&2
for f in "$out"/{none,damos,oracle}-1.meta.json "$out73"/damos-goal-1.meta.json; do
  [[ -f $f ]] || fail "$f missing: scripts/bench.sh did not run that mode"
  st=$(sed 's/.*"vm_status":\([0-9]*\).*/\1/' "$f")
  case $st in
    0) ;;
    124 | 125 | 126)
      echo "$test_name: GUEST FAILED (exit $st) for $(basename "$f" .meta.json): no verdict on the code under test" >&2
      exit 1 ;;
    *) fail "$(basename "$f" .meta.json): the guest command exited $st (see ${f%.meta.json}.stderr)" ;;
  esac
done
python3 - "$out" "$out73" <<'PY' || fail "see the lines above ($out, $out73)"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["KVTIER_SOURCE_DIR"], "bench"))
import report
out, out73 = sys.argv[1], sys.argv[2]
problems = []


def load(d):
    md = open(os.path.join(d, "report.md"), encoding="utf-8").read()
    res = {r["mode"]: r for r in json.load(open(os.path.join(d, "results.json"), encoding="utf-8"))}
    problems.extend(f"{d}/report.md lacks column '{c}'" for c in report.COLUMNS if c not in md)
    return md, res


def check_run(mode, r, seconds, d):
    if not r or r.get("status") != "ok":
        problems.append(f"{mode}: {r and r.get('status')}")
        return False
    if r["corrupted_bytes"] != 0 or r["kvsim_status"] != 0:
        problems.append(f"{mode}: {r['corrupted_bytes']} corrupted bytes, kvsim exit {r['kvsim_status']}")
    # The probe samples on a fixed schedule and catches up when it runs late: its last sample is
    # at or after the duration, and it reports every sample it printed.
    events = report.read_events(os.path.join(d, f"{mode}-1.jsonl"))
    end = report.pick(events, "probe", "end")
    if not end or end[-1].get("reason") != "duration" or end[-1].get("samples") != len(r["share_cxl"]):
        problems.append(f"{mode}: probe end {end[-1:] or 'missing'} vs {len(r['share_cxl'])} samples")
    if r["share_cxl"][-1][0] < seconds:
        problems.append(f"{mode}: the probe's last sample is at {r['share_cxl'][-1][0]:.1f} s, before the {seconds} s")
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
        # Every page is on a node, or (a mode migrating it at that moment) has a status of its own.
        unplaced = sum(r["probe_last_status_pages"].values()) * report.PAGE
        if sum(probe.values()) + unplaced != r["pool_bytes"] or (mode == "none" and unplaced):
            problems.append(f"{mode}: probe placed {sum(probe.values())} B and reported {unplaced} B unplaced "
                            f"({r['probe_last_status_pages']}) of {r['pool_bytes']} pool bytes")
    return True

md, res = load(out)
if "guest kernel **6.12" not in md or "trace **mooncake**" not in md:
    problems.append(f"{out}/report.md does not name the 6.12 kernel and the mooncake trace")
for mode in ("none", "damos", "oracle"):
    check_run(mode, res.get(mode), 30, out)
o = (res.get("oracle") or {}).get("oracle")
if o:
    ck = o["cold_check"] or {}
    if o["status"] != 0:
        problems.append(f"oracle: kvtier_oracle exited {o['status']}: {o['stderr']}")
    if o["moved_to_slow_pages"] == 0 or o["moved_to_fast_pages"] == 0:
        problems.append(f"oracle: moved {o['moved_to_slow_pages']} pages to node 1 and {o['moved_to_fast_pages']} to node 0; "
                        "both must be > 0 (the cold wave at the cold age, then the hot blocks first touch put on node 1)")
    if ck.get("cycle") is None or ck["checked_bytes"] == 0:
        problems.append(f"oracle: no cycle left nothing misplaced before the last map, nothing to check: {o}")
    elif ck["misplaced_bytes"] != 0:
        problems.append(f"oracle: {ck['misplaced_bytes']} B of {ck['checked_bytes']} B cold since cycle {ck['cycle']} "
                        "are not on node 1 in the final map")
elif "oracle" in res and res["oracle"].get("status") == "ok":
    problems.append("oracle: the report has no oracle events")

md73, res73 = load(out73)
g = res73.get("damos-goal")
if check_run("damos-goal", g, 20, out73):
    if "guest kernel **7.3." not in md73:
        problems.append(f"{out73}/report.md does not name a 7.3 kernel")
    ev = report.read_events(os.path.join(out73, "damos-goal-1.jsonl"))
    lay = report.first(ev, "bench", "layout")
    if not lay or not lay["kernel"].startswith("7.3") or "memory_tier35: 1" not in lay["memory_tiers"]:
        problems.append(f"7.3: kernel or memory tiers not as expected: {lay}")
    goal = report.first(ev, "bench", "damos_goal")
    states = {e["scheme"]: e for e in report.pick(ev, "bench", "damos_goal_state")}
    if not goal or goal.get("pid") is None or goal.get("operations") != "vaddr":
        problems.append(f"damos-goal: no damos_goal event on kvsim's pid: {goal}")
    elif (states.get(0, {}).get("goal_metric"), states.get(1, {}).get("goal_metric")) != ("node_mem_used_bp", "node_mem_free_bp"):
        problems.append(f"damos-goal: the kernel does not hold the goals as written: {states}")
    else:
        want_hot = int(goal["hot"]["goal"].rsplit("=", 1)[1])
        want_cold = int(goal["cold"]["goal"].rsplit("=", 1)[1])
        if states[0]["goal_target"] != want_hot or states[1]["goal_target"] != want_cold:
            problems.append(f"damos-goal: goal targets {states[0]['goal_target']}/{states[1]['goal_target']}, "
                            f"written {want_hot}/{want_cold}")
for p in problems:
    print("bench_smoke:", p, file=sys.stderr)
if problems:
    sys.exit(1)
n, d, orc = res["none"], res["damos"], res["oracle"]
print(f"bench_smoke: ok: KV on node 1 at the end: none {100 * n['share_cxl_end']:.1f}%, damos "
      f"{100 * d['share_cxl_end']:.1f}%, oracle {100 * orc['share_cxl_end']:.1f}%, damos-goal (7.3) "
      f"{100 * g['share_cxl_end']:.1f}%; oracle moved {o['moved_to_slow_pages']} pages to node 1 and "
      f"{o['moved_to_fast_pages']} to node 0, {o['cold_check']['checked_bytes'] >> 20} MiB cold since cycle "
      f"{o['cold_check']['cycle']} all on node 1; the probe accounted for every page")
PY
