#!/usr/bin/env python3
"""Draws `kvtierctl replay --png`: residency over time of the recorded run and of each replayed
config (memory on CXL, MiB) and, when the replay had kvsim's ground truth, the DRAM share of
reads step by step.

Usage: replay_plot.py REPLAY.json OUT.png  (REPLAY.json: what `kvtierctl replay --json` prints)
kvtierctl runs it; it needs python3-matplotlib.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # A python3 first on PATH (a pyenv one) may lack Debian's python3-matplotlib.
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
                os.access("/usr/bin/python3", os.X_OK):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        sys.exit("kvtierctl replay --png: matplotlib is not installed "
                 "(apt install python3-matplotlib)")
    with open(sys.argv[1]) as f:
        j = json.load(f)
    runs = [("recorded", "recorded_steps", "black")]
    for name, colour in (("new", "tab:blue"), ("against", "tab:orange")):
        if name + "_steps" in j:
            runs.append((f"{name}: {j[name].get('config', '')}", name + "_steps", colour))
    truth = "truth" in j
    fig, axes = plt.subplots(2 if truth else 1, 1, figsize=(9, 6.5 if truth else 4), sharex=True,
                             squeeze=False)
    ax = axes[0][0]
    first = j["recorded_steps"][0]["t_ns"] if j["recorded_steps"] else 0
    for label, key, colour in runs:
        steps = j[key]
        t = [(s["t_ns"] - first) / 1e9 for s in steps]
        ax.plot(t, [s["slow_bytes"] / 2**20 for s in steps], label=f"{label}: on CXL", color=colour)
        ax.plot(t, [s["dram_bytes"] / 2**20 for s in steps], label=f"{label}: in DRAM",
                color=colour, linestyle=":")
    ax.set_ylabel("MiB of the target's memory")
    ax.set_title(f"kvtierctl replay {j['recording']}")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    if truth:
        ax2 = axes[1][0]
        for label, key, colour in runs:
            pts = [((s["t_ns"] - first) / 1e9, 100 * s["truth"]["dram_read_share"])
                   for s in j[key] if s["truth"]["read_bytes"] > 0]
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=label, color=colour,
                     marker=".")
        ax2.set_ylabel("DRAM share of reads (%)")
        ax2.set_ylim(0, 100)
        ax2.legend(fontsize="small")
        ax2.grid(alpha=0.3)
    axes[-1][0].set_xlabel("seconds since the first step")
    fig.tight_layout()
    try:
        fig.savefig(sys.argv[2], dpi=100)
    except OSError as e:
        sys.exit(f"kvtierctl replay --png: {sys.argv[2]}: {e.strerror}")


if __name__ == "__main__":
    main()
