#!/usr/bin/env python3
"""The tiering benchmark's report: reads what scripts/bench.sh collected (DIR/MODE.jsonl, the
guest's stdout for each mode, and DIR/MODE.meta.json) and writes DIR/report.md (one table row
per mode, the settings, the guest layout), DIR/results.json (the same figures) and
DIR/residency.png (share of KV bytes on the CXL node over time, one line per mode).

Usage: report.py DIR [--modes none,kernel,damos,kvtier] [--no-plot]

Every figure comes from the run's own events; a mode that could not run gets a row saying
why ("not available: ...") and no numbers.
"""

import argparse
import bisect
import datetime
import json
import os
import sys

PAGE = 4096
MIB = 1 << 20
MODE_TITLES = {
    "none": "no tiering",
    "kernel": "kernel tiering (NUMA balancing 2 + demotion)",
    "damos": "DAMOS migrate_cold/hot alone",
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
    """kvsim's ground truth CSV -> list of (start, end, last_access_ns, state), by start."""
    rows = []
    lines = text.splitlines()
    if not lines or not lines[0].startswith("block,tensor,start,end,state,last_access_ns"):
        raise ValueError("not a kvsim truth CSV (header missing)")
    for line in lines[1:]:
        if not line:
            continue
        f = line.split(",")
        rows.append((int(f[2]), int(f[3]), int(f[5]), f[4]))
    rows.sort()
    return rows


def demotion_score(map_start, page_status, truth_rows, now_ns, cold_age_ns, demoted_node=1):
    """Precision and recall of "on the demotion node" against "not touched for cold_age".

    map_start: address of page_status[0]; page_status: node (or -errno) of each page in
    address order; truth_rows: (start, end, last_access_ns, state) chunks. Bytes outside every
    chunk or not placed on a node are left out. Returns a dict of byte counts and the two
    ratios (None when undefined: nothing demoted, or nothing cold).
    """
    demoted = cold = both = considered = 0
    n = len(page_status)
    for start, end, last, _state in truth_rows:
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
    return {
        "considered_bytes": considered,
        "demoted_bytes": demoted,
        "cold_bytes": cold,
        "demoted_cold_bytes": both,
        "precision": both / demoted if demoted else None,
        "recall": both / cold if cold else None,
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


def cpu_seconds(first_sample, last_sample, prefixes):
    """CPU seconds (user+system) over the window of threads whose comm starts with a prefix.
    A thread that appeared during the window counts from zero."""
    tck = last_sample.get("clk_tck", 100) or 100
    a, b = first_sample.get("cpu_ticks", {}), last_sample.get("cpu_ticks", {})
    total = 0
    for comm, ticks in b.items():
        if any(comm.startswith(p) for p in prefixes):
            total += ticks - a.get(comm, 0)
    return total / tck


def series_share(samples, node, pool_bytes):
    """(t_s, share of the pool's bytes on `node`) per probe sample."""
    return [(s["t_s"], s["bytes_by_node"].get(node, 0) / pool_bytes) for s in samples]


def dram_read_share(stats, until_ns=None, since_ns=None):
    """Share of the sampled decode read bytes served by node 0, between two kvsim stats lines
    (cumulative counters): the last at or before until_ns and the last at or before since_ns."""
    usable = [s for s in stats if "read_nodes" in s and (until_ns is None or s["time_ns"] <= until_ns)]
    if not usable:
        return None
    end = usable[-1]["read_nodes"]
    base = {"sampled_read_bytes": 0, "by_node": {}}
    if since_ns is not None:
        before = [s for s in usable if s["time_ns"] <= since_ns]
        if before:
            base = before[-1]["read_nodes"]
    total = end["sampled_read_bytes"] - base["sampled_read_bytes"]
    dram = end["by_node"].get(DRAM_NODE, 0) - base["by_node"].get(DRAM_NODE, 0)
    return dram / total if total > 0 else None


# --- one mode -----------------------------------------------------------------------------

AGENT_CPU = {
    "none": [],
    "kernel": ["kswapd"],
    "damos": ["kdamond"],
    # kvtierd's DAMON source runs its own kdamond thread: part of kvtier's cost.
    "kvtier": ["kvtierd", "kdamond"],
}


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
    # Precision and recall at every page map that came with its ground truth.
    truths = {e["i"]: e for e in pick(events, "probe", "truth")}
    r["scores"] = []
    for s in samples:
        if "runs" not in s or s["i"] not in truths:
            continue
        score = demotion_score(s["start"], expand_runs(s["runs"]), parse_truth_csv(truths[s["i"]]["csv"]),
                               s["t_ns"], int(cold_age_s * 1e9))
        score["t_s"] = s["t_s"]
        r["scores"].append(score)
    r["final_score"] = r["scores"][-1] if r["scores"] else None
    r["migration"] = migration_rates(samples[0], samples[-1])
    window = r["migration"]["window_s"]
    r["agent_cpu_s"] = cpu_seconds(samples[0], samples[-1], AGENT_CPU.get(mode, [])) if AGENT_CPU.get(mode) else 0.0
    r["kswapd_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kswapd"])
    r["kdamond_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kdamond"])
    r["kvsim_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kvsim"])
    r["probe_cpu_s"] = cpu_seconds(samples[0], samples[-1], ["kvtier_residenc"])
    r["agent_cpu_pct"] = 100 * r["agent_cpu_s"] / window if window > 0 else None
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
    r["damos_stats"] = pick(events, "bench", "damos_stats")
    r["layout"] = first(events, "bench", "layout")
    r["settings_events"] = [e for e in events if e.get("src") == "bench" and e.get("event") in
                            ("damos", "kernel_tiering", "kvtier_config", "settings")]
    r["kvsim_start"] = kstart
    return r


