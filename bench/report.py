#!/usr/bin/env python3
"""The tiering benchmark's report: reads what scripts/bench.sh collected (DIR/MODE-K.jsonl, the
guest's stdout for run K of each mode, and DIR/MODE-K.meta.json; DIR/MODE.jsonl from older runs)
and writes DIR/report.md (one table row per mode: the median and, over several runs, the range;
every mode also against the oracle; the settings, the guest layout), DIR/results.json (the same
figures: per mode the first completed run's figures at the top level, every run under "runs",
medians and ranges under "summary", the oracle comparison under "vs_oracle", the price against no tiering under "vs_none") and
DIR/residency.png (share of KV bytes on the CXL node over time, the first run of each mode).

Usage: report.py DIR [--modes none,kernel,damos,oracle,kvtier] [--no-plot]
       report.py --line FILE.jsonl [--mode NAME]   one line of the table's columns for one run

Every figure comes from the run's own events; a mode that could not run gets a row saying
why ("not available: ...") and no numbers.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys

PAGE = 4096
MIB = 1 << 20
MODE_TITLES = {
    "none": "no tiering",
    "kernel": "kernel tiering (NUMA balancing 2 + demotion)",
    "damos": "DAMOS migrate_cold/hot alone",
    "damos-goal": "DAMOS vaddr migrate_hot/cold + node 0 memory goal",
    "oracle": "oracle (placement from kvsim's ground truth)",
    "kvtier": "kvtier",
}
DRAM_NODE = "0"
CXL_NODE = "1"


# --- parsing ------------------------------------------------------------------------------

def read_events(path):
    """JSON lines of one mode's guest output; other lines (noise) are skipped."""
    events = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def pick(events, src, event):
    return [e for e in events if e.get("src") == src and e.get("event") == event]


def first(events, src, event):
    found = pick(events, src, event)
    return found[0] if found else None


# --- metrics (pure; unit-tested in tests/unit/bench_report_test.py) -------------------------

def expand_runs(runs):
    """[[status, count], ...] -> one status per page."""
    pages = []
    for status, count in runs:
        pages.extend([status] * count)
    return pages


def parse_truth_csv(text):
    """kvsim's ground truth CSV -> list of (start, end, last_access_ns, state, episode_start_ns),
    by start; episode_start_ns is None in an older kvsim's file."""
    rows = []
    lines = text.splitlines()
    if not lines or not lines[0].startswith("block,tensor,start,end,state,last_access_ns"):
        raise ValueError("not a kvsim truth CSV (header missing)")
    episode = lines[0].split(",").index("episode_start_ns") if "episode_start_ns" in lines[0] else None
    for line in lines[1:]:
        if not line:
            continue
        f = line.split(",")
        rows.append((int(f[2]), int(f[3]), int(f[5]), f[4], int(f[episode]) if episode else None))
    rows.sort()
    return rows


def demotion_score(map_start, page_status, truth_rows, now_ns, cold_age_ns, demoted_node=1,
                   window_ns=5 * 10**9):
    """Precision and recall of "on the demotion node" against "not touched for cold_age".

    map_start: address of page_status[0]; page_status: node (or -errno) of each page in
    address order; truth_rows: (start, end, last_access_ns, state, episode_start_ns) chunks.
    Bytes outside every chunk or not placed on a node are left out. Returns a dict of byte
    counts and the two ratios (None when undefined: nothing demoted, or nothing cold), the
    precision that the bytes on the demotion node allow at most (all truly cold bytes there),
    and of the bytes there that are not cold those whose block began its episode of use less
    than window_ns before (None without episodes in the truth).
    """
    demoted = cold = both = considered = hot_early = 0
    episodes = bool(truth_rows) and truth_rows[0][4] is not None
    n = len(page_status)
    for start, end, last, _state, episode in truth_rows:
        first_page = (start - map_start) // PAGE
        last_page = (end - 1 - map_start) // PAGE
        if last_page < 0 or first_page >= n:
            continue
        is_cold = now_ns >= last and now_ns - last >= cold_age_ns
        for p in range(max(first_page, 0), min(last_page, n - 1) + 1):
            st = page_status[p]
            if st < 0:
                continue
            # A chunk may cover part of a page only when chunks are smaller than a page.
            lo = max(start, map_start + p * PAGE)
            hi = min(end, map_start + (p + 1) * PAGE)
            b = hi - lo
            considered += b
            on = st == demoted_node
            demoted += b if on else 0
            cold += b if is_cold else 0
            both += b if on and is_cold else 0
            if on and not is_cold and episodes and now_ns - episode < window_ns:
                hot_early += b
    return {
        "considered_bytes": considered,
        "demoted_bytes": demoted,
        "cold_bytes": cold,
        "demoted_cold_bytes": both,
        "precision": both / demoted if demoted else None,
        "recall": both / cold if cold else None,
        "precision_ceiling": min(1.0, cold / demoted) if demoted else None,
        "demoted_hot_early_bytes": hot_early if episodes else None,
    }


def counter_delta(a, b, key):
    """b[key] - a[key] for cumulative counters; None if either lacks it."""
    if key not in a or key not in b:
        return None
    return b[key] - a[key]


def migration_rates(first_sample, last_sample):
    """MiB/s of page migrations over the probe's window, from /proc/vmstat deltas."""
    dt = (last_sample["t_ns"] - first_sample["t_ns"]) / 1e9
    va, vb = first_sample.get("vmstat", {}), last_sample.get("vmstat", {})
    out = {"window_s": dt}

    def rate(keys):
        deltas = [counter_delta(va, vb, k) for k in keys]
        deltas = [d for d in deltas if d is not None]
        if not deltas or dt <= 0:
            return None
        return sum(deltas) * PAGE / MIB / dt

    out["migrated_mib_s"] = rate(["pgmigrate_success"])
    out["demoted_mib_s"] = rate(sorted(k for k in vb if k.startswith("pgdemote_")))
    out["promoted_mib_s"] = rate(["pgpromote_success"])
    out["migrate_fail_pages"] = counter_delta(va, vb, "pgmigrate_fail")
    out["numa_hint_faults"] = counter_delta(va, vb, "numa_hint_faults")
    return out


def cpu_seconds(first_sample, last_sample, prefixes, key="cpu_ticks"):
    """CPU seconds (user+system; system alone with key="sys_ticks") over the window of threads
    whose comm starts with a prefix. A thread that appeared during the window counts from zero."""
    tck = last_sample.get("clk_tck", 100) or 100
    a, b = first_sample.get(key, {}), last_sample.get(key, {})
    total = 0
    for comm, ticks in b.items():
        if any(comm.startswith(p) for p in prefixes):
            total += ticks - a.get(comm, 0)
    return total / tck


