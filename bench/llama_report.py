#!/usr/bin/env python3
"""The report of scripts/bench.sh --workload llama-server: OUT/MODE-R.jsonl (the guest's lines,
scripts/bench/llama_guest.sh and kvtier_llama_load) and OUT/MODE-R.meta.json -> OUT/report.md
and OUT/results.json.

Per run: hot KV bytes on node 1 (the ground truth's "active" pages on node 1, time average after
the first 20 s), idle and unused bytes on node 1 at the end (and their share of all idle and
unused bytes), the clients' TTFT p50/p99 and decode tokens/s (and each as a ratio of none's in
the same repeat), failed requests, kvtierd's CPU, the server's CPU per generated token, and
integrity (the fixed prompts' completions identical to none's in the same repeat).

The clients' figures that compare like with like (paired_ratios): kvtier_llama_load sends each
turn at its trace time (one client per conversation, open loop), so every run sends the same
requests at the same times, and a request of one run is paired with the same conversation's
same turn in the run it is compared with. Per pair: TTFT (queueing and prompt) and decode
(ms per token after the first; requests with 2 or more tokens) as a ratio, the median over the
pairs, over all of them, over those sent after the warm-up, and over those that had no other
request in flight in either run. The run's decode tokens/s (generated tokens over the server's
decode time) is kept, labelled as the old figure: it is dominated by the requests that overlap
(their decode time includes the prompts batched with them), so it moves with the overlap.
With --repeat 2 or more, each none run after the first is compared with the first the same
way: the spread of none against none, the difference these figures can resolve.

Usage: llama_report.py OUT [--warmup S]
"""
import argparse
import glob
import json
import os
import statistics
import sys

MIB = 1 << 20


def load_lines(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"llama_report: {path}:{n}: not a JSON line, skipped", file=sys.stderr)
    return out


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def feedback_totals(status):
    """kvtierd's demoted, promoted, mis-demoted bytes and cold age, summed over its groups."""
    tot = {"demoted_bytes": 0, "promoted_bytes": 0, "misdemoted_bytes": 0,
           "kernel_promoted_bytes": 0}
    cold = None

    def walk(x):
        nonlocal cold
        if isinstance(x, dict):
            if "effective_cold_age_s" in x and "demoted_bytes" in x:
                for k in tot:
                    tot[k] += x.get(k) or 0
                cold = x["effective_cold_age_s"]
                return
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(status)
    tot["cold_age_s"] = cold
    return tot


def alone_rates(ok):
    """The server's own speed: decode ms per token (after the first, which comes with the prompt)
    and prompt ms per prompt token of the requests that had no other request in flight. The
    run's decode tokens/s also counts the prompts batched with a request's decode, so it moves
    with how the requests overlap; these do not."""
    ok = [x for x in ok if "t" in x and "wall_s" in x]
    spans = [(x["t"], x["t"] + x["wall_s"]) for x in ok]
    alone = [x for i, x in enumerate(ok)
             if not any(j != i and a < spans[i][1] and b > spans[i][0] for j, (a, b) in enumerate(spans))]
    dec_n = sum(max(x.get("predicted_n", 0) - 1, 0) for x in alone)
    dec_ms = sum(x.get("predicted_ms") or 0 for x in alone)
    pr_n = sum(x.get("prompt_n") or 0 for x in alone)
    pr_ms = sum(x.get("prompt_ms") or 0 for x in alone)
    return {"alone_requests": len(alone),
            "alone_decode_ms_per_token": dec_ms / dec_n if dec_n else None,
            "alone_prompt_ms_per_token": pr_ms / pr_n if pr_n else None}


def in_flight(ok):
    """Per request (by index), how many others overlapped it in its own run."""
    spans = [(x["t"], x["t"] + x["wall_s"]) for x in ok]
    return [sum(1 for j, (a, b) in enumerate(spans) if j != i and a < e and b > s)
            for i, (s, e) in enumerate(spans)]


def request_key(x):
    return (x.get("conv"), x.get("turn"))


def decode_ms_per_token(x):
    n = x.get("predicted_n") or 0
    return x["predicted_ms"] / (n - 1) if n >= 2 and x.get("predicted_ms") else None


def median(values):
    return statistics.median(values) if values else None


