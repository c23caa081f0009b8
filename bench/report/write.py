"""DIR/report.md, DIR/results.json and the residency plot."""

import datetime
import json
import os

from .inputs import MIB, PAGE
from .runs import figures
from .table import markdown_table, num, pct

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