def series_share(samples, node, pool_bytes):
    """(t_s, share of the pool's bytes on `node`) per probe sample."""
    return [(s["t_s"], s["bytes_by_node"].get(node, 0) / pool_bytes) for s in samples]


def read_nodes_window(stats, until_ns=None, since_ns=None):
    """kvsim's cumulative read_nodes counters at the last stats line at or before until_ns and
    at the last at or before since_ns (zero without since_ns): (end, base), or None."""
    usable = [s for s in stats if "read_nodes" in s and (until_ns is None or s["time_ns"] <= until_ns)]
    if not usable:
        return None
    base = {"sampled_read_bytes": 0, "by_node": {}, "late_by_node": {}}
    if since_ns is not None:
        before = [s for s in usable if s["time_ns"] <= since_ns]
        if before:
            base = before[-1]["read_nodes"]
    return usable[-1]["read_nodes"], base


def dram_read_share(stats, until_ns=None, since_ns=None):
    """Share of the sampled decode read bytes served by node 0, between two kvsim stats lines
    (cumulative counters): the last at or before until_ns and the last at or before since_ns."""
    window = read_nodes_window(stats, until_ns, since_ns)
    if window is None:
        return None
    end, base = window
    total = end["sampled_read_bytes"] - base["sampled_read_bytes"]
    dram = end["by_node"].get(DRAM_NODE, 0) - base["by_node"].get(DRAM_NODE, 0)
    return dram / total if total > 0 else None


def cxl_read_split(stats, until_ns=None, since_ns=None):
    """The sampled decode reads between two kvsim stats lines (as dram_read_share) that pages on
    other nodes than node 0 served, split by kvsim's late_by_node: read within its reaction window
    of the block's episode of use (filled anew, or back after the episode gap idle), or later.
    None when kvsim did not count late reads (an older kvsim) or nothing was read."""
    window = read_nodes_window(stats, until_ns, since_ns)
    if window is None or "late_by_node" not in window[0]:
        return None
    end, base = window
    total = end["sampled_read_bytes"] - base["sampled_read_bytes"]
    if total <= 0:
        return None

    def off_dram(key):
        return sum(v - base.get(key, {}).get(n, 0) for n, v in end[key].items() if n != DRAM_NODE)

    slow, late = off_dram("by_node"), off_dram("late_by_node")
    return {"read_bytes": total, "slow_bytes": slow, "slow_late_bytes": late,
            "slow_early_bytes": slow - late, "reaction_window_s": end.get("reaction_window_s"),
            "episode_gap_s": end.get("episode_gap_s")}


# --- one mode -----------------------------------------------------------------------------

AGENT_CPU = {
    "none": [],
    "kernel": ["kswapd"],
    "damos": ["kdamond"],
    "damos-goal": ["kdamond"],
    # The oracle's own cost (its page queries and moves) is excluded from the figures: it is a
    # ceiling, not a rival. It is measured and reported apart (excluded_cpu_s).
    "oracle": [],
    # kvtierd's DAMON source runs its own kdamond thread: part of kvtier's cost.
    "kvtier": ["kvtierd", "kdamond"],
}
EXCLUDED_CPU = {"oracle": ["kvtier_oracle"]}


def oracle_cold_check(cycles, map_start, page_status, truth_rows, map_t_ns, cold_age_ns, slow_node=1):
    """The oracle's mechanics, exactly: find its last cycle that left nothing misplaced (backlog 0)
    and finished before the page map was taken; every chunk already cold at that cycle's time and
    untouched since (last access <= t - cold_age in the final truth) must be on the slow node in
    the map: the oracle demoted it then, and nothing moves a cold page back. Returns
    {"cycle": i or None, "checked_bytes", "misplaced_bytes"}."""
    done = [c for c in cycles if c.get("backlog_bytes") == 0 and c.get("t_end_ns", c["t_ns"]) <= map_t_ns]
    if not done:
        return {"cycle": None, "checked_bytes": 0, "misplaced_bytes": 0}
    c = done[-1]
    limit = c["t_ns"] - cold_age_ns
    checked = misplaced = 0
    n = len(page_status)
    for start, end, last, _state, _episode in truth_rows:
        if last > limit:
            continue
        first_page = (start - map_start) // PAGE
        last_page = (end - 1 - map_start) // PAGE
        for p in range(max(first_page, 0), min(last_page, n - 1) + 1):
            st = page_status[p]
            if st < 0:
                continue
            b = min(end, map_start + (p + 1) * PAGE) - max(start, map_start + p * PAGE)
            checked += b
            misplaced += 0 if st == slow_node else b
    return {"cycle": c["i"], "checked_bytes": checked, "misplaced_bytes": misplaced}


