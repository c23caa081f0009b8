"""Several runs of a mode (medians, ranges) and the oracle and no tiering as references."""

import statistics

from .inputs import MODE_TITLES

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
