#!/usr/bin/env python3
"""Host-side check of vm.damon_at_size: reads kvtier_damon_scale's JSON line for the 1 TiB
mapping from stdin and asserts kvtier's own mechanics exactly. Prints the figures."""
import json
import sys


def main():
    text = sys.stdin.read()
    print(text)
    rows = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("JSON ")]
    if len(rows) != 1:
        sys.exit(f"check_damon_at_size: FAIL: {len(rows)} JSON lines, expected 1")
    r = rows[0]
    problems = []
    # The shipped defaults ("auto", cold_age 10 s): sampling every 1 s, aggregating every 5 s,
    # at most the 1000 region checks a second (kDamonChecksPerSec) however large the target,
    # and a quarter of that as the minimum.
    want = {"gib": 1024, "sample_us": 1_000_000, "aggr_us": 5_000_000, "max_regions": 1000,
            "min_regions": 250}
    for key, value in want.items():
        if r[key] != value:
            problems.append(f"{key} {r[key]}, expected {value}")
    # The initial regions kvtierd wrote: the minimum count exactly (whole pages, rounded up, so
    # the remainder makes no piece of its own), tiling the mapping from its first byte to its last.
    if r["written"] != r["min_regions"]:
        problems.append(f"{r['written']} regions written, expected {r['min_regions']}")
    if not r["written_cover"]:
        problems.append("the written regions do not tile the mapping")
    # What the kdamond reported at each aggregation: inside the mapping, in order, disjoint,
    # never more than the bound kvtierd gave it.
    if r["aggregations"] < 1:
        problems.append("no aggregation reported")
    if not r["in_range"]:
        problems.append("a reported region lies outside the mapping, or out of order")
    if not 1 <= r["regions_min"] <= r["regions_max"] <= r["max_regions"]:
        problems.append(f"regions per aggregation {r['regions_min']}-{r['regions_max']}, "
                        f"bound {r['max_regions']}")
    if problems:
        sys.exit("check_damon_at_size: FAIL: " + "; ".join(problems))
    print(f"check_damon_at_size: ok: {r['written']} regions written over 1 TiB, "
          f"{r['regions_min']}-{r['regions_max']} reported, kdamond {r['kdamond_s']:.3f} s "
          f"in {r['window_s']:.1f} s (printed, not asserted)")


main()