def analyse_mode(mode, events, meta):
    r = {"mode": mode, "title": MODE_TITLES.get(mode, mode), "meta": meta}
    err = first(events, "bench", "error")
    unavailable = first(events, "bench", "unavailable")
    if unavailable:
        r["status"] = "not available: " + unavailable["reason"]
        return r
    if err:
        r["status"] = "failed: " + err["what"]
        return r
    samples = pick(events, "probe", "sample")
    kstart = first(events, "kvsim", "start")
    kend = first(events, "kvsim", "end")
    done = first(events, "bench", "done")
    if not samples or not kstart or not kend or not done:
        why = (meta or {}).get("why") or "the guest's output lacks the probe samples or kvsim's events"
        r["status"] = "failed: " + why
        return r
    r["status"] = "ok"
    settings = first(events, "bench", "settings") or {}
    cold_age_s = settings.get("cold_age_s", 10)
    pool = kstart["pool_bytes"]
    r["pool_bytes"] = pool
    r["cold_age_s"] = cold_age_s
    r["share_cxl"] = series_share(samples, CXL_NODE, pool)
    r["share_cxl_start"] = r["share_cxl"][0][1]
    r["share_cxl_end"] = r["share_cxl"][-1][1]
    r["share_cxl_mean"] = sum(v for _, v in r["share_cxl"]) / len(r["share_cxl"])
    stats = pick(events, "kvsim", "stats")
    t_first, t_last = samples[0]["t_ns"], samples[-1]["t_ns"]
    r["dram_read_share"] = dram_read_share(stats, until_ns=t_last)
    r["dram_read_share_2nd_half"] = dram_read_share(stats, until_ns=t_last,
                                                    since_ns=(t_first + t_last) // 2)
    r["slow_reads_2nd_half"] = cxl_read_split(stats, until_ns=t_last, since_ns=(t_first + t_last) // 2)
    r["dram_read_series"] = []
    prev = None
    for s in stats:
        if "read_nodes" not in s or s["time_ns"] > t_last:
            continue
        if prev is not None:
            tot = s["read_nodes"]["sampled_read_bytes"] - prev["read_nodes"]["sampled_read_bytes"]
            dram = (s["read_nodes"]["by_node"].get(DRAM_NODE, 0)
                    - prev["read_nodes"]["by_node"].get(DRAM_NODE, 0))
            if tot > 0:
                r["dram_read_series"].append(((s["time_ns"] - t_first) / 1e9, dram / tot))
        prev = s
    # Precision and recall at every page map that came with its ground truth; kvsim's reaction
    # window (its read split) also splits the not-cold bytes on node 1 by their episode.
    r["reaction_window_s"] = (r["slow_reads_2nd_half"] or {}).get("reaction_window_s") or 5
    window_ns = int(r["reaction_window_s"] * 1e9)
    truths = {e["i"]: e for e in pick(events, "probe", "truth")}
    r["scores"] = []
    for s in samples:
        if "runs" not in s or s["i"] not in truths:
            continue
        score = demotion_score(s["start"], expand_runs(s["runs"]), parse_truth_csv(truths[s["i"]]["csv"]),
                               s["t_ns"], int(cold_age_s * 1e9), window_ns=window_ns)
        score["t_s"] = s["t_s"]
        r["scores"].append(score)
    r["final_score"] = r["scores"][-1] if r["scores"] else None
    r["migration"] = migration_rates(samples[0], samples[-1])
    window = r["migration"]["window_s"]
    r["agent_cpu_s"] = cpu_seconds(samples[0], samples[-1], AGENT_CPU.get(mode, [])) if AGENT_CPU.get(mode) else 0.0
    r["kswapd_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kswapd"])
    r["kdamond_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kdamond"])
    r["kvsim_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kvsim"])
    r.update(workload_price(samples, stats))
    r["probe_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kvtier_residenc"])
    r["agent_cpu_pct"] = 100 * r["agent_cpu_s"] / window if window > 0 else None
    r["move_cpu_share"] = move_cpu_share(first(events, "bench", "kvtierd_dump"))
    r["agent_phases"] = loop_phases(first(events, "bench", "kvtierd_dump"))
    r["promotion_latency"] = promotion_latency(first(events, "bench", "kvtierd_dump"))
    if EXCLUDED_CPU.get(mode):
        r["excluded_cpu_s"] = cpu_seconds(samples[0], samples[-1], EXCLUDED_CPU[mode])
        r["excluded_cpu_pct"] = 100 * r["excluded_cpu_s"] / window if window > 0 else None
    r["steps_per_s"] = kend["steps_per_s"]
    r["step_work_ms"] = kend["step_work_ms"]
    r["tokens"] = kend["tokens"]
    r["corrupted_bytes"] = kend["corrupted_bytes"]
    r["kvsim_result"] = kend["result"]
    r["kvsim_status"] = done["kvsim_status"]
    r["probe_query_ms"] = sum(s["query_ms"] for s in samples) / len(samples)
    numa_maps = first(events, "bench", "numa_maps")
    if numa_maps and numa_maps.get("line"):
        nm = {}
        for tok in numa_maps["line"].split():
            if tok.startswith("N") and "=" in tok:
                k, v = tok[1:].split("=", 1)
                nm[k] = int(v) * PAGE
        r["numa_maps_bytes_by_node"] = nm
        r["probe_last_bytes_by_node"] = samples[-1]["bytes_by_node"]
        r["probe_last_status_pages"] = samples[-1].get("status_pages", {})
    r["damos_stats"] = pick(events, "bench", "damos_stats")
    r["damos_goals"] = pick(events, "bench", "damos_goal_state")
    cycles = pick(events, "oracle", "cycle")
    if mode == "oracle" or cycles:
        oend = first(events, "oracle", "end") or {}
        last_map = next((s for s in reversed(samples) if "runs" in s and s["i"] in truths), None)
        check = None
        if last_map:
            check = oracle_cold_check(cycles, last_map["start"], expand_runs(last_map["runs"]),
                                      parse_truth_csv(truths[last_map["i"]]["csv"]), last_map["t_ns"],
                                      int(cold_age_s * 1e9), int(CXL_NODE))
        r["oracle"] = {
            "cycles": len(cycles),
            "moved_to_fast_pages": sum(c["moved_to_fast_pages"] for c in cycles),
            "moved_to_slow_pages": sum(c["moved_to_slow_pages"] for c in cycles),
            "unmoved_pages": sum(c["unmoved_pages"] for c in cycles),
            "budget_limited_cycles": sum(1 for c in cycles if c["budget_limited"]),
            "room_limited_cycles": sum(1 for c in cycles if c["room_limited"]),
            "zero_backlog_cycles": sum(1 for c in cycles if c["backlog_bytes"] == 0),
            "last_backlog_bytes": cycles[-1]["backlog_bytes"] if cycles else None,
            "end": oend,
            "status": done.get("oracle_status"),
            "stderr": done.get("oracle_stderr", ""),
            "cold_check": check,
        }
    r["layout"] = first(events, "bench", "layout")
    r["settings_events"] = [e for e in events if e.get("src") == "bench" and e.get("event") in
                            ("damos", "damos_goal", "kernel_tiering", "kvtier_config", "oracle", "settings")]
    r["kvsim_start"] = kstart
    return r


def workload_price(samples, stats):
    """What tiering costs the workload itself over the probe's window: kvsim's CPU seconds split
    into user and system (a probe that does not say: system None), its minor faults (hint faults,
    soft-dirty write faults and migration waits are among them), the decode steps it ran and its
    CPU per step in ms."""
    a, b = samples[0], samples[-1]
    out = {"kvsim_sys_s": None, "kvsim_user_s": None, "kvsim_minflt": None}
    if "sys_ticks" in b:
        out["kvsim_sys_s"] = cpu_seconds(a, b, ["kvsim"], key="sys_ticks")
        out["kvsim_user_s"] = cpu_seconds(a, b, ["kvsim"]) - out["kvsim_sys_s"]
    if "minflt" in b:
        out["kvsim_minflt"] = sum(v - a.get("minflt", {}).get(c, 0) for c, v in b["minflt"].items()
                                  if c.startswith("kvsim"))

    def steps_at(t_ns):
        # kvsim's count at its last stats line by then (its first one, when none came before).
        counted = [s for s in stats if "steps" in s]
        before = [s["steps"] for s in counted if s["time_ns"] <= t_ns]
        return before[-1] if before else (counted[0]["steps"] if counted else 0)

    steps = steps_at(b["t_ns"]) - steps_at(a["t_ns"])
    cpu = cpu_seconds(a, b, ["kvsim"])
    out["kvsim_steps"] = steps
    out["kvsim_cpu_ms_per_step"] = 1000 * cpu / steps if steps > 0 else None
    return out