# --- output -------------------------------------------------------------------------------

COLUMNS = [
    "mode",
    "KV on CXL node: start / mean / end",
    "KV reads from DRAM (whole run / 2nd half)",
    "precision",
    "recall",
    "migrated MiB/s (demoted / promoted)",
    "agent CPU",
    "kvsim decode steps/s (step work ms)",
    "corrupted bytes",
]


def pct(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"


def num(v, fmt="{:.2f}"):
    return "n/a" if v is None else fmt.format(v)


def table_row(r):
    if r["status"] != "ok":
        return [r["title"], r["status"]] + [""] * (len(COLUMNS) - 2)
    fs = r["final_score"] or {}
    m = r["migration"]
    agent = "none (no agent)" if r["mode"] == "none" else (
        f"{r['agent_cpu_s']:.2f} s ({num(r['agent_cpu_pct'], '{:.1f}')}% of a CPU)")
    if r["mode"] == "kernel":
        agent += f"; hint faults + promotion run in kvsim's context ({m['numa_hint_faults'] or 0} faults)"
    return [
        r["title"],
        f"{pct(r['share_cxl_start'])} / {pct(r['share_cxl_mean'])} / {pct(r['share_cxl_end'])}",
        f"{pct(r['dram_read_share'])} / {pct(r['dram_read_share_2nd_half'])}",
        pct(fs.get("precision")),
        pct(fs.get("recall")),
        f"{num(m['migrated_mib_s'])} ({num(m['demoted_mib_s'])} / {num(m['promoted_mib_s'])})",
        agent,
        f"{r['steps_per_s']:.3f} ({r['step_work_ms']:.1f})",
        f"{r['corrupted_bytes']}" + ("" if r["kvsim_status"] == 0 else f" (kvsim exit {r['kvsim_status']})"),
    ]


def markdown_table(results):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in table_row(r)) + " |")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for r in results:
        if r["status"] != "ok":
            continue
        t = [x for x, _ in r["share_cxl"]]
        ax1.plot(t, [100 * v for _, v in r["share_cxl"]], label=r["title"])
        if r["dram_read_series"]:
            ax2.plot([x for x, _ in r["dram_read_series"]], [100 * v for _, v in r["dram_read_series"]],
                     label=r["title"], alpha=0.8)
    missing = [f"{r['title']}: {r['status']}" for r in results if r["status"] != "ok"]
    ax1.set_ylabel("KV pool bytes on node 1 (CXL), %")
    ax1.set_title("KV cache residency on the CXL node over time (kvsim, Mooncake trace)")
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


def settings_md(results):
    out = []
    ok = [r for r in results if r["status"] == "ok" or r.get("layout")]
    lay = next((r["layout"] for r in ok if r.get("layout")), None)
    if lay:
        nodes = ", ".join(f"node {n}: {v['total_kib'] // 1024} MiB total, {v['free_kib'] // 1024} MiB free at start"
                          for n, v in sorted(lay["nodes"].items()))
        out.append(f"- Guest: Linux {lay['kernel']} under QEMU TCG, 2 vCPUs on node 0; {nodes}; "
                   f"memory tiers: {lay['memory_tiers'].replace(chr(10), ', ')}.")
    ks = next((r["kvsim_start"] for r in results if r.get("kvsim_start")), None)
    if ks:
        out.append(f"- Workload: kvsim, trace `{os.path.basename(ks['trace']['path'])}` "
                   f"({ks['trace']['requests']} requests), time scale {ks['time_scale']} (real time), "
                   f"pool {ks['pool_bytes'] // MIB} MiB = {ks['sim']['blocks']} blocks of "
                   f"{ks['sim']['block_bytes'] // 1024} KiB; {ks['scaled']}; decode step paced to "
                   f"{ks['sim']['step_ms']:.0f} ms.")
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


