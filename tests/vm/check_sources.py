#!/usr/bin/env python3
"""Host-side checks of the source vm tests: reads the guest's HOTSET and RUN
lines (sources_guest.sh) from stdin and asserts on them. Prints the figures."""
import json
import sys

MiB = 1 << 20


def load(text):
    hot = run = None
    for line in text.splitlines():
        if line.startswith("HOTSET "):
            hot = json.loads(line[7:])
        elif line.startswith("RUN "):
            run = json.loads(line[4:])
    if hot is None or run is None:
        sys.exit("check_sources: no HOTSET/RUN lines in the guest's output")
    if not run.get("available", False):
        sys.exit(f"check_sources: source unavailable in the guest: {run.get('probe')}")
    return hot, run


def overlap(a0, a1, b0, b1):
    return max(0, min(a1, b1) - max(a0, b0))


def check_damon(hot, run):
    regions = [r for r in run["regions"] if overlap(r["start"], r["end"], hot["start"], hot["end"])]
    if not regions:
        sys.exit(f"damon: no region covers the buffer ({run['region_events']} region events)")
    max_acc = regions[0]["max_nr_accesses"]
    threshold = max_acc / 2
    found_hot = sum(overlap(r["start"], r["end"], hot["hot_start"], hot["hot_end"])
                    for r in regions if r["nr_accesses"] >= threshold)
    found_cold_as_hot = sum(overlap(r["start"], r["end"], hot["start"], hot["end"]) -
                            overlap(r["start"], r["end"], hot["hot_start"], hot["hot_end"])
                            for r in regions if r["nr_accesses"] >= threshold)
    true_hot = hot["hot_end"] - hot["hot_start"]
    print(f"damon: {len(regions)} regions over the buffer, {run['region_events']} region events, "
          f"hot (nr_accesses >= {threshold:.0f}/{max_acc}): {found_hot / MiB:.2f} of "
          f"{true_hot / MiB:.0f} MiB hot found, {found_cold_as_hot / MiB:.2f} MiB cold called hot; "
          f"stats {run.get('stats')}")
    for r in regions:
        print(f"  [{(r['start'] - hot['start']) / MiB:7.2f}, {(r['end'] - hot['start']) / MiB:7.2f}) MiB"
              f"  nr_accesses {r['nr_accesses']:3d}  age {r['age']}")
    ok = found_hot >= 0.75 * true_hot and found_cold_as_hot <= 0.25 * true_hot
    return ok


def check_hints(hot, run):
    pages = {int(a): w for a, w in run["pages"]}
    in_buf = [a for a in pages if hot["start"] <= a < hot["end"]]
    in_hot = [a for a in in_buf if hot["hot_start"] <= a < hot["hot_end"]]
    cold = len(in_buf) - len(in_hot)
    hot_pages = (hot["hot_end"] - hot["hot_start"]) // 4096
    stats = run.get("stats", {})
    print(f"hints: {len(in_hot)} of {hot_pages} hot pages faulted, {cold} cold pages faulted, "
          f"{len(pages) - len(in_buf)} pages outside the buffer; stats {stats}; "
          f"migrations {run.get('migrations')}")
    migrated = run.get("migrations", {}).get("numa_misplaced", {}).get("succeeded", 0)
    # The pages were all touched before the source attached: every fault seen
    # in the buffer is a NUMA hint fault or the write-protect fault after the
    # promotion it triggered; cold pages never fault.
    return len(in_hot) >= hot_pages // 2 and cold <= len(in_hot) // 20 and migrated > 0


def main():
    mode = sys.argv[1]
    hot, run = load(sys.stdin.read())
    ok = {"damon": check_damon, "hints": check_hints}[mode](hot, run)
    print(f"{mode}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