def loop_phases(dump_event):
    """kvtierd's loop CPU seconds by phase since its start (its dump at the end), or None."""
    try:
        return {k: float(v) for k, v in json.loads(dump_event["dump"])["loop"]["cpu"]["loop_seconds_by_phase"].items()}
    except (TypeError, KeyError, ValueError):
        return None


def move_cpu_share(dump_event):
    """The share of kvtierd's CPU time (since its start) its loop spent moving pages, from its dump
    at the end (loop.cpu); None without one, or from a kvtierd that does not say."""
    try:
        cpu = json.loads(dump_event["dump"])["loop"]["cpu"]
        total = float(cpu["process_seconds"])
        return float(cpu["loop_seconds_by_phase"]["move"]) / total if total > 0 else None
    except (TypeError, KeyError, ValueError):
        return None


def promotion_latency(dump_event):
    """kvtierd's kvtier_promotion_latency_seconds at the end, by who promoted ("kvtier", "kernel"; a
    kvtierd without the label: all "kvtier"): {by: {"count", "median_le", "within_5s"}}, where
    median_le is the upper bound of the bucket that holds the median. {} without a dump or a
    promotion."""
    try:
        family = json.loads(dump_event["dump"])["telemetry"]["kvtier_promotion_latency_seconds"]
    except (TypeError, KeyError, ValueError):
        return {}
    out = {}
    for s in family.get("series", []):
        count = s.get("count", 0)
        if count <= 0:
            continue
        buckets = [(float(b["le"]), b["count"]) for b in s["buckets"]]
        median = next(le for le, c in buckets if c * 2 >= count)
        within = next((c for le, c in buckets if le == 5.0), None)
        out[s.get("labels", {}).get("by", "kvtier")] = {
            "count": count, "median_le": median,
            "within_5s": within / count if within is not None else None}
    return out


# --- several runs of a mode, and the oracle as the reference ---------------------------------

# The scalar figures of one completed run, as (key, value); the table shows their medians.
def figures(r):
    fs = r.get("final_score") or {}
    m = r["migration"]
    return {
        "cxl_start": r["share_cxl_start"],
        "cxl_mean": r["share_cxl_mean"],
        "cxl_end": r["share_cxl_end"],
        "dram_whole": r["dram_read_share"],
        "dram_2nd": r["dram_read_share_2nd_half"],
        "precision": fs.get("precision"),
        "recall": fs.get("recall"),
        "migrated": m["migrated_mib_s"],
        "demoted": m["demoted_mib_s"],
        "promoted": m["promoted_mib_s"],
        "agent_cpu_pct": r["agent_cpu_pct"],
        "move_cpu_share": r.get("move_cpu_share"),
        "excluded_cpu_pct": r.get("excluded_cpu_pct"),
        "steps_per_s": r["steps_per_s"],
        "tokens": r.get("tokens"),
        "step_work_ms": r["step_work_ms"],
        "corrupted": r["corrupted_bytes"],
        "kvsim_cpu_s": r.get("kvsim_cpu_s"),
        "kvsim_cpu_ms_step": r.get("kvsim_cpu_ms_per_step"),
        "kvsim_user_ms_step": per_step(r, "kvsim_user_s"),
        "kvsim_sys_ms_step": per_step(r, "kvsim_sys_s"),
        "kvsim_faults_step": per_step(r, "kvsim_minflt", scale=1),
        "agent_kdamond_cpu_s": (r.get("agent_cpu_s") or 0) + (r.get("kdamond_cpu_s") or 0)
        if r.get("mode") not in ("damos", "damos-goal") else r.get("agent_cpu_s"),
    }


def per_step(r, key, scale=1000):
    """r[key] per decode step of the window (ms for seconds), or None."""
    v, steps = r.get(key), r.get("kvsim_steps")
    return scale * v / steps if v is not None and steps else None


