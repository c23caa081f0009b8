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
why ("not available: ...") and no numbers."""

import argparse
import json
import os
import re
import sys

from .inputs import MODE_TITLES, read_events
from .mode import analyse_mode
from .runs import aggregate, none_comparison, oracle_comparison
from .table import markdown_table, one_line
from .write import plot, run_context, write_report

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
