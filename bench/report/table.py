"""The table's columns: one row per mode, and one line for one run (--line)."""

import statistics

from .runs import aggregate

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
    line = "; ".join(f"{c}: {v}" for c, v in zip(COLUMNS[1:], row[1:]) if not c.startswith("vs oracle"))
    own = r.get("kvtierd_own_cpu")
    if own:
        move = f", moving pages {pct(own['move_share'])} of it" if own["move_share"] is not None else ""
        line += f"; the price by kvtierd's own count (kvtierctl status): {own['pct']:.1f}% of a CPU{move}"
    return line