def spread(values):
    """Median, min, max and count of the values that are not None (None when there are none)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def aggregate(mode, runs):
    """One mode over its runs (analyse_mode results in run order)."""
    ok = [r for r in runs if r["status"] == "ok"]
    a = {"mode": mode, "title": MODE_TITLES.get(mode, mode), "runs": runs, "ok": ok}
    if not ok:
        a["status"] = runs[0]["status"] if runs else "failed: no run"
        return a
    a["status"] = "ok"
    # Flat out (kvsim --step-ms 0): steps back to back, so steps/s is the workload's throughput.
    a["flat_out"] = any(((r.get("kvsim_start") or {}).get("sim") or {}).get("step_ms") == 0 for r in ok)
    figs = [figures(r) for r in ok]
    a["summary"] = {k: spread([f[k] for f in figs]) for k in figs[0]}
    return a


def paired_figures(aggs, ref_mode):
    """Every completed mode's runs, each with the figures of the run of `ref_mode` it is compared
    with: run K with run K of the reference, which ran close in time; the reference's medians when
    its run K did not complete. Yields (aggregate, [(figures, reference figures), ...]); nothing
    without a completed reference."""
    ref = next((a for a in aggs if a["mode"] == ref_mode and a["status"] == "ok"), None)
    if ref is None:
        return
    run_of = lambda r: r["meta"].get("run") if r.get("meta") else None  # noqa: E731
    by_run = {run_of(r): figures(r) for r in ref["ok"]}
    med = {k: (v["median"] if v else None) for k, v in ref["summary"].items()}
    for a in aggs:
        if a["status"] == "ok":
            yield a, [(figures(r), by_run.get(run_of(r), med)) for r in a["ok"]]


def ratio_of(f, o, key):
    return f[key] / o[key] if f[key] is not None and o[key] else None


def oracle_comparison(aggs):
    """Every mode against the oracle, run by run (paired_figures): KV on the CXL node at the end
    as a ratio of the oracle's, and the DRAM read share of the second half minus the oracle's, in
    points. Stored as a["vs_oracle"] = {"offload_ratio": spread, "dram_delta_pts"}."""
    for a, pairs in paired_figures(aggs, "oracle"):
        deltas = [100 * (f["dram_2nd"] - o["dram_2nd"]) for f, o in pairs
                  if f["dram_2nd"] is not None and o["dram_2nd"] is not None]
        a["vs_oracle"] = {"offload_ratio": spread([ratio_of(f, o, "cxl_end") for f, o in pairs]),
                          "dram_delta_pts": spread(deltas)}


def none_comparison(aggs):
    """The price: every mode's workload CPU per decode step as a ratio of no tiering's, run by run
    (paired_figures), its steps/s and the tokens it decoded as ratios of none's (a flat-out run's
    throughput). Stored as a["vs_none"] = {"cpu_ratio", "steps_ratio", "tokens_ratio"}: spreads."""
    for a, pairs in paired_figures(aggs, "none"):
        a["vs_none"] = {"cpu_ratio": spread([ratio_of(f, o, "kvsim_cpu_ms_step") for f, o in pairs]),
                        "steps_ratio": spread([ratio_of(f, o, "steps_per_s") for f, o in pairs]),
                        "tokens_ratio": spread([ratio_of(f, o, "tokens") for f, o in pairs])}


# --- output -------------------------------------------------------------------------------

COLUMNS = [
    "mode",
    "KV on CXL node: start / mean / end",
    "KV reads from DRAM (whole run / 2nd half)",
    "vs oracle: offload ratio / DRAM reads (2nd half)",
    "precision",
    "recall",
    "migrated MiB/s (demoted / promoted)",
    "agent CPU",
    "kvsim decode steps/s (step work ms)",
    "kvsim CPU ms/step (user + sys medians), vs none",
    "corrupted bytes",
]


def pct(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"


def num(v, fmt="{:.2f}"):
    return "n/a" if v is None else fmt.format(v)


def stat(s, show=pct, bare=None, sep="–"):
    """A summary as 'median' (one run) or 'median (min-max)'; `bare` formats the range ends."""
    if s is None:
        return "n/a"
    if s["n"] == 1 or s["min"] == s["max"]:
        return show(s["median"])
    bare = bare or (lambda v: show(v).rstrip("%"))
    return f"{show(s['median'])} ({bare(s['min'])}{sep}{bare(s['max'])})"


def signed_pts(v):
    return f"{v:+.1f} pts"


def table_row(a):
    if a["status"] != "ok":
        return [a["title"], a["status"]] + [""] * (len(COLUMNS) - 2)
    s = a["summary"]
    title = a["title"]
    failed = [r for r in a["runs"] if r["status"] != "ok"]
    if len(a["runs"]) > 1:
        title += f" ({len(a['ok'])} of {len(a['runs'])} runs)" if failed else f" ({len(a['runs'])} runs)"
    if a["mode"] == "none":
        agent = "none (no agent)"
    elif a["mode"] == "oracle":
        agent = (f"excluded (the oracle itself: {stat(s['excluded_cpu_pct'], lambda v: num(v, '{:.1f}%'))}"
                 " of a CPU, not counted)")
    else:
        agent = f"{stat(s['agent_cpu_pct'], lambda v: num(v, '{:.1f}%'))} of a CPU"
        if s.get("move_cpu_share"):
            agent += f" (moving pages: {stat(s['move_cpu_share'])} of kvtierd's)"
    if a["mode"] == "kernel":
        faults = [r["migration"]["numa_hint_faults"] or 0 for r in a["ok"]]
        agent += f"; hint faults + promotion run in kvsim's context ({int(statistics.median(faults))} faults)"
    vs = a.get("vs_oracle")
    if a["mode"] == "oracle":
        versus = "1 / +0.0 pts (the reference)"
    elif vs:
        versus = (f"{stat(vs['offload_ratio'], lambda v: num(v))} / "
                  f"{stat(vs['dram_delta_pts'], signed_pts, lambda v: f'{v:+.1f}', ' to ')}")
    else:
        versus = "n/a (no oracle run)"
    corrupted = sum(r["corrupted_bytes"] for r in a["ok"])
    ms = lambda v: num(v, "{:.1f}")  # noqa: E731
    ratio = lambda v: num(v, "{:.2f}x")  # noqa: E731
    vn = a.get("vs_none") or {}
    med = lambda k: ms(s[k]["median"] if s.get(k) else None)  # noqa: E731
    price = f"{stat(s['kvsim_cpu_ms_step'], ms)} ({med('kvsim_user_ms_step')} + {med('kvsim_sys_ms_step')})"
    if a["mode"] != "none" and vn.get("cpu_ratio"):
        price += f", {stat(vn['cpu_ratio'], ratio, lambda v: num(v))}"
    steps_vs = ""
    if a["mode"] != "none" and a.get("flat_out") and vn.get("steps_ratio"):
        steps_vs = f", {stat(vn['steps_ratio'], ratio, lambda v: num(v))} of none"
        if vn.get("tokens_ratio"):
            steps_vs += f"; tokens {stat(vn['tokens_ratio'], ratio, lambda v: num(v))} of none"
    bad_exit = [r["kvsim_status"] for r in a["ok"] if r["kvsim_status"] != 0]
    mib = lambda v: num(v)  # noqa: E731
    return [
        title,
        f"{stat(s['cxl_start'])} / {stat(s['cxl_mean'])} / {stat(s['cxl_end'])}",
        f"{stat(s['dram_whole'])} / {stat(s['dram_2nd'])}",
        versus,
        stat(s["precision"]),
        stat(s["recall"]),
        f"{stat(s['migrated'], mib)} ({stat(s['demoted'], mib)} / {stat(s['promoted'], mib)})",
        agent,
        f"{stat(s['steps_per_s'], lambda v: num(v, '{:.3f}'))} ({stat(s['step_work_ms'], lambda v: num(v, '{:.1f}'))})"
        + steps_vs,
        price,
        f"{corrupted}" + (f" (kvsim exit {bad_exit})" if bad_exit else ""),
    ]


def markdown_table(aggs):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for a in aggs:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in table_row(a)) + " |")
    return "\n".join(lines)


def one_line(r):
    """One run as one line: each column's name and value (the demo's closing line)."""
    a = aggregate(r["mode"], [r])
    row = table_row(a)
    if a["status"] != "ok":
        return f"{row[0]}: {row[1]}"
    return "; ".join(f"{c}: {v}" for c, v in zip(COLUMNS[1:], row[1:]) if not c.startswith("vs oracle"))


def plot(aggs, path, trace_name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for a in aggs:
        if a["status"] != "ok":
            continue
        r = a["ok"][0]
        t = [x for x, _ in r["share_cxl"]]
        ax1.plot(t, [100 * v for _, v in r["share_cxl"]], label=a["title"])
        if r["dram_read_series"]:
            ax2.plot([x for x, _ in r["dram_read_series"]], [100 * v for _, v in r["dram_read_series"]],
                     label=a["title"], alpha=0.8)
    missing = [f"{a['title']}: {a['status']}" for a in aggs if a["status"] != "ok"]
    ax1.set_ylabel("KV pool bytes on node 1 (CXL), %")
    ax1.set_title(f"KV cache residency on the CXL node over time (kvsim, {trace_name}; first run of each mode)")
    ax1.grid(alpha=0.3)
    ax1.legend(loc="best", fontsize=8)
    ax2.set_ylabel("decode reads served by node 0 (DRAM), %\n(per kvsim stats interval)")
    ax2.set_xlabel("seconds since the probe started")
    ax2.grid(alpha=0.3)
    ax2.set_ylim(0, 105)
    if missing:
        fig.text(0.01, 0.005, "\n".join(m[:150] for m in missing), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.04 * len(missing), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def first_runs(aggs):
    """The first completed run of each mode (or its first run), for settings and details."""
    return [a["ok"][0] if a["ok"] else a["runs"][0] for a in aggs if a["runs"]]


def run_context(aggs):
    """(trace name, trace file, kernel release, runs per mode, duration) from the runs' own
    events and meta files."""
    runs = [r for a in aggs for r in a["runs"]]
    meta = next((r["meta"] for r in runs if (r.get("meta") or {}).get("trace")), None) or {}
    ks = next((r["kvsim_start"] for r in runs if r.get("kvsim_start")), None)
    lay = next((r["layout"] for r in runs if r.get("layout")), None)
    trace_file = os.path.basename(ks["trace"]["path"]) if ks else meta.get("trace_file", "?")
    return {
        "trace": meta.get("trace") or trace_file,
        "trace_file": trace_file,
        "kernel": lay["kernel"] if lay else meta.get("kernel", "?"),
        "runs": max((len(a["runs"]) for a in aggs), default=0),
        "duration_s": meta.get("duration_s"),
    }


def guest_cpus(meta):
    """The guest's vCPUs and clock, from a run's meta file (runs before --vcpus had 2 vCPUs on
    the host's clock)."""
    vcpus = meta.get("vcpus", 2)
    icount = meta.get("icount", "off") or "off"
    clock = ("the host's clock" if icount == "off"
             else f"a clock that counts instructions (-icount {icount})")
    return f"{vcpus} vCPU{'s' if vcpus != 1 else ''} on node 0, {clock}"


def settings_md(results):
    out = []
    ok = [r for r in results if r["status"] == "ok" or r.get("layout")]
    lay = next((r["layout"] for r in ok if r.get("layout")), None)
    if lay:
        nodes = ", ".join(f"node {n}: {v['total_kib'] // 1024} MiB total, {v['free_kib'] // 1024} MiB free at start"
                          for n, v in sorted(lay["nodes"].items()))
        meta = next((r["meta"] for r in ok if (r.get("meta") or {}).get("vcpus")), None) or {}
        out.append(f"- Guest: Linux {lay['kernel']} under QEMU TCG, {guest_cpus(meta)}; {nodes}; "
                   f"memory tiers: {lay['memory_tiers'].replace(chr(10), ', ')}.")
    ks = next((r["kvsim_start"] for r in results if r.get("kvsim_start")), None)
    if ks:
        out.append(f"- Workload: kvsim, trace `{os.path.basename(ks['trace']['path'])}` "
                   f"({ks['trace']['requests']} requests), time scale {ks['time_scale']} (real time), "
                   f"pool {ks['pool_bytes'] // MIB} MiB = {ks['sim']['blocks']} blocks of "
                   f"{ks['sim']['block_bytes'] // 1024} KiB; {ks['scaled']}; decode step paced to "
                   f"{ks['sim']['step_ms']:.0f} ms; "
                   + (f"{ks['threads']} threads ({ks['threads'] - 1} idle: --idle-threads)."
                      if ks.get("threads", 1) > 1 else
                      "one thread (the kernel's NUMA scan leaves its DRAM pages mapped)."))
    for r in results:
        for e in r.get("settings_events", []):
            if e["event"] == "settings":
                continue
            if e["event"] == "kvtier_config":
                out.append(f"- {r['title']}: kvtierd config:\n\n```toml\n{e['toml']}\n```")
                continue
            body = {k: v for k, v in e.items() if k not in ("src", "event")}
            out.append(f"- {r['title']} ({e['event']}): `{json.dumps(body)}`")
    return "\n".join(out)


def price_md(r):
    """One line: what the mode cost the workload (kvsim's CPU split, its faults) and what the
    placer spent per MiB it moved, kvtierd's loop by phase where it says."""
    steps = r.get("kvsim_steps") or 0
    line = f"- The price: kvsim {r['kvsim_cpu_s']:.2f} s of CPU over {steps} decode steps"
    if r.get("kvsim_sys_s") is not None:
        line += f" ({r['kvsim_user_s']:.2f} s user, {r['kvsim_sys_s']:.2f} s system)"
    if r.get("kvsim_minflt") is not None and steps:
        line += f", {r['kvsim_minflt'] / steps:.0f} minor faults a step"
    placer = r.get("excluded_cpu_s") if r["mode"] == "oracle" else r.get("agent_cpu_s")
    moved = (r["migration"]["migrated_mib_s"] or 0) * r["migration"]["window_s"]
    if placer and moved > 0:
        line += f"; the placer {placer:.2f} s of CPU, {1000 * placer / moved:.1f} ms per MiB migrated"
    phases = r.get("agent_phases")
    if phases:
        line += " (kvtierd's loop since its start: " + ", ".join(
            f"{k} {v:.2f} s" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])) + ")"
    return line + "."


