#!/usr/bin/env python3
"""Writes kvtierd's recording and config out of a benchmark run's JSON lines.

Usage: scripts/bench/recording.py RUN.jsonl OUT.kvtrec [OUT.toml]
The run must be a kvtier mode run with KVTIER_RECORD=1 (scripts/bench/guest.sh emits the
recording as a "recording" event, base64, and the config as a "kvtier_config" event).
"""
import base64
import json
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    rec = cfg = None
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
                rec = base64.b64decode(ev["base64"])
                if len(rec) != ev["bytes"]:
                    sys.exit(f"{sys.argv[1]}: the recording has {len(rec)} bytes, "
                             f"the guest said {ev['bytes']}")
            elif ev.get("event") == "kvtier_config":
                cfg = ev["toml"]
    if rec is None:
        sys.exit(f"{sys.argv[1]}: no recording event (was the run made with KVTIER_RECORD=1?)")
    with open(sys.argv[2], "wb") as f:
        f.write(rec)
    print(f"{sys.argv[2]}: {len(rec)} bytes")
    if len(sys.argv) == 4:
        if cfg is None:
            sys.exit(f"{sys.argv[1]}: no kvtier_config event")
        with open(sys.argv[3], "w") as f:
            f.write(cfg + "\n")
        print(f"{sys.argv[3]}: the run's config")


if __name__ == "__main__":
    main()