def paired_ratios(run_ok, base_ok, warmup):
    """The same requests in two runs (same conversation and turn), paired. Returns the medians of
    run / base for TTFT and of base / run for decode speed (above 1: the run is faster), over
    all pairs, those sent at or after the warm-up, and those alone in both runs; the pairs'
    count, how many requests of either run found no pair, and the largest difference in send
    time between the two runs (the schedule's identity)."""
    ok_r = [x for x in run_ok if "wall_s" in x and "t" in x]
    ok_b = [x for x in base_ok if "wall_s" in x and "t" in x]
    base = {request_key(x): (x, n) for x, n in zip(ok_b, in_flight(ok_b))}
    out = {"pairs": 0, "unpaired": 0, "send_skew_s": 0.0}
    sets = {"all": ([], []), "steady": ([], []), "alone": ([], [])}
    for x, n in zip(ok_r, in_flight(ok_r)):
        b = base.get(request_key(x))
        if b is None:
            out["unpaired"] += 1
            continue
        b, nb = b
        out["pairs"] += 1
        out["send_skew_s"] = max(out["send_skew_s"], abs(x["t"] - b["t"]))
        keys = ["all"] + (["steady"] if b["t"] >= warmup else []) + (["alone"] if n == nb == 0 else [])
        tt = x["ttft_s"] / b["ttft_s"] if b.get("ttft_s") else None
        dr, db = decode_ms_per_token(x), decode_ms_per_token(b)
        dec = db / dr if dr and db else None
        for k in keys:
            if tt is not None:
                sets[k][0].append(tt)
            if dec is not None:
                sets[k][1].append(dec)
    out["unpaired"] += len(ok_b) - out["pairs"]
    for k, (tt, dec) in sets.items():
        out[f"ttft_{k}"] = median(tt)
        out[f"decode_{k}"] = median(dec)
        out[f"n_ttft_{k}"] = len(tt)
        out[f"n_decode_{k}"] = len(dec)
    return out


WIN_PARTS = ("server_cpu_ms", "server_delay_ms", "watch_cpu_ms", "self_cpu_ms", "busy_ms",
             "idle_ms", "system_ms", "softirq_ms")
WIN_VM = ("pgmigrate_success", "numa_hint_faults", "numa_pages_migrated", "pgpromote_success")


def window_totals(reqs):
    """Sums over requests of their windows ("win": what the CPU did while each was in flight,
    kvtier_llama_load): wall ms, the server's CPU and run delay, kvtierd's CPU ("watch"), the
    load generator's, the CPU's busy, idle, system and softirq time, and the vm counters. "other"
    is the busy time that is none of the server's, kvtierd's or the load generator's (kworkers,
    kdamond, interrupts)."""
    t = {k: 0.0 for k in ("wall_ms", "other_ms") + WIN_PARTS + WIN_VM}
    for x in reqs:
        w = x.get("win") or {}
        t["wall_ms"] += 1000 * x["wall_s"]
        for k in WIN_PARTS:
            t[k] += w.get(k) or 0
        for k in WIN_VM:
            t[k] += (w.get("vm") or {}).get(k) or 0
        t["other_ms"] += max(0.0, (w.get("busy_ms") or 0) - (w.get("server_cpu_ms") or 0)
                             - (w.get("watch_cpu_ms") or 0) - (w.get("self_cpu_ms") or 0))
    t["requests"] = len(reqs)
    return t


def where_time_goes(run_ok, base_ok):
    """The requests alone in both runs (one vCPU: nothing else of the workload ran in their
    windows), paired: the run's and the base's window totals over the same requests. The extra
    wall time splits into the server's extra CPU, kvtierd's CPU, other CPU (kworkers, interrupts,
    the load generator) and extra idle time (the server blocked with the CPU idle)."""
    ok_r = [x for x in run_ok if "wall_s" in x and "t" in x]
    ok_b = [x for x in base_ok if "wall_s" in x and "t" in x]
    base = {request_key(x): x for x, n in zip(ok_b, in_flight(ok_b)) if n == 0}
    pr, pb = [], []
    for x, n in zip(ok_r, in_flight(ok_r)):
        b = base.get(request_key(x))
        if n == 0 and b is not None and "win" in x and "win" in b:
            pr.append(x)
            pb.append(b)
    return {"run": window_totals(pr), "base": window_totals(pb)}