def details_md(results):
    out = []
    for r in results:
        if r["status"] != "ok":
            continue
        out.append(f"### {r['title']}\n")
        if r["scores"]:
            out.append("| t (s) | on CXL node | truly cold (>= {} s) | precision (at most, for what is on CXL) | "
                       "recall | not cold on CXL: block's use began < {:g} s before / earlier |".format(
                           r["cold_age_s"], r["reaction_window_s"]))
            out.append("|---|---|---|---|---|---|")
            for s in r["scores"]:
                hot = s["demoted_bytes"] - s["demoted_cold_bytes"]
                early = s.get("demoted_hot_early_bytes")
                split = ("n/a" if early is None else
                         f"{early / MIB:.1f} / {(hot - early) / MIB:.1f} MiB")
                out.append(f"| {s['t_s']:.0f} | {s['demoted_bytes'] / MIB:.1f} MiB | {s['cold_bytes'] / MIB:.1f} MiB | "
                           f"{pct(s['precision'])} ({pct(s.get('precision_ceiling'))}) | {pct(s['recall'])} | {split} |")
            out.append("")
        sr = r.get("slow_reads_2nd_half")
        if sr:
            out.append(
                f"- Reads not served by node 0 in the second half: {pct(sr['slow_bytes'] / sr['read_bytes'])} "
                f"of {sr['read_bytes'] / MIB:.0f} MiB read; {pct(sr['slow_early_bytes'] / sr['read_bytes'])} "
                f"within {sr['reaction_window_s']:g} s of the block's start of use (filled anew, or back "
                f"after {sr['episode_gap_s']:g} s or more untouched: what no placement that waits for an "
                f"access can serve from DRAM), {pct(sr['slow_late_bytes'] / sr['read_bytes'])} later.")
        lay = r.get("layout")
        if lay:
            out.append("- Guest at the start of this mode: " + ", ".join(
                f"node {n}: {v['total_kib'] / 1024:.0f} MiB, {v['free_kib'] / 1024:.0f} MiB free"
                for n, v in sorted(lay["nodes"].items())) + ".")
        m = r["migration"]
        out.append(f"- vmstat over {m['window_s']:.0f} s: migrated {num(m['migrated_mib_s'])} MiB/s, "
                   f"demoted {num(m['demoted_mib_s'])} MiB/s, promoted {num(m['promoted_mib_s'])} MiB/s, "
                   f"failed migrations {m['migrate_fail_pages']} pages, NUMA hint faults {m['numa_hint_faults']}.")
        out.append(f"- CPU over the window: kswapd {r['kswapd_cpu_s']:.2f} s, kdamond {r['kdamond_cpu_s']:.2f} s, "
                   f"kvsim {r['kvsim_cpu_s']:.2f} s, the probe itself {r['probe_cpu_s']:.2f} s "
                   f"(its move_pages query of the pool took {r['probe_query_ms']:.0f} ms a sample).")
        out.append(price_md(r))
        lat = r.get("promotion_latency") or {}
        if lat:
            out.append("- Promotion latency (kvtierd's `kvtier_promotion_latency_seconds`, first sample on node 1 "
                       "to the page back in DRAM; the kernel's to the read that found it there): " + "; ".join(
                           f"{by}: {v['count']} pages, median at most {v['median_le']:g} s, "
                           f"{pct(v['within_5s'])} within 5 s" for by, v in sorted(lat.items())) + ".")
        if r.get("numa_maps_bytes_by_node"):
            out.append(f"- Cross-check at the end: /proc/PID/numa_maps {fmt_nodes(r['numa_maps_bytes_by_node'])}, "
                       f"probe {fmt_nodes(r['probe_last_bytes_by_node'])}.")
        for d in r.get("damos_stats", []):
            out.append(f"- DAMOS scheme {d['scheme']} ({d['action']}): tried {d['sz_tried'] / MIB:.0f} MiB, "
                       f"applied {d['sz_applied'] / MIB:.0f} MiB, quota exceeded {d['qt_exceeds']} times.")
        for g in r.get("damos_goals", []):
            body = {k: v for k, v in g.items() if k not in ("src", "event")}
            out.append(f"- DAMOS goal state: `{json.dumps(body)}`")
        o = r.get("oracle")
        if o:
            end = o["end"]
            ck = o["cold_check"] or {}
            out.append(
                f"- Oracle: {o['cycles']} cycles; moved {o['moved_to_slow_pages'] * PAGE / MIB:.1f} MiB to node 1 and "
                f"{o['moved_to_fast_pages'] * PAGE / MIB:.1f} MiB to node 0; {o['unmoved_pages']} planned pages not "
                f"moved; budget-limited in {o['budget_limited_cycles']} cycles, short of room on node 0 in "
                f"{o['room_limited_cycles']}; nothing left misplaced in {o['zero_backlog_cycles']} cycles "
                f"(last cycle: {num((o['last_backlog_bytes'] or 0) / MIB, '{:.1f}')} MiB misplaced); its own CPU "
                f"{end.get('cpu_s', 0):.2f} s (excluded from the figures). Check against the final map: "
                f"{(ck.get('checked_bytes') or 0) / MIB:.1f} MiB cold since cycle {ck.get('cycle')}, "
                f"{(ck.get('misplaced_bytes') or 0) / MIB:.1f} MiB of it not on node 1.")
        out.append("")
    return "\n".join(out)