def details_md(results):
    out = []
    for r in results:
        if r["status"] != "ok":
            continue
        out.append(f"### {r['title']}\n")
        if r["scores"]:
            out.append("| t (s) | on CXL node | truly cold (>= {} s) | precision | recall |".format(r["cold_age_s"]))
            out.append("|---|---|---|---|---|")
            for s in r["scores"]:
                out.append(f"| {s['t_s']:.0f} | {s['demoted_bytes'] / MIB:.1f} MiB | {s['cold_bytes'] / MIB:.1f} MiB | "
                           f"{pct(s['precision'])} | {pct(s['recall'])} |")
            out.append("")
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
        if r.get("numa_maps_bytes_by_node"):
            out.append(f"- Cross-check at the end: /proc/PID/numa_maps {fmt_nodes(r['numa_maps_bytes_by_node'])}, "
                       f"probe {fmt_nodes(r['probe_last_bytes_by_node'])}.")
        for d in r.get("damos_stats", []):
            out.append(f"- DAMOS scheme {d['scheme']} ({d['action']}): tried {d['sz_tried'] / MIB:.0f} MiB, "
                       f"applied {d['sz_applied'] / MIB:.0f} MiB, quota exceeded {d['qt_exceeds']} times.")
        out.append("")
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
            sizes[r["mode"]] = tuple(sorted((n, v["total_kib"] // 1024) for n, v in lay["nodes"].items()))
    if len(set(sizes.values())) <= 1:
        return ""
    return ("**Warning: the modes' guests had different node sizes (MiB): "
            + "; ".join(f"{m}: {dict(s)}" for m, s in sizes.items()) + ". Compare with care.**")


def write_report(out_dir, results, plot_ok):
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    md = [
        "# kvtier benchmark: tiering the KV cache, side by side",
        "",
        f"Run {now} by `scripts/bench.sh`; every mode in a freshly booted guest with the same "
        "memory layout and the same kvsim command.",
        "",
        markdown_table(results),
        "",
        layout_warning(results),
        "",
        "![residency](residency.png)" if plot_ok else "(no plot: matplotlib unavailable)",
        "",
        "## Columns",
        "",
        "- **KV on CXL node**: share of kvsim's KV pool bytes on node 1, from move_pages(2) queries of "
        "every pool page once a second (kvtier_residency_probe): first sample, mean, last sample.",
        "- **KV reads from DRAM**: share of kvsim's decode read bytes whose page was on node 0 at "
        "the moment of the read (kvsim --read-nodes-every), whole run and second half.",
        "- **precision / recall**: at the last page map, bytes on node 1 that were truly cold "
        "(not touched for the cold age, per kvsim's ground truth) over all bytes on node 1, and over "
        "all truly cold bytes. Pages on node 1 from the start count as demoted: the no-tiering row "
        "is the baseline that placement by first touch gives.",
        "- **migrated MiB/s**: /proc/vmstat pgmigrate_success (all migrations, system wide) over the "
        "probe's window; demoted = pgdemote_*, promoted = pgpromote_success (kernel tiering's own counters).",
        "- **agent CPU**: user+system time of the agent over the window: kvtierd plus the kdamond "
        "of its DAMON source (kvtier), kdamond (DAMOS), kswapd (kernel tiering; its demotion work). The kernel's NUMA-hint-fault handling and "
        "promotions run in the faulting task (kvsim) and cannot be separated from its time.",
        "- **kvsim decode steps/s**: steps per second of the whole run; decode is paced to the "
        "trace's real time, so it only drops when steps take longer than their budget; "
        "the step work (ms, without pacing sleeps and without the node queries) shows the cost.",
        "- **corrupted bytes**: kvsim checks every byte it reads against its pattern; must be 0.",
        "",
        "## Settings",
        "",
        settings_md(results),
        "",
        "## Details per mode",
        "",
        details_md(results),
    ]
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    slim = []
    for r in results:
        slim.append({k: v for k, v in r.items() if k not in ("kvsim_start", "layout", "settings_events")})
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(slim, f, indent=1)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--modes", default="none,kernel,damos,kvtier")
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args(argv)
    results = []
    for mode in a.modes.split(","):
        path = os.path.join(a.dir, f"{mode}.jsonl")
        meta_path = os.path.join(a.dir, f"{mode}.meta.json")
        meta = None
        if os.path.exists(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
        if not os.path.exists(path):
            results.append({"mode": mode, "title": MODE_TITLES.get(mode, mode),
                            "status": f"failed: {path} missing (the mode did not run)"})
            continue
        results.append(analyse_mode(mode, read_events(path), meta))
    plot_ok = False
    if not a.no_plot:
        try:
            plot(results, os.path.join(a.dir, "residency.png"))
            plot_ok = True
        except ImportError as e:
            print(f"report.py: no plot ({e}); install python3-matplotlib", file=sys.stderr)
    write_report(a.dir, results, plot_ok)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
