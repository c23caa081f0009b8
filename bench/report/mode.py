"""One run of one mode: its figures from its own events."""

import json

from .inputs import CXL_NODE, DRAM_NODE, MODE_TITLES, PAGE, first, pick
from .metrics import (
    cpu_seconds, cxl_read_split, demotion_score, dram_read_share, expand_runs, migration_rates,
    parse_truth_csv, series_share,
)

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
    r["kvtierd_own_cpu"] = kvtierd_own_cpu(first(events, "bench", "kvtierd_status"))
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
                            ("damos", "damos_goal", "kernel_tiering", "kvtier_config", "oracle", "settings",
                             "thp", "pool_folios")]
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


def kvtierd_own_cpu(status_event):
    """kvtierd's CPU by its own count (the demo's `kvtierctl status --json` at the end): {"pct":
    its process CPU seconds against its uptime, in % of a CPU, "move_share": the share of them its
    loop spent moving pages (None when it spent none)}; None without the status or with no uptime."""
    try:
        st = status_event["status"]
        cpu = st["loop"]["cpu"]
        process, uptime = float(cpu["process_seconds"]), float(st["uptime_seconds"])
        move = float(cpu["loop_seconds_by_phase"]["move"])
    except (TypeError, KeyError, ValueError):
        return None
    if uptime <= 0:
        return None
    return {"pct": 100 * process / uptime, "move_share": move / process if process > 0 else None}


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
