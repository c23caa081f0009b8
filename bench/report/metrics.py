"""The metrics, each a pure function (unit-tested in tests/unit/bench_report_test.py)."""

from .inputs import DRAM_NODE, MIB, PAGE

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