def runs_md(aggs):
    """One line per run when a mode ran more than once: the figures behind the medians."""
    out = []
    for a in aggs:
        if len(a["runs"]) < 2:
            continue
        for r in a["runs"]:
            k = (r.get("meta") or {}).get("run", "?")
            if r["status"] != "ok":
                out.append(f"- {a['title']}, run {k}: {r['status']}")
                continue
            f = figures(r)
            out.append(f"- {a['title']}, run {k}: KV on CXL at the end {pct(f['cxl_end'])}, DRAM reads "
                       f"{pct(f['dram_whole'])} / {pct(f['dram_2nd'])}, precision {pct(f['precision'])}, "
                       f"recall {pct(f['recall'])}, agent CPU {num(f['agent_cpu_pct'], '{:.1f}')}%, "
                       f"corrupted {f['corrupted']}")
    return "\n".join(out)


def fmt_nodes(d):
    return ", ".join(f"node {k}: {v / MIB:.1f} MiB" for k, v in sorted(d.items()))


def layout_warning(results):
    """One line if the modes' guests did not have the same node sizes (the comparison then is
    not like for like), else empty."""
    sizes = {}
    for r in results:
        lay = r.get("layout")
        if lay:
            sizes.setdefault(tuple(sorted((n, v["total_kib"] // 1024) for n, v in lay["nodes"].items())),
                             []).append(f"{r['mode']}-{(r.get('meta') or {}).get('run', 1)}")
    if len(sizes) <= 1:
        return ""
    return ("**Warning: the guests had different node sizes (MiB): "
            + "; ".join(f"{', '.join(runs)}: {dict(s)}" for s, runs in sizes.items()) + ". Compare with care.**")


def write_report(out_dir, aggs, plot_ok):
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    ctx = run_context(aggs)
    firsts = first_runs(aggs)
    every = [r for a in aggs for r in a["runs"]]
    repeat = (f"{ctx['runs']} runs of each mode, interleaved; each figure is the median with the range "
              "(min–max) in brackets" if ctx["runs"] > 1 else "one run of each mode")
    md = [
        "# kvtier benchmark: tiering the KV cache, side by side",
        "",
        f"Run {now} by `scripts/bench.sh`: trace **{ctx['trace']}** (`{ctx['trace_file']}`), guest kernel "
        f"**{ctx['kernel']}**, {repeat}"
        + (f", {ctx['duration_s']} s measured each" if ctx["duration_s"] else "")
        + "; every run in a freshly booted guest with the same memory layout and the same kvsim command.",
        "",
        markdown_table(aggs),
        "",
        layout_warning(every),
        "",
        "![residency](residency.png)" if plot_ok else "(no plot: matplotlib unavailable)",
        "",
        "## Columns",
        "",
        "- **KV on CXL node**: share of kvsim's KV pool bytes on node 1, from move_pages(2) queries of "
        "every pool page once a second (kvtier_residency_probe): first sample, mean, last sample.",
        "- **KV reads from DRAM**: share of kvsim's decode read bytes whose page was on node 0 at "
        "the moment of the read (kvsim --read-nodes-every), whole run and second half.",
        "- **vs oracle**: the mode's KV on the CXL node at the end divided by the oracle's (offload "
        "ratio; 1 = as much as the oracle), and its DRAM read share in the second half minus the "
        "oracle's, in points; run K of a mode is paired with run K of the oracle. The oracle places "
        "from kvsim's ground truth with the same DRAM, budget and mover (scripts/bench/guest.sh).",
        "- **precision / recall**: at the last page map, bytes on node 1 that were truly cold "
        "(not touched for the cold age, per kvsim's ground truth) over all bytes on node 1, and over "
        "all truly cold bytes. Pages on node 1 from the start count as demoted: the no-tiering row "
        "is the baseline that placement by first touch gives.",
        "- **migrated MiB/s**: /proc/vmstat pgmigrate_success (all migrations, system wide) over the "
        "probe's window; demoted = pgdemote_*, promoted = pgpromote_success (kernel tiering's own counters).",
        "- **agent CPU**: user+system time of the agent over the window: kvtierd plus the kdamond "
        "of its DAMON source (kvtier), kdamond (DAMOS), kswapd (kernel tiering; its demotion work). The kernel's NUMA-hint-fault handling and "
        "promotions run in the faulting task (kvsim) and cannot be separated from its time. "
        "The oracle's own CPU is excluded (it is a ceiling, not a rival) and shown apart. For kvtier, "
        "the share of kvtierd's own CPU time (since its start) that its loop spent moving pages "
        "(move_pages(2), the kernel's copying included; kvtierctl status --json: loop.cpu).",
        "- **kvsim decode steps/s**: steps per second of the whole run; decode is paced to the "
        "trace's real time, so it only drops when steps take longer than their budget; "
        "the step work (ms, without pacing sleeps and without the node queries) shows the cost. "
        "In a flat-out run (scripts/bench.sh --flat-out: no pacing, steps back to back) each mode's "
        "steps/s and the tokens kvsim decoded are also given as ratios of none's. Steps/s is the "
        "throughput only while kvsim cannot keep up with the trace: when every mode decodes the "
        "same tokens, fewer steps are larger batches (requests waited while the placer had the "
        "CPU), not less work done; then CPU per step times steps, over tokens, is the price.",
        "- **kvsim CPU ms/step**: kvsim's own CPU time (user / system) over the probe's window per "
        "decode step it ran, and as a ratio of none's (run K with run K): the price tiering makes "
        "the workload pay (hint faults, soft-dirty write faults, waits on pages under migration "
        "and the kernel's promotions in the fault path are system time). Counted in instructions "
        "when the guests ran with one vCPU and -icount (the settings line says so); on the host's "
        "clock with two vCPUs it also counts the other vCPU's turns and the host's load.",
        "- **corrupted bytes**: kvsim checks every byte it reads against its pattern; must be 0 "
        "(summed over the runs).",
        "",
    ]
    rm = runs_md(aggs)
    if rm:
        md += ["## Every run", "", rm, ""]
    md += [
        "## Settings",
        "",
        settings_md(firsts),
        "",
        "## Details per mode" + (" (first run of each)" if ctx["runs"] > 1 else ""),
        "",
        details_md(firsts),
    ]
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")

    def slim(r):
        return {k: v for k, v in r.items() if k not in ("kvsim_start", "layout", "settings_events")}

    out = []
    for a in aggs:
        top = slim(a["ok"][0] if a["ok"] else (a["runs"][0] if a["runs"] else {"mode": a["mode"]}))
        top.update({"mode": a["mode"], "title": a["title"], "status": a["status"],
                    "runs": [slim(r) for r in a["runs"]], "summary": a.get("summary"),
                    "vs_oracle": a.get("vs_oracle"), "vs_none": a.get("vs_none"), "trace": ctx["trace"], "kernel": ctx["kernel"]})
        out.append(top)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


def load_mode(out_dir, mode):
    """Every run of a mode in DIR: MODE-K.jsonl (K = 1, 2, ...) or an older run's MODE.jsonl."""
    runs = []
    pat = re.compile(re.escape(mode) + r"-([0-9]+)\.jsonl$")
    found = sorted((int(m.group(1)), n) for n in os.listdir(out_dir) if (m := pat.match(n)))
    if not found and os.path.exists(os.path.join(out_dir, f"{mode}.jsonl")):
        found = [(1, f"{mode}.jsonl")]
    for k, name in found:
        meta_path = os.path.join(out_dir, name[: -len(".jsonl")] + ".meta.json")
        meta = {"run": k}
        if os.path.exists(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
            meta.setdefault("run", k)
        runs.append(analyse_mode(mode, read_events(os.path.join(out_dir, name)), meta))
    if not runs:
        runs.append({"mode": mode, "title": MODE_TITLES.get(mode, mode), "meta": {"run": 1},
                     "status": f"failed: {os.path.join(out_dir, mode + '-1.jsonl')} missing (the mode did not run)"})
    return runs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--modes", default="none,kernel,damos,oracle,kvtier")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--line", metavar="FILE", help="print one line of the table's columns for one run's guest output")
    ap.add_argument("--mode", default="kvtier", help="with --line: the mode the run used")
    a = ap.parse_args(argv)
    if a.line:
        print(one_line(analyse_mode(a.mode, read_events(a.line), {"run": 1})))
        return 0
    if not a.dir:
        ap.error("DIR is required (or --line FILE)")
    aggs = [aggregate(mode, load_mode(a.dir, mode)) for mode in a.modes.split(",")]
    oracle_comparison(aggs)
    none_comparison(aggs)
    plot_ok = False
    if not a.no_plot:
        try:
            plot(aggs, os.path.join(a.dir, "residency.png"), run_context(aggs)["trace"])
            plot_ok = True
        except ImportError as e:
            print(f"report.py: no plot ({e}); install python3-matplotlib", file=sys.stderr)
    write_report(a.dir, aggs, plot_ok)
    print(markdown_table(aggs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
