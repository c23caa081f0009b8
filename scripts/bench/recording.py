#!/usr/bin/env python3
"""Writes kvtierd's recording, its config and kvsim's ground truth out of a benchmark run's JSON lines.

Usage: scripts/bench/recording.py RUN.jsonl OUT.kvtrec [OUT.toml [TRUTH.kvtrec]]
The run must be a kvtier mode run with KVTIER_RECORD=1 (scripts/bench/guest.sh emits kvtierd's
recording as a "recording" event, base64, kvsim's ground truth as a "truth_recording" event and
the config as a "kvtier_config" event). Replay them with
`kvtierctl replay --config OUT.toml --truth TRUTH.kvtrec OUT.kvtrec`.
"""
import base64
import json
import sys


def decoded(ev, what):
    data = base64.b64decode(ev["base64"])
    if len(data) != ev["bytes"]:
        sys.exit(f"{sys.argv[1]}: the {what} has {len(data)} bytes, the guest said {ev['bytes']}")
    return data


def main():
    if len(sys.argv) not in (3, 4, 5):
        sys.exit(__doc__)
    rec = cfg = truth = None
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if ev.get("src") != "bench":
                continue
            if ev.get("event") == "recording":
                rec = decoded(ev, "recording")
            elif ev.get("event") == "truth_recording":
                truth = decoded(ev, "ground truth")
            elif ev.get("event") == "kvtier_config":
                cfg = ev["toml"]
    if rec is None:
        sys.exit(f"{sys.argv[1]}: no recording event (was the run made with KVTIER_RECORD=1?)")
    with open(sys.argv[2], "wb") as f:
        f.write(rec)
    print(f"{sys.argv[2]}: {len(rec)} bytes")
    if len(sys.argv) >= 4:
        if cfg is None:
            sys.exit(f"{sys.argv[1]}: no kvtier_config event")
        with open(sys.argv[3], "w") as f:
            f.write(cfg + "\n")
        print(f"{sys.argv[3]}: the run's config")
    if len(sys.argv) == 5:
        if truth is None:
            sys.exit(f"{sys.argv[1]}: no truth_recording event (a run made before kvsim wrote "
                     "its ground truth, or kvsim failed to start)")
        with open(sys.argv[4], "wb") as f:
            f.write(truth)
        print(f"{sys.argv[4]}: {len(truth)} bytes of kvsim's ground truth")


if __name__ == "__main__":
    main()