def where_table(runs):
    rows = [
        "Where the time goes: the requests alone in both runs (nothing else of the workload in "
        "flight; one vCPU), their windows summed (ms; the CPU's busy and idle time in 10 ms "
        "ticks, the rest per thread in ns). Extra: the run's total less none's over the same "
        "requests. other: busy time not the server's, kvtierd's or the load generator's "
        "(kworkers, kdamond, interrupts). Pages migrated (pgmigrate_success) and hint faults "
        "within the windows.",
        "",
        "| run | mode | requests | wall ms (extra) | server CPU (extra) | server run delay (extra) "
        "| kvtierd CPU | load generator CPU (extra) | other busy (extra) | idle (extra) "
        "| system / softirq (extra) | pages migrated, hint faults |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        v = r.get("vs_none")
        if not v or not v.get("where"):
            continue
        a, b = v["where"]["run"], v["where"]["base"]

        def d(k, a=a, b=b):
            return f"{a[k]:.0f} ({a[k] - b[k]:+.0f})"
        rows.append(
            f"| {r['run']} | {r['mode']} | {a['requests']} | {d('wall_ms')} | {d('server_cpu_ms')} "
            f"| {d('server_delay_ms')} | {a['watch_cpu_ms']:.0f} | {d('self_cpu_ms')} | {d('other_ms')} "
            f"| {d('idle_ms')} | {d('system_ms')} / {d('softirq_ms')} "
            f"| {a['pgmigrate_success']:.0f} ({b['pgmigrate_success']:.0f}), {a['numa_hint_faults']:.0f} "
            f"({b['numa_hint_faults']:.0f}) |")
    return "\n".join(rows)


def throughput(ok):
    """Generated tokens per second of wall time, from the first request sent to the last answer."""
    ok = [x for x in ok if "wall_s" in x and "t" in x]
    if not ok:
        return None
    span = max(x["t"] + x["wall_s"] for x in ok) - min(x["t"] for x in ok)
    return sum(max(x.get("predicted_n", 0), 0) for x in ok) / span if span > 0 else None


def summarize(lines, warmup):
    """One run's figures from its lines."""
    req = [x for x in lines if x.get("type") == "request"]
    ok = [x for x in req if x.get("status") == "ok"]
    truth = [x for x in lines if x.get("type") == "truth" and "active" in x]
    bench = {x.get("event"): x for x in lines if x.get("type") == "bench"}
    r = {
        "requests": len(req),
        "ok": len(ok),
        "failed": len(req) - len(ok),
        "timeouts": sum(1 for x in req if x.get("status") == "timeout"),
        "ttft_p50_s": percentile([x["ttft_s"] for x in ok], 50),
        "ttft_p99_s": percentile([x["ttft_s"] for x in ok], 99),
        "decode_tps": None,
        "predicted_tokens": sum(max(x.get("predicted_n", 0), 0) for x in ok),
        "cache_n_mean": statistics.mean([x["cache_n"] for x in ok]) if ok else None,
        "errors": [x.get("error") for x in lines if x.get("type") == "bench" and x.get("event") == "error"],
    }
    # Decode tokens/s over the run: generated tokens over the time spent generating them.
    pred_ms = sum(x.get("predicted_ms") or 0 for x in ok)
    if pred_ms > 0:
        r["decode_tps"] = r["predicted_tokens"] / (pred_ms / 1000)
    r.update(alone_rates(ok))
    r["tokens_per_wall_s"] = throughput(ok)
    r["ok_requests"] = ok
    late = [t for t in truth if t["t"] >= warmup]
    if late:
        r["hot_on_node1_bytes"] = statistics.mean(t["active"]["1"] for t in late)
        r["hot_bytes"] = statistics.mean(sum(t["active"].values()) for t in late)
        r["hot_on_node1_share"] = (r["hot_on_node1_bytes"] / r["hot_bytes"]) if r["hot_bytes"] else None
    if truth:
        end = truth[-1]
        r["idle_on_node1_end"] = end["idle"]["1"]
        r["unused_on_node1_end"] = end["unused"]["1"]
        cold_total = sum(end["idle"].values()) + sum(end["unused"].values())
        r["idle_unused_bytes_end"] = cold_total
        r["offload_share"] = (end["idle"]["1"] + end["unused"]["1"]) / cold_total if cold_total else None
        r["truth_samples"] = len(truth)
        # The buffer's bytes that came back from node 1, second by second (net per sample: a
        # lower bound), to set against kvtierd's and the kernel's promotions of the whole process.
        on1 = [sum(t[c]["1"] for c in ("active", "idle", "unused")) for t in truth]
        r["buffer_back_to_node0"] = sum(max(0, a - b) for a, b in zip(on1, on1[1:]))
    nm = bench.get("numa_maps")
    if nm and truth:
        # Outside the KV buffer (the heap with the prompt cache's copies, the model, libraries).
        end = truth[-1]
        r["other_on_node1_end"] = nm["node1_bytes"] - sum(end[c]["1"] for c in ("active", "idle", "unused"))
        r["other_on_node0_end"] = nm["node0_bytes"] - sum(end[c]["0"] for c in ("active", "idle", "unused"))
    cpu = bench.get("cpu")
    if cpu:
        tck = cpu.get("clk_tck") or 100
        span = max((x["t"] for x in req), default=0) or 1
        r["kvtierd_cpu_s"] = cpu["kvtierd_ticks"] / tck
        r["kvtierd_cpu_share"] = r["kvtierd_cpu_s"] / span
        r["server_cpu_s"] = cpu["server_ticks"] / tck
        r["server_cpu_ms_per_token"] = (1000 * r["server_cpu_s"] / r["predicted_tokens"]
                                        if r["predicted_tokens"] else None)
        r["kvtierd_gone"] = cpu.get("kvtierd_gone", 0)
        r["kvtierd_nice"] = cpu.get("kvtierd_nice")
    if "kvtierd" in bench:
        r["kvtierd"] = feedback_totals(bench["kvtierd"].get("status"))
    r["integrity"] = [(x.get("content"), x.get("tokens")) for x in lines
                      if x.get("type") == "integrity" and x.get("status") == "ok"]
    r["integrity_failed"] = sum(1 for x in lines if x.get("type") == "integrity" and x.get("status") != "ok")
    return r


def fmt(v, scale=1.0, digits=2, unit=""):
    if v is None:
        return "n/a"
    return f"{v / scale:.{digits}f}{unit}"


def ratio(a, b):
    return None if a is None or not b else a / b


def paired_table(runs, warmup):
    """The clients' figures request by request against none (and none against the first none)."""
    rows = [
        "The same requests, paired (conversation and turn) against none of the same repeat (none "
        "runs after the first: against the first none). TTFT: median of the ratio (x none, lower is "
        "better); decode: median of none's ms per token over the run's (x none, higher is better), "
        f"requests of 2 or more tokens; steady: sent at or after {warmup:.0f} s; alone: no other "
        "request in flight in either run. Tokens per wall second: generated tokens from the first "
        "send to the last answer. Old figure: the run's decode tok/s over the server's decode time "
        "(moves with the overlap).",
        "",
        "| run | mode | against | pairs (unpaired), send skew s | TTFT all / steady / alone (x) "
        "| decode all / steady / alone (x) | tokens per wall s (x) | old figure: decode tok/s (x) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        v = r.get("vs_none") or r.get("vs_first_none")
        if not v:
            continue
        p = v["paired"]

        def trio(kind, p=p):
            return " / ".join(f"{fmt(p[f'{kind}_{k}'], digits=3)} ({p[f'n_{kind}_{k}']})"
                              for k in ("all", "steady", "alone"))
        against = "none" if r.get("vs_none") else "none-1"
        rows.append(
            f"| {r['run']} | {r['mode']} | {against} | {p['pairs']} ({p['unpaired']}), {p['send_skew_s']:.2f} "
            f"| {trio('ttft')} | {trio('decode')} | {fmt(r.get('tokens_per_wall_s'), digits=3)} "
            f"({fmt(v.get('tokens_per_wall_s'), digits=3)}) | {fmt(r['decode_tps'])} ({fmt(v.get('decode_tps'), digits=3)}) |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--warmup", type=float, default=20, help="seconds left out of the hot average")
    a = ap.parse_args()
    runs = []
    for meta_path in sorted(glob.glob(os.path.join(a.out, "*.meta.json"))):
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        data = meta_path[: -len(".meta.json")] + ".jsonl"
        lines = load_lines(data) if os.path.exists(data) else []
        r = summarize(lines, a.warmup)
        r.update({"mode": meta["mode"], "run": meta["run"], "why": meta.get("why", ""),
                  "wall_s": meta.get("wall_s")})
        runs.append(r)
    if not runs:
        print(f"llama_report: no *.meta.json in {a.out}", file=sys.stderr)
        return 1
    none = {r["run"]: r for r in runs if r["mode"] == "none"}
    first_none = none[min(none)] if none else None
    for r in runs:
        base = none.get(r["run"])
        r["vs_none"] = None
        if base is not None and r is not base:
            r["vs_none"] = {
                "decode_tps": ratio(r["decode_tps"], base["decode_tps"]),
                "ttft_p50": ratio(r["ttft_p50_s"], base["ttft_p50_s"]),
                "ttft_p99": ratio(r["ttft_p99_s"], base["ttft_p99_s"]),
                "server_cpu_per_token": ratio(r.get("server_cpu_ms_per_token"),
                                              base.get("server_cpu_ms_per_token")),
                "alone_decode": ratio(r.get("alone_decode_ms_per_token"), base.get("alone_decode_ms_per_token")),
                "alone_prompt": ratio(r.get("alone_prompt_ms_per_token"), base.get("alone_prompt_ms_per_token")),
                "integrity_identical": bool(r["integrity"]) and r["integrity"] == base["integrity"],
                "tokens_per_wall_s": ratio(r.get("tokens_per_wall_s"), base.get("tokens_per_wall_s")),
                "paired": paired_ratios(r["ok_requests"], base["ok_requests"], a.warmup),
                "where": where_time_goes(r["ok_requests"], base["ok_requests"]),
            }
        elif r is base and first_none is not None and r is not first_none:
            # none against none: the spread the paired figures can resolve
            r["vs_first_none"] = {
                "decode_tps": ratio(r["decode_tps"], first_none["decode_tps"]),
                "ttft_p99": ratio(r["ttft_p99_s"], first_none["ttft_p99_s"]),
                "tokens_per_wall_s": ratio(r.get("tokens_per_wall_s"), first_none.get("tokens_per_wall_s")),
                "paired": paired_ratios(r["ok_requests"], first_none["ok_requests"], a.warmup),
            }
    order = {"none": 0, "kernel": 1, "kvtier": 2}
    runs.sort(key=lambda r: (r["run"], order.get(r["mode"], 9), r["mode"]))
    rows = [
        "| run | mode | requests (failed) | hot KV on node 1, avg after "
        f"{a.warmup:.0f} s | idle + unused on node 1 at the end | TTFT p50 / p99 s (x none) | decode tok/s (x none) "
        "| server CPU ms/token (x none) | requests alone: decode / prompt ms per token (x none) | kvtierd CPU | kvtierd demoted / promoted (by the kernel) / mis-demoted MiB, cold age "
        "| KV buffer back from node 1 MiB | rest of the server on node 0 / 1 at the end | integrity |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        v = r["vs_none"] or {}
        k = r.get("kvtierd")
        kv = (f"{k['demoted_bytes'] / MIB:.1f} / {k['promoted_bytes'] / MIB:.1f} "
              f"({k['kernel_promoted_bytes'] / MIB:.1f}) / {k['misdemoted_bytes'] / MIB:.1f}, "
              f"{fmt(k['cold_age_s'], digits=0)} s") if k else "-"
        integ = "(baseline)" if r["mode"] == "none" else (
            "identical" if v.get("integrity_identical") else "DIFFERS or missing")
        rows.append(
            f"| {r['run']} | {r['mode']} | {r['requests']} ({r['failed']}) "
            f"| {fmt(r.get('hot_on_node1_bytes'), MIB, 1, ' MiB')} of {fmt(r.get('hot_bytes'), MIB, 1, ' MiB')} "
            f"({fmt(r.get('hot_on_node1_share'), 0.01, 1, '%')}) "
            f"| {fmt(r.get('offload_share'), 0.01, 1, '%')} of {fmt(r.get('idle_unused_bytes_end'), MIB, 0, ' MiB')} "
            f"| {fmt(r['ttft_p50_s'])} / {fmt(r['ttft_p99_s'])} ({fmt(v.get('ttft_p50'))} / {fmt(v.get('ttft_p99'))}) "
            f"| {fmt(r['decode_tps'])} ({fmt(v.get('decode_tps'), digits=3)}) "
            f"| {fmt(r.get('server_cpu_ms_per_token'), digits=0)} ({fmt(v.get('server_cpu_per_token'), digits=3)}) "
            f"| {r['alone_requests']}: {fmt(r['alone_decode_ms_per_token'], digits=1)} / "
            f"{fmt(r['alone_prompt_ms_per_token'], digits=1)} ({fmt(v.get('alone_decode'))} / {fmt(v.get('alone_prompt'))}) "
            f"| {fmt(r.get('kvtierd_cpu_s'), digits=1, unit=' s')} ({fmt(r.get('kvtierd_cpu_share'), 0.01, 1, '%')}) "
            f"| {kv} | {fmt(r.get('buffer_back_to_node0'), MIB, 1)} | {fmt(r.get('other_on_node0_end'), MIB, 1)} / {fmt(r.get('other_on_node1_end'), MIB, 1, ' MiB')} "
            f"| {integ} |")
        if r["why"] or r["errors"]:
            rows.append(f"|  | | {r['why']} {'; '.join(str(e) for e in r['errors'])} | | | | | | | | | | | |")
    rows += ["", paired_table(runs, a.warmup), "", where_table(runs)]
    with open(os.path.join(a.out, "report.md"), "w", encoding="utf-8") as f:
        f.write("# llama-server in the tiered guest (scripts/bench.sh --workload llama-server)\n\n")
        f.write("\n".join(rows) + "\n")
    for r in runs:
        r.pop("integrity", None)
        r.pop("ok_requests", None)
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(runs, f, indent=1)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
